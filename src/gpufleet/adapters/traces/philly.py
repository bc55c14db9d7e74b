"""Microsoft Philly (Jeon et al., ATC'19), the processed job list of the Pollux artifact.

Columns ``timestamp,duration,num_gpus,gpu_time,cluster``: submission time (``YYYY-MM-DD HH:MM:SS``,
no zone; read as UTC, which only matters for hour-of-day analyses), run time in seconds, whole GPUs,
GPU-seconds (redundant: duration x num_gpus) and the virtual cluster. ``submit_s`` is measured from
the earliest timestamp in the file; rows stay in file order (the file is not sorted by time).

82,247 rows: a clean file is checked and converted column by column with NumPy; only when a
column fails that check is the file read row by row, which finds and reports the bad row exactly.
"""

from __future__ import annotations

import dataclasses
import re
import warnings

import numpy as np

from gpufleet.adapters.traces._csv import RowError, Rows, check_header, req_int, req_number, timestamp_s
from gpufleet.adapters.traces.records import LoadReport, TraceJob

__all__ = ["COLUMNS", "parse_philly"]

COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
MAX_GPUS_PER_JOB = 4096

_Row = tuple[str, float, float, int, str, str]  # name, submit epoch s, duration, gpus, vc, timestamp text

# Whole-column shapes the fast path accepts (each cell followed by "\n"); anything else goes row by row.
_TIMESTAMPS = re.compile(r"(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\n)*")
_DECIMALS = re.compile(r"(?:\d{1,15}(?:\.\d{0,9})?\n)*")
_COUNTS = re.compile(r"(?:\d{1,4}\n)*")


def _name(line: int) -> str:
    return f"philly-{line - 1:05d}"  # the data row number: stable when other rows are skipped


def _row(line: int, row: list[str]) -> _Row:
    submitted = timestamp_s(row[0], "timestamp")
    duration = req_number(row[1], "duration")
    gpus = req_int(row[2], "num_gpus", 0, MAX_GPUS_PER_JOB)
    req_number(row[3], "gpu_time")
    vc = row[4].strip()
    if not vc:
        raise RowError("cluster", "required value missing")
    return _name(line), submitted, duration, gpus, vc, row[0].strip()


def _column(items: list[tuple[int, list[str]]], i: int) -> str:
    return "".join(row[i] + "\n" for _, row in items)


def _fast(items: list[tuple[int, list[str]]]) -> list[_Row] | None:
    """Every row converted at once, or None when any cell is not in the plain form."""
    if any(len(row) != len(COLUMNS) for _, row in items):
        return None
    stamps, durations, counts, gpu_times = (_column(items, i) for i in range(4))
    if not (
        _TIMESTAMPS.fullmatch(stamps)
        and _DECIMALS.fullmatch(durations)
        and _COUNTS.fullmatch(counts)
        and _DECIMALS.fullmatch(gpu_times)
    ):
        return None
    vcs = [row[4].strip() for _, row in items]
    if not all(vcs):
        return None
    texts = stamps.split("\n")[:-1]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            seconds = np.array(texts, dtype="datetime64[s]").astype(np.int64)
    except ValueError:  # e.g. month 13: the row-by-row path names the row
        return None
    gpus = np.array(counts.split("\n")[:-1], dtype=np.int64)
    if gpus.size and int(gpus.max()) > MAX_GPUS_PER_JOB:
        return None
    duration = np.array(durations.split("\n")[:-1], dtype=np.float64)
    names = [_name(line) for line, _ in items]
    return list(zip(names, seconds.tolist(), duration.tolist(), gpus.tolist(), vcs, texts, strict=True))


def parse_philly(rows: Rows) -> tuple[list[TraceJob], LoadReport]:
    check_header(rows, COLUMNS)
    items = rows.collect()
    parsed = _fast(items)
    if parsed is None:
        parsed = rows.parse_all(len(COLUMNS), _row, items)
    start = min((item[1] for item in parsed), default=0.0)
    jobs = [
        TraceJob(
            name=name,
            submit_s=float(submitted - start),
            duration_s=duration,
            num_gpu=gpus,
            gpu_milli=1000 if gpus else 0,
            attrs={"vc": vc, "submitted": text},
        )
        for name, submitted, duration, gpus, vc, text in parsed
    ]
    report = rows.report(len(jobs), "philly")
    return jobs, dataclasses.replace(report, start_epoch_s=float(start)) if parsed else report
