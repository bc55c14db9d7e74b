"""The GPUs' health kept on the Node across agent restarts: the ``gpufleet.dev/gpu-health`` annotation.

A JSON document (``{"version": 1, "gpus": [...]}``) validated by msgspec structs that forbid
unknown fields (as pydantic's ``extra="forbid"`` would; msgspec because the agent's kube client
loads it anyway, and pydantic's models would cost the agent about 10 MiB of its 60: BENCHMARKS.md,
"Issue 15: the agent's footprint"). Whatever is there (a hand edit, a truncated write, another program's content)
must not crash the agent: :func:`load_health` never raises; on bad content it returns no history
and a one-line error, the agent logs it and goes on with "unknown history" (every GPU is judged
afresh from its next reading: a condition the hardware still reports marks it again, and a GPU
marked only by a past Xid comes back, which the Event of the failed load tells the operator).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Literal

import msgspec

from gpufleet.agent.health.machine import MAX_REASON_CHARS, GpuHealth, HealthState
from gpufleet.domain import LABEL_PREFIX

__all__ = ["ANNOTATION_GPU_HEALTH", "LoadedHealth", "dump_health", "load_health"]

ANNOTATION_GPU_HEALTH = f"{LABEL_PREFIX}gpu-health"
MAX_ANNOTATION_CHARS = 65536  # 8 GPUs take about 3 KiB; the API server allows 256 KiB for all annotations
MAX_GPUS = 64
MAX_XID_TIMES = 1000

_Time = Annotated[float, msgspec.Meta(ge=0)]


class _GpuModel(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    index: Annotated[int, msgspec.Meta(ge=0, le=999_999)]  # the engine's index grammar: up to six digits
    uuid: Annotated[str, msgspec.Meta(max_length=128)]
    state: Literal["Healthy", "Unhealthy", "Unknown"]
    reason: Annotated[str, msgspec.Meta(max_length=MAX_REASON_CHARS)]
    since: _Time
    lastBadAt: _Time | None = None  # camelCase: the JSON spells fields as Kubernetes does
    cleanSince: _Time | None = None
    eccDbeBaseline: Annotated[int, msgspec.Meta(ge=0)] | None = None
    pending: bool = False
    appXidTimes: Annotated[list[_Time], msgspec.Meta(max_length=MAX_XID_TIMES)] = []


class _HealthDocument(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    version: Literal[1]
    gpus: Annotated[list[_GpuModel], msgspec.Meta(max_length=MAX_GPUS)]


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(_HealthDocument)
_AT = re.compile(r"^(.*) - at `\$\.?(.*)`$")


@dataclass(frozen=True, slots=True)
class LoadedHealth:
    """The GPUs' health read back, by index; ``error`` (one line) when the annotation was unusable."""

    gpus: Mapping[int, GpuHealth]
    error: str | None = None


def dump_health(gpus: Iterable[GpuHealth]) -> str:
    """The annotation's value for ``gpus`` (compact JSON, GPUs in index order). Never raises: the
    structs are not validated on the way out, so a value out of the annotation's bounds (a
    200-character UUID, a NaN time written as null) is written, and refused by :func:`load_health`
    with its one line, not a crash of the agent."""
    document = _HealthDocument(version=1, gpus=[
        _GpuModel(index=gpu.index, uuid=gpu.uuid, state=gpu.state.value,
                  reason=gpu.reason, since=gpu.since, lastBadAt=gpu.last_bad_at, cleanSince=gpu.clean_since,
                  eccDbeBaseline=gpu.ecc_dbe_baseline, pending=gpu.pending, appXidTimes=list(gpu.app_xid_times))
        for gpu in sorted(gpus, key=lambda gpu: gpu.index)
    ])
    return _ENCODER.encode(document).decode()


def _first_error(err: msgspec.DecodeError) -> str:
    """msgspec's "Expected `int` >= 0 - at `$.gpus[0].index`" as "gpus.0.index: Expected `int` >= 0"."""
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    if not isinstance(err, msgspec.ValidationError):  # (a ValidationError is a DecodeError too)
        return f"the document: Invalid JSON: {text}"
    match = _AT.match(text)
    if match is None:
        return f"the document: {text}"
    where = re.sub(r"\[(\d+)\]", r".\1", match.group(2)) or "the document"
    return f"{where}: {match.group(1)}"


def load_health(text: str | None) -> LoadedHealth:
    """The GPUs' health from the annotation's value (``None``: no annotation, no history). Never raises."""
    if text is None:
        return LoadedHealth(MappingProxyType({}))
    problem: str | None = None
    if len(text) > MAX_ANNOTATION_CHARS:
        problem = f"longer than {MAX_ANNOTATION_CHARS} characters"
    else:
        try:
            document = _DECODER.decode(text)
        except (msgspec.ValidationError, msgspec.DecodeError) as err:
            problem = _first_error(err)
        else:
            indices = [gpu.index for gpu in document.gpus]
            if len(set(indices)) != len(indices):
                problem = "gpus: repeats a GPU index"
    if problem is not None:
        return LoadedHealth(MappingProxyType({}),
                            f"annotation {ANNOTATION_GPU_HEALTH}: {problem}; starting with unknown GPU history")
    return LoadedHealth(MappingProxyType({
        gpu.index: GpuHealth(index=gpu.index, uuid=gpu.uuid, state=HealthState(gpu.state), reason=gpu.reason,
                             since=gpu.since, last_bad_at=gpu.lastBadAt, clean_since=gpu.cleanSince,
                             ecc_dbe_baseline=gpu.eccDbeBaseline, pending=gpu.pending,
                             app_xid_times=tuple(gpu.appXidTimes))
        for gpu in document.gpus
    }))
