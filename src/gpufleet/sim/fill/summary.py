"""Fill runs summed up over seeds: curves by arrived %, failures, and the paper's numbers beside them."""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.adapters.text import text_table
from gpufleet.domain import MILLI
from gpufleet.sim.fill.experiment import FAILURE_KINDS, FillRun, bucket_means

__all__ = [
    "PAPER_DEFAULT_ALLOC_AT_100",
    "PAPER_POLICY",
    "SUMMARY_POINTS",
    "PaperResults",
    "SeedCurves",
    "parse_seeds",
    "summarize",
]

SUMMARY_POINTS = (50, 80, 90, 95, 100, 110, 120, 130)
# The paper's policy names in the artifact's result files.
PAPER_POLICY = {
    "random": "01-Random",
    "dotprod": "02-DotProd",
    "clustering": "03-GpuClustering",
    "gpupacking": "04-GpuPacking",
    "bestfit": "05-BestFit",
    "fgd": "06-FGD",
}
# Mean GPU allocation % at 100 % arrived, default openb trace, seeds 42-51: the FGD paper's
# published runs (Weng et al., ATC'23, artifact hkust-adsl/kubernetes-scheduler-simulator).
PAPER_DEFAULT_ALLOC_AT_100 = {
    "random": 86.30,
    "dotprod": 90.62,
    "clustering": 91.65,
    "gpupacking": 91.78,
    "bestfit": 92.86,
    "fgd": 95.23,
}
DEFAULT_WORKLOAD = "openb_pod_list_default"
MAX_SEEDS = 10_000


