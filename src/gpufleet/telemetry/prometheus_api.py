"""The answer of a Prometheus server's ``GET /api/v1/query`` (an instant query), decoded with msgspec.

The envelope is Prometheus's (its HTTP API documentation): ``status`` ``success`` or ``error``;
``data`` with ``resultType`` and ``result``; ``errorType`` and ``error`` on failure; ``warnings`` and
``infos`` besides. The shape is not ours to fix, so fields Prometheus adds are ignored (msgspec's
default); a vector sample's ``value`` is ``[unix seconds, "value as a string"]`` (a native histogram
sample has ``histogram`` instead: not a gauge, left out).
"""

from __future__ import annotations

import msgspec

from gpufleet.telemetry.model import TelemetryError
from gpufleet.telemetry.readings import Sample

__all__ = ["decode_query_answer", "query_failure"]


class _VectorSample(msgspec.Struct):
    metric: dict[str, str]
    value: tuple[float, str] | None = None


class _Data(msgspec.Struct, rename="camel"):
    result_type: str
    result: msgspec.Raw = msgspec.Raw(b"[]")


class _Answer(msgspec.Struct, rename="camel"):
    status: str
    data: _Data | None = None
    error_type: str = ""
    error: str = ""
    warnings: list[str] = []


_ANSWER = msgspec.json.Decoder(_Answer)
_VECTOR = msgspec.json.Decoder(list[_VectorSample])


def _value(text: str) -> float:
    try:
        return float(text)  # Prometheus writes NaN, +Inf and -Inf as Go does; float() reads them
    except ValueError:
        return float("nan")


def _decode(body: bytes, source: str) -> _Answer:
    try:
        return _ANSWER.decode(body)
    except (msgspec.DecodeError, RecursionError) as err:
        raise TelemetryError(f"{source}: malformed answer: {err}") from None


def query_failure(body: bytes) -> str | None:
    """``errorType: error`` of an error envelope in ``body``, or None when ``body`` is not one (an
    HTTP error page from a proxy, say)."""
    try:
        answer = _ANSWER.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None
    if answer.status != "error":
        return None
    return f"{answer.error_type or 'error'}: {answer.error or 'no message'}"


def decode_query_answer(body: bytes, source: str) -> tuple[list[Sample], list[str]]:
    """The (metric name, labels, value) samples of an instant vector answer, and its warnings.

    Raises :class:`TelemetryError` (one line naming ``source``) for malformed JSON, ``status:
    error`` and any result type but ``vector``."""
    answer = _decode(body, source)
    if answer.status != "success":
        failure = query_failure(body) or f"status {answer.status!r}"
        raise TelemetryError(f"{source}: query failed: {failure}")
    if answer.data is None:
        raise TelemetryError(f"{source}: malformed answer: no data")
    if answer.data.result_type != "vector":
        raise TelemetryError(f"{source}: expected an instant vector, got resultType {answer.data.result_type!r}")
    try:
        vector = _VECTOR.decode(answer.data.result)
    except (msgspec.DecodeError, RecursionError) as err:
        raise TelemetryError(f"{source}: malformed answer: data.result: {err}") from None
    samples: list[Sample] = [
        (s.metric.get("__name__", ""), s.metric, _value(s.value[1])) for s in vector if s.value is not None
    ]
    return samples, answer.warnings
