"""gpufleet's generic job-history CSV: one row per job, a header naming the columns (any order).

The format is documented in docs/trace-formats.md ("Generic CSV"). In short: ``submit_time`` and
``gpus`` are required; times are seconds or ISO-8601 date-times (one form per file); ``submit_s`` is
measured from the earliest submit time in the file; columns named ``attr.<key>`` are kept in
``TraceJob.attrs``; any other unknown column is an error (a typo such as ``gpu`` for ``gpus`` must
not be silently ignored).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gpufleet.adapters.errors import describe
from gpufleet.adapters.quantity import QuantityError, to_milli
from gpufleet.adapters.traces._csv import RowError, Rows, req_int, req_number, timestamp_s
from gpufleet.adapters.traces.openb import gpu_models, gpu_request
from gpufleet.adapters.traces.records import LoadReport, TraceJob
from gpufleet.domain.units import MILLI_PER_MIB

__all__ = ["ATTR_COLUMNS", "ATTR_PREFIX", "COLUMNS", "dump_generic_csv", "is_generic_header", "parse_generic"]

ATTR_PREFIX = "attr."
ATTR_COLUMNS = ("queue", "user", "group", "vc")  # kept in TraceJob.attrs under the same key
COLUMNS = (
    "name",
    "submit_time",
    "start_time",
    "end_time",
    "duration",
    "gpus",
    "gpu_milli",
    "cpu",
    "cpu_milli",
    "memory",
    "memory_mib",
    "priority",
    "checkpoint_interval",
    "gpu_model",
    *ATTR_COLUMNS,
)
REQUIRED = ("submit_time", "gpus")
_EXCLUSIVE = (("cpu", "cpu_milli"), ("memory", "memory_mib"), ("duration", "end_time"))
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
_SECONDS = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d{1,3})?\s*")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def is_generic_header(header: list[str]) -> bool:
    """Has one of the required columns (the other one missing is then reported precisely)."""
    return any(column in header for column in REQUIRED)


@dataclass(slots=True)
class _Clock:
    """Times are all seconds or all ISO-8601: the first time read decides for the file."""

    iso: bool | None = None

    def read(self, text: str, field: str) -> float:
        seconds = _SECONDS.fullmatch(text) is not None
        value = req_number(text, field, low=-math.inf) if seconds else timestamp_s(text, field)
        if self.iso is None:
            self.iso = not seconds
        elif seconds == self.iso:
            form = "ISO-8601 date-times" if self.iso else "seconds"
            raise RowError(field, f"the file's times are {form} (from its first row), got {describe(text)}")
        return value


def _check_header(rows: Rows) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, column in enumerate(rows.header):
        if column in index:
            raise rows.header_error(f"column {describe(column)} appears twice")
        if column.startswith(ATTR_PREFIX):
            if not column[len(ATTR_PREFIX) :]:
                raise rows.header_error(f'column "{ATTR_PREFIX}" needs a key after the prefix')
        elif column not in COLUMNS:
            raise rows.header_error(
                f"unknown column {describe(column)} (known: {', '.join(COLUMNS)}; "
                f"prefix a column with {ATTR_PREFIX!r} to keep it as an attribute)"
            )
        index[column] = i
    for column in REQUIRED:
        if column not in index:
            raise rows.header_error(f"required column {describe(column)} missing")
    for a, b in _EXCLUSIVE:
        if a in index and b in index:
            raise rows.header_error(f'give either "{a}" or "{b}", not both')
    return index


def _quantity(text: str, field: str) -> int:
    try:
        return to_milli(text.strip())
    except QuantityError as err:
        raise RowError(field, str(err)) from None


def _row_parser(
    rows: Rows, index: Mapping[str, int], clock: _Clock
) -> Callable[[int, list[str]], tuple[TraceJob, float]]:
    attr_columns = [(c[len(ATTR_PREFIX) :], i) for c, i in index.items() if c.startswith(ATTR_PREFIX)]
    attr_columns += [(c, index[c]) for c in ATTR_COLUMNS if c in index]

    def cell(row: list[str], column: str) -> str:
        i = index.get(column)
        return "" if i is None else row[i].strip()

    def parse(line: int, row: list[str]) -> tuple[TraceJob, float]:
        name = cell(row, "name") or f"job-{line - 1:06d}"
        if _NAME.fullmatch(name) is None:
            raise RowError("name", f"must be letters, digits, '.', '_' or '-' (at most 253), got {describe(name)}")
        name = rows.claim(name, "name", line)
        if not cell(row, "submit_time"):
            raise RowError("submit_time", "required value missing")
        submit = clock.read(cell(row, "submit_time"), "submit_time")
        start = clock.read(cell(row, "start_time"), "start_time") if cell(row, "start_time") else None
        if start is not None and start < submit:
            raise RowError("start_time", "is before submit_time")
        duration: float | None = None
        if cell(row, "duration"):
            duration = req_number(cell(row, "duration"), "duration")
        elif cell(row, "end_time"):
            end = clock.read(cell(row, "end_time"), "end_time")
            began = submit if start is None else start
            if end < began:
                raise RowError("end_time", f"is before {'submit_time' if start is None else 'start_time'}")
            duration = end - began
        gpus_text = cell(row, "gpus")
        milli_text = cell(row, "gpu_milli") or ("1000" if req_int(gpus_text, "gpus") > 0 else "0")
        num_gpu, gpu_milli = gpu_request(gpus_text, milli_text, "gpus", "gpu_milli")
        if "cpu" in index:
            cpu_milli = _quantity(cell(row, "cpu"), "cpu") if cell(row, "cpu") else 0
        else:
            cpu_milli = req_int(cell(row, "cpu_milli"), "cpu_milli") if cell(row, "cpu_milli") else 0
        if "memory" in index:
            memory = _quantity(cell(row, "memory"), "memory") if cell(row, "memory") else 0
            memory_mib = -(-memory // MILLI_PER_MIB)  # rounded up to whole MiB
        else:
            memory_mib = req_int(cell(row, "memory_mib"), "memory_mib") if cell(row, "memory_mib") else 0
        priority = req_int(cell(row, "priority"), "priority", INT32_MIN, INT32_MAX) if cell(row, "priority") else None
        checkpoint: float | None = None
        if cell(row, "checkpoint_interval"):
            checkpoint = req_number(cell(row, "checkpoint_interval"), "checkpoint_interval")
            if checkpoint <= 0:
                raise RowError("checkpoint_interval", "must be > 0 seconds (leave it empty for the default)")
        attrs = {key: row[i].strip() for key, i in attr_columns if row[i].strip()}
        if start is not None:
            attrs["wait_s"] = f"{start - submit:g}"
        job = TraceJob(
            name=name,
            submit_s=0.0,  # set once the earliest submit time is known
            duration_s=duration,
            num_gpu=num_gpu,
            gpu_milli=gpu_milli,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
            gpu_models=gpu_models(cell(row, "gpu_model"), "gpu_model"),
            priority=priority,
            checkpoint_s=checkpoint,
            attrs=attrs,
        )
        return job, submit

    return parse


def parse_generic(rows: Rows) -> tuple[list[TraceJob], LoadReport]:
    index = _check_header(rows)
    clock = _Clock()
    parsed = rows.parse_all(len(rows.header), _row_parser(rows, index, clock))
    start = min((submit for _, submit in parsed), default=0.0)
    jobs = [_with_submit(job, submit - start) for job, submit in parsed]
    report = rows.report(len(jobs), "generic")
    return jobs, dataclasses.replace(report, start_epoch_s=start) if parsed and clock.iso else report


def _with_submit(job: TraceJob, submit_s: float) -> TraceJob:
    return TraceJob(
        name=job.name,
        submit_s=submit_s,
        duration_s=job.duration_s,
        num_gpu=job.num_gpu,
        gpu_milli=job.gpu_milli,
        cpu_milli=job.cpu_milli,
        memory_mib=job.memory_mib,
        gpu_models=job.gpu_models,
        priority=job.priority,
        checkpoint_s=job.checkpoint_s,
        attrs=job.attrs,
    )


def dump_generic_csv(jobs: Iterable[TraceJob]) -> str:
    """``jobs`` in the generic format (times in seconds); loading the text gives the same jobs,
    with submit times shifted so that the earliest is 0."""
    jobs = list(jobs)
    extra = sorted({key for job in jobs for key in job.attrs if key not in ATTR_COLUMNS})
    header = [
        "name",
        "submit_time",
        "duration",
        "gpus",
        "gpu_milli",
        "cpu_milli",
        "memory_mib",
        "priority",
        "checkpoint_interval",
        "gpu_model",
        *ATTR_COLUMNS,
        *(ATTR_PREFIX + key for key in extra),
    ]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for job in jobs:
        writer.writerow(
            [
                job.name,
                repr(job.submit_s),
                "" if job.duration_s is None else repr(job.duration_s),
                job.num_gpu,
                job.gpu_milli,
                job.cpu_milli,
                job.memory_mib,
                "" if job.priority is None else job.priority,
                "" if job.checkpoint_s is None else repr(job.checkpoint_s),
                "|".join(job.gpu_models),
                *(job.attrs.get(key, "") for key in ATTR_COLUMNS),
                *(job.attrs.get(key, "") for key in extra),
            ]
        )
    return out.getvalue()