def parse_seeds(text: str) -> list[int]:
    """``42-51``, ``42,45``, ``42`` or a mix (``42-44,50``) -> seeds in the order given, no repeats."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"bad seed list {text!r}: expected N, N-M or N,M,... (non-negative integers)")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"bad seed range {part!r}: {hi} < {lo}")
        for s in range(lo, hi + 1):
            if s not in seeds:
                seeds.append(s)
            if len(seeds) > MAX_SEEDS:
                raise ValueError(f"bad seed list {text!r}: more than {MAX_SEEDS} seeds")
    return seeds


@dataclass(frozen=True)
class SeedCurves:
    """What a summary needs of one run (small enough to send back from a worker process)."""

    policy: str
    seed: int
    tasks: int
    failed: int
    failures: Mapping[str, int]
    failures_by_100: Mapping[str, int]  # failed tasks that arrived up to 100 % arrived, by cause
    alloc: Mapping[int, float]  # bucket -> mean allocation % of capacity
    frag: Mapping[int, float]  # bucket -> mean fragmented GPU % of capacity
    frag_ratio: Mapping[int, float]  # bucket -> mean fragmented share of the free GPU, %
    final_alloc_pct: float
    capacity_gpus: float
    seconds: float

    @staticmethod
    def of(run: FillRun, seconds: float) -> SeedCurves:
        arrived = run.arrived_pct()
        # allocation rounded to 2 decimals per event before averaging, as the artifact's analysis
        return SeedCurves(
            policy=run.policy,
            seed=run.seed,
            tasks=run.tasks,
            failed=run.failed,
            failures=dict(run.failures),
            failures_by_100=run.failures_until(100),
            alloc=bucket_means(arrived, np.round(run.alloc_pct(), 2)),
            frag=bucket_means(arrived, run.frag_pct()),
            frag_ratio=bucket_means(arrived, run.frag_ratio_pct()),
            final_alloc_pct=float(run.alloc_pct()[-1]) if run.tasks else 0.0,
            capacity_gpus=run.capacity_milli / MILLI,
            seconds=seconds,
        )


class PaperResults:
    """The FGD paper's per-(workload, policy) means (summary_by_workload_policy.csv), where known."""

    def __init__(self, rows: Mapping[tuple[str, str], Mapping[str, float]], source: str) -> None:
        self.rows = rows
        self.source = source

    @staticmethod
    def load(path: Path) -> PaperResults:
        rows: dict[tuple[str, str], dict[str, float]] = {}
        with path.open(newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                values: dict[str, float] = {}
                for k, v in row.items():
                    if k in ("workload", "sc_policy") or v in (None, ""):
                        continue
                    try:
                        values[k] = float(v)
                    except ValueError:
                        continue
                rows[(row["workload"], row["sc_policy"])] = values
        return PaperResults(rows, str(path))

    @staticmethod
    def builtin() -> PaperResults:
        rows = {(DEFAULT_WORKLOAD, PAPER_POLICY[p]): {"alloc_pct_at_100_mean": v}
                for p, v in PAPER_DEFAULT_ALLOC_AT_100.items()}
        return PaperResults(rows, "FGD paper, default trace (built in)")

    def alloc(self, workload: str, policy: str, point: int) -> float | None:
        paper = PAPER_POLICY.get(policy)
        if paper is None:
            return None
        return self.rows.get((workload, paper), {}).get(f"alloc_pct_at_{point}_mean")


def _mean_curve(curves: Sequence[Mapping[int, float]]) -> dict[str, float]:
    keys = sorted(set().union(*curves)) if curves else []
    out: dict[str, float] = {}
    for k in keys:
        values = [c[k] for c in curves if k in c]
        out[str(k)] = round(float(np.mean(values)), 4)
    return out


def summarize(policy: str, runs: Sequence[SeedCurves], nodes: int, list_tasks: int, seconds: float,
              inflate: float) -> dict[str, Any]:
    """The JSON object of one policy over its seeds."""
    alloc = _mean_curve([r.alloc for r in runs])
    failed = [r.failed for r in runs]
    kinds = {k: round(float(np.mean([r.failures.get(k, 0) for r in runs])), 2) for k in FAILURE_KINDS}
    kinds_100 = {k: round(float(np.mean([r.failures_by_100.get(k, 0) for r in runs])), 2) for k in FAILURE_KINDS}
    capacity = runs[0].capacity_gpus if runs else 0.0
    at100 = alloc.get("100")
    return {
        "policy": policy,
        "seeds": [r.seed for r in runs],
        "inflate": inflate,
        "nodes": nodes,
        "gpus": capacity,
        "tasks": list_tasks,
        "tasks_per_run": round(float(np.mean([r.tasks for r in runs])), 1) if runs else 0,
        "seconds": round(seconds, 2),
        "alloc_pct_at": alloc,
        "frag_amount_pct_at": _mean_curve([r.frag for r in runs]),
        "frag_ratio_pct_at": _mean_curve([r.frag_ratio for r in runs]),
        "unallocated_gpus_at_100": None if at100 is None else round((100 - at100) * capacity / 100, 1),
        "failed_tasks": {
            "mean": round(float(np.mean(failed)), 2) if runs else 0.0,
            "per_seed": {str(r.seed): r.failed for r in runs},
            "by_kind_mean": {k: v for k, v in kinds.items() if v},
            "by_100_mean": round(float(np.mean([sum(r.failures_by_100.values()) for r in runs])), 2) if runs else 0.0,
            "by_100_by_kind_mean": {k: v for k, v in kinds_100.items() if v},
        },
        "per_seed": [
            {
                "seed": r.seed,
                "tasks": r.tasks,
                "failed": r.failed,
                "failures": dict(r.failures),
                "failures_by_100": dict(r.failures_by_100),
                "alloc_pct_at_100": r.alloc.get(100),
                "alloc_pct_at_130": r.alloc.get(130),
                "final_alloc_pct": round(r.final_alloc_pct, 4),
                "seconds": round(r.seconds, 2),
            }
            for r in runs
        ],
    }


def table(results: Sequence[Mapping[str, Any]], workload: str, paper: PaperResults | None) -> str:
    """A plain-text summary for people: allocation at the usual points, unallocated GPUs, paper means."""
    lines: list[str] = []
    first = results[0]
    lines.append(f"workload={workload} nodes={first['nodes']} gpus={first['gpus']:g} tasks={first['tasks']} "
                 f"inflate={first['inflate']:g} seeds={_seed_text(first['seeds'])}")
    lines.append("")
    lines.append("GPU ALLOCATION % OF CAPACITY BY ARRIVED % (mean over seeds)")
    headers = ["policy", *[f"@{p}" for p in SUMMARY_POINTS], "unalloc@100", "failed"]
    rows: list[list[str]] = []
    for r in results:
        alloc = r["alloc_pct_at"]
        rows.append([r["policy"], *[_num(alloc.get(str(p))) for p in SUMMARY_POINTS],
                     _num(r["unallocated_gpus_at_100"], 0), _num(r["failed_tasks"]["mean"], 0)])
    lines += text_table(headers, rows, numbers_right=True)
    if paper is not None:
        paper_rows = []
        for r in results:
            name = r["policy"]
            ref_policy = name if name in PAPER_POLICY else "fgd"
            ref = paper.alloc(workload, ref_policy, 100)
            ours = r["alloc_pct_at"].get("100")
            if ref is None or ours is None:
                continue
            label = "paper" if ref_policy == name else "paper FGD"
            paper_rows.append([name, f"{ours:.2f}", f"{ref:.2f}", f"{ours - ref:+.2f}", label])
        if paper_rows:
            lines += ["", f"VS THE PAPER AT 100 % ARRIVED ({paper.source})"]
            lines += text_table(["policy", "ours", "paper", "diff", "compared with"], paper_rows, numbers_right=True)
    for key, title in (("by_100_by_kind_mean", "FAILED TASKS BY CAUSE UP TO 100 % ARRIVED (mean per run)"),
                       ("by_kind_mean", "FAILED TASKS BY CAUSE, WHOLE RUN (mean per run)")):
        failures = [(r["policy"], r["failed_tasks"][key]) for r in results]
        if any(f for _, f in failures):
            lines += ["", title]
            kinds = [k for k in FAILURE_KINDS if any(k in f for _, f in failures)]
            lines += text_table(["policy", *kinds], [[p, *[_count(f.get(k, 0)) for k in kinds]] for p, f in failures],
                                numbers_right=True)
    return "\n".join(lines) + "\n"


def _seed_text(seeds: Sequence[int]) -> str:
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(str(s) for s in seeds)


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _count(value: float) -> str:
    """A count, or a mean of counts over seeds: an integer when it is one (one seed), else one decimal."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
