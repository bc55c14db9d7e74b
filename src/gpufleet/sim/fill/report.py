"""The HTML report of ``gpufleet simulate fill``: curves per policy, the summary, failures, the paper."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.sim.fill.summary import SUMMARY_POINTS, PaperResults
from gpufleet.sim.report import Report, Series, line_chart

__all__ = ["fill_report"]


def _series(results: Sequence[Mapping[str, Any]], key: str, lo: int = 0, hi: int = 130,
            transform: str = "") -> list[Series]:
    out: list[Series] = []
    for r in results:
        points = sorted((int(k), v) for k, v in r[key].items() if lo <= int(k) <= hi)
        ys = [100 - v if transform == "unalloc" else v for _, v in points]
        out.append(Series(r["policy"], [x for x, _ in points], ys))
    return out


def fill_report(results: Sequence[Mapping[str, Any]], workload: str, paper: PaperResults | None,
                made_by: str = "") -> str:
    """A self-contained HTML page for the runs of one fill experiment (one entry per policy);
    ``made_by``: the version and command line that made it."""
    first = results[0]
    seeds = first["seeds"]
    report = Report(
        f"gpufleet simulate fill: {workload}",
        f"{first['nodes']} nodes, {first['gpus']:g} GPUs; {first['tasks']} tasks in the list, inflated to "
        f"{first['inflate']:g}x the GPU capacity; seeds {', '.join(str(s) for s in seeds)}. Tasks arrive one at "
        "a time into an empty cluster and never leave; a task that fits nowhere fails (FGD paper, ATC'23).",
        made_by=made_by,
    )
    rows = []
    for r in results:
        alloc = r["alloc_pct_at"]
        rows.append([r["policy"], *[f"{alloc[str(p)]:.2f}" if str(p) in alloc else "-" for p in SUMMARY_POINTS],
                     r["unallocated_gpus_at_100"], r["failed_tasks"]["mean"]])
    report.section("Summary", "GPU allocation (% of capacity) by arrived workload (% of capacity), mean over "
                              "seeds; unallocated GPUs at 100 % arrived; failed tasks per run.").table(
        ["policy", *[f"@{p}" for p in SUMMARY_POINTS], "unallocated GPUs @100", "failed tasks"], rows)
    if paper is not None:
        paper_rows = []
        for r in results:
            ref = paper.alloc(workload, r["policy"], 100) or paper.alloc(workload, "fgd", 100)
            ours = r["alloc_pct_at"].get("100")
            if ref is not None and ours is not None:
                paper_rows.append([r["policy"], f"{ours:.2f}", f"{ref:.2f}", f"{ours - ref:+.2f}"])
        if paper_rows:
            report.section("Against the paper", f"Allocation % at 100 % arrived; the paper's mean of the same "
                                                f"policy (FGD for policies the paper has not): {paper.source}.").table(
                ["policy", "ours", "paper", "difference"], paper_rows)
    curves = report.section("Curves")
    curves.figure(line_chart(_series(results, "alloc_pct_at"), x_label="arrived workload (% of GPU capacity)",
                             y_label="GPU allocation (%)"), caption="Allocation by arrived workload", fig_id="alloc")
    curves.figure(line_chart(_series(results, "alloc_pct_at", 70, 120, "unalloc"),
                             x_label="arrived workload (% of GPU capacity)", y_label="unallocated GPU (%)"),
                  caption="Unallocated GPU, 70-120 % arrived (the paper's Fig. 9a)", fig_id="unalloc")
    curves.figure(line_chart(_series(results, "frag_amount_pct_at"), x_label="arrived workload (% of GPU capacity)",
                             y_label="fragmented GPU (% of capacity)"),
                  caption="Fragmented GPU for the target workload", fig_id="frag")
    curves.figure(line_chart(_series(results, "frag_ratio_pct_at"), x_label="arrived workload (% of GPU capacity)",
                             y_label="fragmented share of free GPU (%)"),
                  caption="Fragmentation ratio", fig_id="frag-ratio")
    section = report.section("Failed tasks", "Mean per run, by the first cause that rules out every node: "
                                             "gpu_full (not enough free GPU anywhere), gpu_fragmented (enough "
                                             "free GPU but not on one node / GPU), cpu, memory.")
    for key, caption in (("by_100_by_kind_mean", "Tasks that arrived up to 100 % arrived"),
                         ("by_kind_mean", "Whole run")):
        kinds = sorted({k for r in results for k in r["failed_tasks"][key]})
        if kinds:
            section.table(["policy", *kinds], [[r["policy"], *[r["failed_tasks"][key].get(k, 0) for k in kinds]]
                                               for r in results], caption=caption)
    return report.render()
