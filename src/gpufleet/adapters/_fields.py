"""Light, fast field access on parsed YAML with precise error paths (private to the adapters).

Every helper raises :class:`FieldError` (a path such as ``spec.containers[0].resources.limits.cpu``
and a message); the document loop in :mod:`gpufleet.adapters.k8s_yaml` turns it into an
:class:`~gpufleet.adapters.errors.InputError` that also names the file, document and object.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime
from typing import Any

from gpufleet.adapters.errors import describe
from gpufleet.adapters.quantity import QuantityError, to_milli

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

_EMPTY: dict[str, Any] = {}


class FieldError(Exception):
    """A bad field inside one object: ``path`` (dotted, may be empty) and ``message``."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def mapping(value: object, path: str) -> dict[str, Any]:
    """A mapping field; missing or null gives an empty (shared, read-only) mapping."""
    if isinstance(value, dict):
        return value
    if value is None:
        return _EMPTY
    raise FieldError(path, f"must be a mapping, got {describe(value)}")


def sequence(value: object, path: str) -> list[Any]:
    """A list field; missing or null gives an empty list."""
    if isinstance(value, list):
        return value
    if value is None:
        return []
    raise FieldError(path, f"must be a list, got {describe(value)}")


def mapping_items(value: object, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The items of a list of mappings, each with its path (a null item is an error)."""
    for i, raw in enumerate(sequence(value, path)):
        item_path = f"{path}[{i}]"
        if raw is None:
            raise FieldError(item_path, "must be a mapping, got null")
        yield item_path, mapping(raw, item_path)


def opt_str(value: object, path: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise FieldError(path, f"must be a string, got {describe(value)}")


def req_str(value: object, path: str) -> str:
    if isinstance(value, str) and value:
        return value
    if value is None:
        raise FieldError(path, "required field missing")
    if isinstance(value, str):
        raise FieldError(path, "must not be empty")
    raise FieldError(path, f"must be a string, got {describe(value)}")


def opt_bool(value: object, path: str, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    raise FieldError(path, f"must be true or false, got {describe(value)}")


def opt_int32(value: object, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if INT32_MIN <= value <= INT32_MAX:
            return value
        raise FieldError(path, f"must be a 32-bit integer, got {describe(value)}")
    raise FieldError(path, f"must be an integer, got {describe(value)}")


def scalar_text(value: object, path: str) -> str:
    """A label/annotation/selector value: a string; YAML ints, floats and booleans are taken as
    the text Kubernetes would see once quoted (``true`` -> ``"true"``); null is ``""``."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise FieldError(path, f"must be a string, got {describe(value)}")


def str_map(value: object, path: str) -> dict[str, str]:
    """A map[string]string (labels, annotations, nodeSelector)."""
    raw = mapping(value, path)
    out: dict[str, str] = {}
    for key, item in raw.items():
        if not isinstance(key, str):
            raise FieldError(path, f"keys must be strings, got {describe(key)}")
        out[key] = item if isinstance(item, str) else scalar_text(item, join(path, key))
    return out


def quantity(value: object, path: str) -> int:
    try:
        return to_milli(value)
    except QuantityError as err:
        raise FieldError(path, str(err)) from None


def timestamp(value: object, path: str) -> float | None:
    """An RFC 3339 timestamp as seconds since the epoch (UTC when no offset is given)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise FieldError(path, f"must be an RFC 3339 timestamp, got {describe(value)}") from None
    elif isinstance(value, datetime):  # an unquoted timestamp, already parsed by YAML
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    else:
        raise FieldError(path, f"must be an RFC 3339 timestamp, got {describe(value)}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.timestamp()
    except (OverflowError, ValueError, OSError):
        raise FieldError(path, f"timestamp out of range, got {describe(value)}") from None
