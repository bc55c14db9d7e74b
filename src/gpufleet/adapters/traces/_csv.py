"""Reading trace CSVs row by row with exact ``FILE:LINE: field: problem`` errors (private).

Every trace loader reads its file through :func:`read_text` and :class:`Rows`: the text is decoded
once (UTF-8, a byte-order mark allowed), NUL bytes and CSV structure errors are reported with their
line, and each data row is handed to a parser that raises :class:`RowError` for a bad field. With
``skip_bad_rows`` a bad row is counted and skipped; without, the first one raises
:class:`~gpufleet.adapters.errors.InputError`.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from gpufleet.adapters.errors import InputError, describe
from gpufleet.adapters.traces.records import LoadReport

__all__ = [
    "MAX_ERRORS_KEPT",
    "RowError",
    "Rows",
    "check_header",
    "decode",
    "opt_number",
    "read_text",
    "req_int",
    "req_number",
    "timestamp_s",
]

T = TypeVar("T")

MAX_ERRORS_KEPT = 5  # LoadReport.first_errors keeps this many messages
_INT = re.compile(r"\s*[+-]?\d{1,18}\s*")
# float() would also take "1_000", "nan", "infinity" and "0x1p3": only plain decimal numbers here.
_NUMBER = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d{1,3})?\s*")


class RowError(Exception):
    """A bad field in one row: ``field`` (a column name, or "row") and ``problem``."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def read_text(path: str | Path) -> str:
    """The whole file as text; any reading problem is an InputError naming the file."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"{source}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{source}: is a directory, not a CSV file") from None
    except OSError as err:
        raise InputError(f"{source}: cannot read: {err.strerror or err}") from None
    except ValueError as err:  # e.g. a NUL character in the path
        raise InputError(f"{describe(source)}: cannot read: {err}") from None
    return decode(data, source)


def decode(data: bytes, source: str) -> str:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise InputError(f"{source}:{line}: file: not UTF-8 text (byte 0x{data[err.start]:02x})") from None
    nul = text.find("\0")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise InputError(f"{source}:{line}: file: contains a NUL byte (a binary file, not CSV)")
    return text


class Rows:
    """The rows of one CSV text after its header, with line numbers, and the bad-row bookkeeping."""

    def __init__(self, text: str, source: str, *, skip_bad_rows: bool, has_header: bool = True) -> None:
        self.source = source
        self.skip_bad_rows = skip_bad_rows
        self.skipped = 0
        self.errors: list[str] = []
        self._names: dict[str, int] = {}
        self._reader = csv.reader(io.StringIO(text, newline=""))
        self.header: list[str] = []
        self.header_line = 1
        if has_header:
            first = self._next()
            if first is None:
                raise InputError(f"{source}:1: header: empty file (expected a CSV header line)")
            self.header_line, cells = first
            self.header = [name.strip() for name in cells]

    def _next(self) -> tuple[int, list[str]] | None:
        """The next non-blank row and its (last physical) line number; None at the end."""
        while True:
            try:
                row = next(self._reader)
            except StopIteration:
                return None
            except csv.Error as err:
                raise InputError(f"{self.source}:{self._reader.line_num}: row: malformed CSV: {err}") from None
            if _filled(row):
                return self._reader.line_num, row

    def collect(self) -> list[tuple[int, list[str]]]:
        """All remaining non-blank rows with their line numbers (a tight loop, for large files)."""
        reader = self._reader
        out: list[tuple[int, list[str]]] = []
        try:
            for row in reader:
                if row and (len(row) > 1 or row[0].strip()):  # _filled, inlined
                    out.append((reader.line_num, row))
        except csv.Error as err:
            raise InputError(f"{self.source}:{reader.line_num}: row: malformed CSV: {err}") from None
        return out

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        while (item := self._next()) is not None:
            yield item

    def claim(self, text: str, field: str, line: int) -> str:
        """``text`` stripped as a name that must be non-empty and unique within the file."""
        name = text.strip()
        if not name:
            raise RowError(field, "required value missing")
        first = self._names.setdefault(name, line)
        if first != line:
            raise RowError(field, f"{describe(name)} repeats the one on line {first}")
        return name

    def header_error(self, problem: str) -> InputError:
        return InputError(f"{self.source}:{self.header_line}: header: {problem}")

    def bad(self, line: int, err: RowError) -> None:
        """Record a bad row, or raise it when bad rows are not skipped."""
        message = f"{self.source}:{line}: {err.field}: {err.problem}"
        if not self.skip_bad_rows:
            raise InputError(message)
        self.skipped += 1
        if len(self.errors) < MAX_ERRORS_KEPT:
            self.errors.append(message)

    def parse_all(
        self,
        width: int,
        parse: Callable[[int, list[str]], T],
        items: Iterable[tuple[int, list[str]]] | None = None,
    ) -> list[T]:
        """``parse(line, row)`` for every row (``items``, else the rest of the file) of exactly
        ``width`` cells; bad rows raise or are skipped."""
        out: list[T] = []
        for line, row in self if items is None else items:
            try:
                if len(row) != width:
                    raise RowError("row", f"expected {width} columns, got {len(row)}")
                out.append(parse(line, row))
            except RowError as err:
                self.bad(line, err)
        return out

    def report(self, rows: int, kind: str) -> LoadReport:
        return LoadReport(
            path=self.source, rows=rows, skipped=self.skipped, first_errors=tuple(self.errors), kind=kind
        )


def _filled(row: list[str]) -> bool:
    """Not a blank line: a line of only spaces is blank, a line of empty cells ("a,,") is a row."""
    return bool(row) and (len(row) > 1 or bool(row[0].strip()))


def check_header(rows: Rows, expected: Sequence[str]) -> None:
    if rows.header != list(expected):
        raise rows.header_error(f"expected columns {','.join(expected)}, got {describe(','.join(rows.header))}")


# ------------------------------------------------------------------------------------ fields


def req_int(text: str, field: str, low: int = 0, high: int | None = None) -> int:
    """A whole number in [low, high]."""
    if _INT.fullmatch(text) is None:
        if not text.strip():
            raise RowError(field, "required value missing")
        if _NUMBER.fullmatch(text) is not None:
            raise RowError(field, f"must be a whole number, got {describe(text)}")
        raise RowError(field, f"must be an integer, got {describe(text)}")
    value = int(text)
    if value < low:
        raise RowError(field, f"must not be negative, got {value}" if low == 0 else f"must be >= {low}, got {value}")
    if high is not None and value > high:
        raise RowError(field, f"must be <= {high}, got {value}")
    return value


def req_number(text: str, field: str, low: float = 0.0) -> float:
    """A finite decimal number >= low."""
    if _NUMBER.fullmatch(text) is None:
        if not text.strip():
            raise RowError(field, "required value missing")
        raise RowError(field, f"must be a number, got {describe(text)}")
    value = float(text)
    if not math.isfinite(value):
        raise RowError(field, f"must be a finite number, got {describe(text)}")
    if value < low:
        bound = "must not be negative" if low == 0 else f"must be >= {low:g}"
        raise RowError(field, f"{bound}, got {describe(text)}")
    return value


def opt_number(text: str, field: str, low: float = 0.0) -> float | None:
    """A number, or None for an empty cell."""
    return None if not text.strip() else req_number(text, field, low)


def timestamp_s(text: str, field: str) -> float:
    """An ISO-8601 date-time in seconds since the epoch; no offset means UTC."""
    try:
        moment = datetime.fromisoformat(text.strip())
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.timestamp()
    except (ValueError, OverflowError):
        raise RowError(field, f"must be seconds or an ISO-8601 date-time, got {describe(text)}") from None
