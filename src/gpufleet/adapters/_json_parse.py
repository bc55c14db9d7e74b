"""Parse JSON text into Python objects with msgspec (private to the adapters).

What ``kubectl get -o json`` prints: one object, often a ``kind: List`` with ``items``; also a top-level
array of objects, or several JSON values one after another (a stream, as ``kubectl get -o json`` run
twice into one file, or JSON Lines). Every top-level value is a document, and the elements of a
top-level array are documents of their own, so that "document N" in messages counts objects as the
YAML loader does. Malformed JSON is one :class:`InputError` line naming the source, the line and
column.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

import msgspec

from gpufleet.adapters.errors import InputError

__all__ = ["is_json_source", "looks_like_json", "parse_json_documents"]

_DECODER = msgspec.json.Decoder()
_BYTE = re.compile(r"\(byte (\d+)\)")
_AT = re.compile(r" - at `[^`]*`$")  # msgspec's path of a value it refused: always `$[...]` here
_SPACE = " \t\r\n"


def is_json_source(source: str) -> bool | None:
    """True for a ``.json`` file, False for ``.yaml``/``.yml``, None when the name does not say."""
    suffix = PurePath(source).suffix.lower()
    if suffix == ".json":
        return True
    if suffix in (".yaml", ".yml"):
        return False
    return None


def looks_like_json(text: str) -> bool:
    """Whether the first character that is not white space (or a byte-order mark) opens a JSON
    object or array."""
    start = _skip_space(text, 0)
    if text.startswith("\ufeff", start):
        start = _skip_space(text, start + 1)
    return start < len(text) and text[start] in "{["


def _skip_space(text: str, start: int) -> int:
    end = len(text)
    while start < end and text[start] in _SPACE:
        start += 1
    return start


def _place(text: str, char_offset: int) -> str:
    """ "line L, column C" (both from 1) of a character offset."""
    line = text.count("\n", 0, char_offset) + 1
    column = char_offset - (text.rfind("\n", 0, char_offset) + 1) + 1
    return f"line {line}, column {column}"


def _char_offset(data: bytes, byte_offset: int) -> int:
    return len(data[:byte_offset].decode("utf-8", errors="replace"))


def _malformed(err: Exception, text: str, data: bytes, start: int, source: str) -> InputError:
    """One line for a msgspec error in the value that begins at byte ``start`` of ``data``."""
    if isinstance(err, RecursionError):
        return InputError(f"{source}: malformed JSON: nested too deeply")
    message = str(err)
    found = _BYTE.search(message)
    detail = _AT.sub("", _BYTE.sub("", message)).removeprefix("JSON is malformed:").strip()
    if detail.lower() == "input data was truncated":
        return InputError(f"{source}: {_place(text, len(text))}: malformed JSON: unexpected end of input")
    if found is None:  # e.g. "Number out of range": msgspec gives no place
        return InputError(f"{source}: malformed JSON: {detail[:1].lower()}{detail[1:]}")
    at = start + int(found.group(1))
    return InputError(f"{source}: {_place(text, _char_offset(data, at))}: malformed JSON: {detail}")


def parse_json_documents(text: str, source: str) -> list[Any]:
    """The documents of JSON text (see the module's description); InputError for malformed JSON."""
    data = text.encode("utf-8")
    documents: list[Any] = []
    start = 0
    end = len(data)
    while True:
        while start < end and data[start] in b" \t\r\n":
            start += 1
        if start == end:
            break
        if data.startswith(b"\xef\xbb\xbf", start):  # a byte-order mark where a value starts
            start += 3
            continue
        chunk = memoryview(data)[start:]
        try:
            value = _DECODER.decode(chunk)
            stop = end
        except msgspec.DecodeError as err:
            trailing = _BYTE.search(str(err)) if "trailing characters" in str(err) else None
            if trailing is None:
                raise _malformed(err, text, data, start, source) from None
            stop = start + int(trailing.group(1)) - 1  # msgspec counts the first trailing byte as read
            try:
                value = _DECODER.decode(chunk[: stop - start])
            except (msgspec.DecodeError, RecursionError) as inner:  # pragma: no cover - the prefix decoded above
                raise _malformed(inner, text, data, start, source) from None
        except RecursionError as err:
            raise _malformed(err, text, data, start, source) from None
        if isinstance(value, list):
            documents.extend(value)
        else:
            documents.append(value)
        start = stop
    return documents
