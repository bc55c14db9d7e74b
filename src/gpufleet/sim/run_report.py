"""The HTML report of ``gpufleet simulate run``: curves and tables of one or more runs side by side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.domain import MILLI
from gpufleet.sim.metrics import queue_quotas, summary_rows
from gpufleet.sim.report import Report, Series, bar_chart, cdf_chart, draw_lines, line_chart, new_figure, svg_of
from gpufleet.sim.timeline import SimResult

__all__ = ["FIGURE_IDS", "RunOutput", "build_report"]

MAX_POINTS = 1500
MAX_QUEUE_PANELS = 12
DAY = 86400.0

# ids of the figures every report has (per-run queue figures add "queue-usage-<n>" and "fair-share-<n>")
FIGURE_IDS = ("allocation", "fragmentation", "queued", "wait-cdf", "wait-by-queue", "jct-cdf", "lost", "cost")


@dataclass(frozen=True, slots=True)
class RunOutput:
    label: str
    result: SimResult
    metrics: Mapping[str, Any]


def _thin(n: int) -> npt.NDArray[np.int64]:
    """Indices of at most MAX_POINTS evenly spread samples."""
    step = max(1, -(-n // MAX_POINTS))
    return np.arange(0, n, step, dtype=np.int64)


def _days(result: SimResult) -> npt.NDArray[np.float64]:
    return result.samples.time_s / DAY


def _series(runs: Sequence[RunOutput], values: Any) -> list[Series]:
    out = []
    for run in runs:
        idx = _thin(run.result.samples.time_s.size)
        y = np.asarray(values(run.result), dtype=np.float64)
        out.append(Series(run.label, _days(run.result)[idx].tolist(), y[idx].tolist()))
    return out


def _ratio(num: npt.NDArray[Any], den: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    n = num.astype(np.float64)
    d = den.astype(np.float64)
    return np.divide(n, d, out=np.zeros_like(n), where=d > 0)


def _queue_usage_svg(run: RunOutput) -> str:
    r = run.result
    names = list(r.queue_names)
    per_queue = run.metrics["queues"]
    order = sorted(names, key=lambda n: (-per_queue[n]["gpu_hours"], n))[:MAX_QUEUE_PANELS]
    cols = 3 if len(order) > 4 else max(1, len(order))
    rows = -(-len(order) // cols) if order else 1
    fig, axes = new_figure(9.0, 2.0 * rows + 0.4, rows, cols)
    quotas = queue_quotas(r.setup.queues, r.queue_names)
    idx = _thin(r.samples.time_s.size)
    days = _days(r)[idx]
    for ax, name in zip(axes, order, strict=False):
        q = names.index(name)
        usage = r.samples.queue_usage_milli[idx, q] / MILLI
        draw_lines(ax, [Series("usage", days.tolist(), usage.tolist())], step=True)
        quota = quotas.get(name)
        if quota is not None:
            ax.axhline(quota / MILLI, linestyle="--", color="tab:red", linewidth=1.0, label="quota")
        ax.set_title(name, fontsize=8)
        ax.grid(True, linewidth=0.4, alpha=0.5)
    for ax in axes[len(order):]:
        ax.set_visible(False)
    if order:
        axes[0].legend(loc="best", fontsize=7)
    fig.supxlabel("day")
    fig.supylabel("GPUs")
    return svg_of(fig)


def _daily_shares(run: RunOutput, top: int = 8) -> list[Series]:
    """Each of the ``top`` queues with the most GPU-hours: its share of each day's GPU-hours (sampled)."""
    r = run.result
    names = list(r.queue_names)
    if not names or not r.samples.time_s.size:
        return []
    day = (r.samples.time_s // DAY).astype(np.int64)
    per_day = np.zeros((int(day.max()) + 1, len(names)))
    np.add.at(per_day, day, r.samples.queue_usage_milli.astype(np.float64))
    share = _ratio(per_day, per_day.sum(axis=1, keepdims=True) + np.zeros_like(per_day))
    per_queue = run.metrics["queues"]
    order = sorted(names, key=lambda n: (-per_queue.get(n, {}).get("gpu_hours", 0.0), n))[:top]
    days = (np.arange(per_day.shape[0]) + 0.5).tolist()
    return [Series(name, days, share[:, names.index(name)].tolist()) for name in order]


def _fairness_section(report: Report, runs: Sequence[RunOutput]) -> None:
    sec = report.section(
        "Fairness over time",
        "Each queue's share of each day's GPU-hours (the 8 queues with the most), and over the whole run its "
        "share against the demand-capped fair split of the GPUs by weight (docs/simulator.md, \"fairness\").")
    for n, run in enumerate(runs, 1):
        series = _daily_shares(run)
        if series:
            sec.figure(line_chart(series, x_label="day", y_label="share of the day's GPU-hours", y_min=0.0,
                                  y_max=1.0, step=True),
                       f"Per-queue share of GPU-hours per day ({run.label})", f"fair-share-{n}")
    whole = [(r.label, r.metrics["fairness"].get("run") or {}) for r in runs]
    names = sorted({q for _label, f in whole for q in f.get("entitled", {})})
    if names:
        headers = ["queue"] + [h for label, _f in whole for h in (f"share ({label})", f"fair split ({label})")]
        shares = [{q: _share(r, q) for q in names} for r in runs]
        rows = [[q] + [v for (_label, f), sh in zip(whole, shares, strict=True)
                       for v in (sh[q], f.get("entitled", {}).get(q, 0.0))] for q in names]
        rows.append(["GPU-hours off the split"] + [v for _label, f in whole for v in (f.get("deviation"), "")])
        sec.table(headers, rows)


def _share(run: RunOutput, queue: str) -> float:
    """The queue's share of the run's GPU-hours (sampled, as the fair split)."""
    per_queue = np.asarray(run.result.samples.queue_usage_milli, dtype=np.float64).sum(axis=0)
    total = float(per_queue.sum())
    at = [str(n) for n in run.result.queue_names].index(queue)
    return round(float(per_queue[at]) / total, 4) if total > 0 else 0.0


def _lost_series(run: RunOutput) -> Series:
    """Cumulative GPU-hours lost to interruptions (evictions and outages) over time."""
    points = sorted((i.time_s, i.gpu_milli * i.lost_s / MILLI / 3600.0) for i in run.result.interruptions)
    xs, ys, total = [0.0], [0.0], 0.0
    for t, lost in points:
        total += lost
        xs.append(t / DAY)
        ys.append(total)
    xs.append(run.result.end_s / DAY)
    ys.append(total)
    keep = _thin(len(xs)).tolist()
    if keep[-1] != len(xs) - 1:
        keep.append(len(xs) - 1)
    return Series(run.label, [xs[i] for i in keep], [ys[i] for i in keep])


def build_report(runs: Sequence[RunOutput], title: str, inputs: Mapping[str, Any]) -> Report:
    """A self-contained report of ``runs`` (one, or several to compare)."""
    report = Report(title, intro=" | ".join(f"{k}: {v}" for k, v in inputs.items()))
    headers, rows = summary_rows([r.metrics for r in runs])
    report.section("Summary").table(headers, rows)

    section = report.section(
        "Allocation and fragmentation",
        "Allocation: allocated GPUs / GPUs of the nodes that are up. Fragmentation: the share of the free "
        "GPU capacity on nodes that cannot host one typical pod of the workload (the lower median pod).",
    )
    section.figure(
        line_chart(_series(runs, lambda r: _ratio(r.samples.allocated_milli, r.samples.capacity_milli)),
                   x_label="day", y_label="allocated / total GPUs", y_min=0.0, y_max=1.05),
        "GPU allocation over time", "allocation")
    section.figure(
        line_chart(_series(runs, lambda r: _ratio(r.samples.stranded_milli, r.samples.free_milli)),
                   x_label="day", y_label="stranded share of free GPUs", y_min=0.0, y_max=1.05),
        "Fragmentation over time", "fragmentation")
    section.figure(
        line_chart(_series(runs, lambda r: r.samples.queued_milli / MILLI), x_label="day", y_label="GPUs asked"),
        "Queued GPU demand over time", "queued")

    for n, run in enumerate(runs, 1):
        sec = report.section(f"Queues: usage against quota ({run.label})" if len(runs) > 1 else
                             "Queues: usage against quota",
                             f"GPU usage of each leaf queue (the {MAX_QUEUE_PANELS} with the most GPU-hours) "
                             "and its nvidia.com/gpu quota (dashed).")
        sec.figure(_queue_usage_svg(run), "Per-queue usage and quota", f"queue-usage-{n}")
        sec.table(
            ["queue", "jobs", "quota GPUs", "mean GPUs", "peak GPUs", "time above quota", "GPU-hours", "cost",
             "wait p50 s", "wait p95 s", "wait p99 s", "never started"],
            [[name, q["jobs"], "-" if q["quota_gpus"] is None else q["quota_gpus"], q["mean_usage_gpus"],
              q["peak_usage_gpus"], _pct(q["time_above_quota"]), q["gpu_hours"], q["cost"],
              q["wait_s"]["p50"], q["wait_s"]["p95"], q["wait_s"]["p99"], q["never_started"]]
             for name, q in run.metrics["queues"].items()],
        )

    _fairness_section(report, runs)

    sec = report.section("Waiting and completion",
                         "Wait: submission to first start. JCT: submission to completion (completed jobs).")
    sec.figure(cdf_chart([(r.label, _waits(r.result)) for r in runs], x_label="wait (s, log)"),
               "Queue wait, all jobs (CDF)", "wait-cdf")
    queue_names = sorted({q for r in runs for q in r.metrics["wait_s"]["by_queue"]})[:24]
    sec.figure(bar_chart(queue_names, [(r.label, [r.metrics["wait_s"]["by_queue"].get(q, {}).get("p95", 0.0)
                                                  for q in queue_names]) for r in runs],
                         y_label="p95 wait (s)"),
               "p95 queue wait per queue", "wait-by-queue")
    sec.figure(cdf_chart([(r.label, _jcts(r.result)) for r in runs], x_label="JCT (s, log)"),
               "Job completion time (CDF)", "jct-cdf")
    prio_rows = []
    for r in runs:
        for prio, d in r.metrics["wait_s"]["by_priority"].items():
            prio_rows.append([r.label, prio, d["count"], d["p50"], d["p95"], d["p99"]])
    sec.table(["run", "priority", "jobs started", "wait p50 s", "wait p95 s", "wait p99 s"], prio_rows)

    sec = report.section("Preemptions and outages",
                         "GPU-hours lost: GPUs x run time since the last checkpoint of each interrupted job.")
    sec.figure(line_chart([_lost_series(r) for r in runs], x_label="day", y_label="GPU-hours lost (cumulative)",
                          step=True), "Work lost to evictions, node failures and spot reclaims", "lost")
    sec.table(["run", "reclaims", "preemptions", "node failures", "spot reclaims", "jobs interrupted by outages"],
              [[r.label, r.metrics["preemptions"]["reclaim"], r.metrics["preemptions"]["preempt"],
                r.metrics["outages"]["node_failures"], r.metrics["outages"]["spot_reclaims"],
                r.metrics["outages"]["jobs_interrupted"]] for r in runs])

    sec = report.section("Cost", "GPU-hours x the price per GPU-hour of each node's pool, per queue.")
    cost_queues = sorted({q for r in runs for q in r.metrics["queues"]})[:24]
    if not any(r.metrics["queues"].get(q, {}).get("cost", 0.0) for r in runs for q in cost_queues):
        # An empty plot would read as "it cost nothing": say why there is nothing to show.
        sec.paragraph("No prices: the cluster's node pools set no pricePerGpuHour or pricePerNodeHour "
                      "(ClusterSpec, docs/simulator.md), so there is no cost to show.")
        return report
    sec.figure(bar_chart(cost_queues, [(r.label, [r.metrics["queues"].get(q, {}).get("cost", 0.0)
                                                  for q in cost_queues]) for r in runs], y_label="cost"),
               "Cost per queue", "cost")
    return report


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _waits(result: SimResult) -> list[float]:
    return [r.first_start - j.submit_s for j, r in zip(result.setup.jobs, result.runs, strict=True)
            if r.first_start is not None]


def _jcts(result: SimResult) -> list[float]:
    return [r.end_s - j.submit_s for j, r in zip(result.setup.jobs, result.runs, strict=True)
            if r.end_s is not None and r.status.value == "completed"]
