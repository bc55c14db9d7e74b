"""The side tables of Helios (SC'21) and Acme (NSDI'24): per-VC GPU counts and per-cluster summaries.

Neither holds jobs. The per-VC daily GPU counts (``<Cluster>_cluster_gpu_number.csv``: ``date, vc...,
total``) say how many GPUs each virtual cluster owned on each day, which is what a queue quota
stands for: :func:`suggest_vc_quotas` turns one day of it into GPUs per VC. The summary tables
(``helios_cluster_summary.csv``, Acme's ``cluster_summary.csv``: one row per cluster, keyed by
``id``) give job counts, run and queue times and GPUs per job, useful as sanity targets for
simulated workloads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from gpufleet.adapters.errors import InputError, describe
from gpufleet.adapters.traces._csv import RowError, Rows, opt_number, read_text, req_int
from gpufleet.adapters.traces.records import LoadReport

__all__ = [
    "VcGpuCounts",
    "is_summary_header",
    "is_vc_gpu_header",
    "load_summary_table",
    "load_vc_gpu_counts",
    "suggest_vc_quotas",
]

MAX_GPUS = 10**7


@dataclass(frozen=True, slots=True)
class VcGpuCounts:
    """GPUs per virtual cluster per day: ``gpus[d][v]`` for ``dates[d]`` and ``vcs[v]``."""

    dates: tuple[str, ...]
    vcs: tuple[str, ...]
    gpus: tuple[tuple[int, ...], ...]

    def on(self, day: str | None = None) -> dict[str, int]:
        """GPUs of every VC on ``day`` (ISO date; default: the last day)."""
        if not self.dates:
            return {}
        if day is None:
            d = len(self.dates) - 1
        elif day in self.dates:
            d = self.dates.index(day)
        else:
            raise InputError(f"date {describe(day)} is not in the table ({self.dates[0]}..{self.dates[-1]})")
        return dict(zip(self.vcs, self.gpus[d], strict=True))


def is_vc_gpu_header(header: list[str]) -> bool:
    return len(header) >= 3 and header[0] == "date" and header[-1] == "total"


def is_summary_header(header: list[str]) -> bool:
    return len(header) >= 2 and header[0] == "id"


def load_vc_gpu_counts(path: str | Path, *, skip_bad_rows: bool = False) -> tuple[VcGpuCounts, LoadReport]:
    """Read a Helios ``<Cluster>_cluster_gpu_number.csv``; the ``total`` column is checked, not kept."""
    source = str(path)
    rows = Rows(read_text(path), source, skip_bad_rows=skip_bad_rows)
    if not is_vc_gpu_header(rows.header):
        raise rows.header_error(f"expected date,<VC>...,total, got {describe(','.join(rows.header))}")
    vcs = tuple(rows.header[1:-1])
    if len(set(vcs)) != len(vcs) or any(not vc for vc in vcs):
        raise rows.header_error("VC names must be non-empty and distinct")

    def parse(line: int, row: list[str]) -> tuple[str, tuple[int, ...]]:
        day = rows.claim(row[0], "date", line)
        try:
            date.fromisoformat(day)
        except ValueError:
            raise RowError("date", f"must be a date YYYY-MM-DD, got {describe(day)}") from None
        counts = tuple(req_int(text, vc, 0, MAX_GPUS) for vc, text in zip(vcs, row[1:-1], strict=True))
        total = req_int(row[-1], "total", 0, MAX_GPUS * len(vcs))
        if total != sum(counts):
            raise RowError("total", f"{total} is not the sum of the VC columns ({sum(counts)})")
        return day, counts

    parsed = rows.parse_all(len(rows.header), parse)
    table = VcGpuCounts(
        dates=tuple(day for day, _ in parsed), vcs=vcs, gpus=tuple(counts for _, counts in parsed)
    )
    return table, rows.report(len(parsed), "helios-vc-gpus")


def suggest_vc_quotas(counts: VcGpuCounts, day: str | None = None) -> dict[str, int]:
    """Whole GPUs per VC on ``day`` (default: the last day), VCs with none left out: a queue quota each."""
    return {vc: gpus for vc, gpus in counts.on(day).items() if gpus > 0}


def load_summary_table(path: str | Path) -> dict[str, Mapping[str, float | None]]:
    """A per-cluster summary table (Helios or Acme): ``{cluster id: {column: value or None}}``."""
    source = str(path)
    rows = Rows(read_text(path), source, skip_bad_rows=False)
    if not is_summary_header(rows.header):
        raise rows.header_error(f"expected id,<statistic>..., got {describe(','.join(rows.header))}")
    columns = rows.header[1:]

    def parse(line: int, row: list[str]) -> tuple[str, Mapping[str, float | None]]:
        key = rows.claim(row[0], "id", line)
        values = {column: opt_number(text, column) for column, text in zip(columns, row[1:], strict=True)}
        return key, values

    return dict(rows.parse_all(len(rows.header), parse))
