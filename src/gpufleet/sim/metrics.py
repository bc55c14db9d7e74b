"""What a simulation run measured: waits, completion times, preemptions, allocation, fragmentation,
per-queue usage against quota and cost.

Definitions (docs/simulator.md has the long form):

- **wait**: first start - submission, for jobs that started; jobs still queued at the end are
  counted apart (``never_started``), not in the percentiles.
- **JCT** (job completion time): end - submission, for completed jobs; ``tail_ratio`` = p99 / p50.
- **allocation**: allocated GPUs / GPUs of the nodes that are up, time-weighted over the run
  (exact, from every start and stop), fractional pods counted as blocks/100.
- **fragmentation**: share of the free GPU capacity that sits on nodes that cannot host one
  *typical* pod (the lower median of the workload's GPU pods: GPUs or blocks, CPU, memory), averaged
  over the samples with free capacity.
- **usage vs quota**: each leaf queue's GPU usage, time-weighted mean and peak, and the share of
  the run's time it was above its ``nvidia.com/gpu`` quota.
- **cost**: GPU-hours x price per GPU-hour of the node's pool, per queue.
- **preemptions**: evictions by the engine (reclaim and preempt); node failures and spot reclaims
  are counted apart. GPU-hours lost = GPUs x run time since the last checkpoint.

Percentiles use NumPy's default (linear) interpolation. Every number is rounded for the JSON so
that the same run gives the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.domain import GPU, MILLI, Queue, QueueName
from gpufleet.sim.timeline import InterruptKind, JobStatus, SimResult

__all__ = ["check_invariants", "compute_metrics", "distribution", "queue_quotas", "step_integral"]

FloatArray = npt.NDArray[np.float64]


def _r(x: float, digits: int = 4) -> float:
    return round(float(x), digits)


def distribution(values: Iterable[float]) -> dict[str, float | int]:
    """count, mean, p50, p95, p99 and max of ``values`` (zeros when there are none)."""
    arr = np.asarray(list(values), dtype=np.float64)
    if arr.size == 0:
        return {"count": 0, "mean": 0.0, "p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
    p50, p95, p99 = np.percentile(arr, [50, 95, 99]).tolist()
    return {
        "count": int(arr.size),
        "mean": _r(arr.mean(), 2),
        "p50": _r(p50, 2),
        "p95": _r(p95, 2),
        "p99": _r(p99, 2),
        "max": _r(arr.max(), 2),
    }


def step_integral(times: FloatArray, levels: npt.NDArray[Any], end: float) -> float:
    """Integral over [times[0], end] of the step function that is ``levels[i]`` from ``times[i]``."""
    if times.size == 0:
        return 0.0
    widths = np.diff(np.append(times, max(end, float(times[-1]))))
    return float(np.dot(levels.astype(np.float64), widths))


def queue_quotas(queues: Sequence[Queue], names: Sequence[QueueName]) -> dict[QueueName, int | None]:
    """GPU quota (milli) of each named queue; None where it sets none (a leaf then has 0 guaranteed)."""
    by_name = {q.name: q for q in queues}
    out: dict[QueueName, int | None] = {}
    for name in names:
        q = by_name.get(name)
        res = q.resources.get(GPU) if q is not None else None
        out[name] = res.quota if res is not None else None
    return out


def _usage_levels(result: SimResult) -> tuple[FloatArray, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    t, q, d = result.usage_log
    return t, q, d


def _gpu_hours(milli_seconds: float) -> float:
    return milli_seconds / MILLI / 3600.0


def _open_run_s(result: SimResult) -> list[float]:
    """Per job: time of the run still open at the end (0 for jobs not running)."""
    return [result.end_s - r.run_start if r.status is JobStatus.RUNNING else 0.0 for r in result.runs]


# Jobs by whole GPUs asked for in all (a gang's total), for waits by size: the large gangs that
# reservations are for (docs/semantics.md, "Reservation and backfill") are "32+".
GPU_BUCKETS = ((1, "<=1"), (7, "2-7"), (31, "8-31"), (None, "32+"))


def gpu_bucket(gpu_milli: int) -> str:
    gpus = gpu_milli / MILLI
    return next(name for top, name in GPU_BUCKETS if top is None or gpus <= top)


def compute_metrics(result: SimResult, label: str = "") -> dict[str, Any]:
    """Every metric of one run as a JSON-ready dict (deterministic for a deterministic run)."""
    jobs, runs = result.setup.jobs, result.runs
    end = result.end_s
    statuses = {s.value: 0 for s in JobStatus}
    for r in runs:
        statuses[r.status.value] += 1

    waits: dict[str, list[float]] = {}
    waits_by_prio: dict[int, list[float]] = {}
    waits_by_gpus: dict[str, list[float]] = {name: [] for _, name in GPU_BUCKETS}
    all_waits: list[float] = []
    jct: list[float] = []
    never_started: dict[str, int] = {}
    for job, run in zip(jobs, runs, strict=True):
        if run.first_start is not None:
            w = run.first_start - job.submit_s
            all_waits.append(w)
            waits.setdefault(job.queue, []).append(w)
            waits_by_prio.setdefault(job.priority, []).append(w)
            waits_by_gpus[gpu_bucket(job.gpu_milli)].append(w)
        elif run.status is JobStatus.QUEUED:
            never_started[job.queue] = never_started.get(job.queue, 0) + 1
        if run.status is JobStatus.COMPLETED and run.end_s is not None:
            jct.append(run.end_s - job.submit_s)
    jct_dist = distribution(jct)
    tail = jct_dist["p99"] / jct_dist["p50"] if jct_dist["p50"] else 0.0

    # exact usage integrals
    t, q, d = _usage_levels(result)
    allocated = np.cumsum(d)
    alloc_ms = step_integral(t, allocated, end)
    ct, cd = result.capacity_log
    capacity = np.cumsum(cd)
    cap_ms = step_integral(ct, capacity, end)
    open_run = _open_run_s(result)
    job_ms = sum(j.gpu_milli * (r.run_s + o) for j, r, o in zip(jobs, runs, open_run, strict=True))

    quotas = queue_quotas(result.setup.queues, result.queue_names)
    per_queue: dict[str, dict[str, Any]] = {}
    costs = [r.cost + o for r, o in zip(runs, result.open_cost, strict=True)]
    jobs_of: dict[str, list[int]] = {}
    for i, job in enumerate(jobs):
        jobs_of.setdefault(job.queue, []).append(i)
    for qi, name in enumerate(result.queue_names):
        mask = q == qi
        qt, qlevel = t[mask], np.cumsum(d[mask])
        used_ms = step_integral(qt, qlevel, end)
        quota = quotas.get(name)
        above: float | None = None  # a queue with no GPU quota is never "above" it
        if quota is not None:
            above = 0.0
            if qt.size:
                widths = np.diff(np.append(qt, max(end, float(qt[-1]))))
                above = float(widths[qlevel > quota].sum())
        members = jobs_of.get(name, [])
        per_queue[name] = {
            "jobs": len(members),
            "quota_gpus": _r((quota or 0) / MILLI, 2) if quota is not None else None,
            "mean_usage_gpus": _r(used_ms / end / MILLI, 3) if end > 0 else 0.0,
            "peak_usage_gpus": _r(float(qlevel.max(initial=0)) / MILLI, 2),
            "time_above_quota": None if above is None else (_r(above / end, 4) if end > 0 else 0.0),
            "gpu_hours": _r(_gpu_hours(used_ms), 2),
            "cost": _r(sum(costs[i] for i in members), 2),
            "wait_s": distribution(waits.get(name, [])),
            "never_started": never_started.get(name, 0),
        }

    preempt = [i for i in result.interruptions if i.kind in (InterruptKind.RECLAIM, InterruptKind.PREEMPT)]
    outages = [i for i in result.interruptions if i.kind in (InterruptKind.FAILURE, InterruptKind.SPOT)]
    s = result.samples
    with_free = s.free_milli > 0
    frag_share = float((s.stranded_milli[with_free] / s.free_milli[with_free]).mean()) if with_free.any() else 0.0
    typical = result.typical
    moves = [i for i in result.interruptions if i.kind is InterruptKind.MOVE]
    pods = sum(len(j.pods) for j in jobs if not j.rejected)
    return {
        "label": label,
        "end_s": _r(end, 2),
        "jobs": {"total": len(jobs), **statuses, "never_started": sum(never_started.values())},
        "wait_s": {
            "all": distribution(all_waits),
            "by_queue": {k: distribution(v) for k, v in sorted(waits.items())},
            "by_priority": {str(k): distribution(v) for k, v in sorted(waits_by_prio.items())},
            "by_gpus": {k: distribution(v) for k, v in waits_by_gpus.items()},
        },
        "jct_s": {**jct_dist, "tail_ratio_p99_p50": _r(tail, 3)},
        "preemptions": {
            "evictions": len(preempt),
            "reclaim": sum(1 for i in preempt if i.kind is InterruptKind.RECLAIM),
            "preempt": sum(1 for i in preempt if i.kind is InterruptKind.PREEMPT),
            "jobs_evicted": len({i.job for i in preempt}),
            "gpu_hours_lost": _r(_gpu_hours(sum(i.gpu_milli * i.lost_s for i in preempt)), 3),
        },
        "outages": {
            "node_failures": result.node_outages.get("failure", 0),
            "spot_reclaims": result.node_outages.get("spot", 0),
            "jobs_interrupted": len(outages),
            "gpu_hours_lost": _r(_gpu_hours(sum(i.gpu_milli * i.lost_s for i in outages)), 3),
        },
        "allocation": {
            "mean": _r(alloc_ms / cap_ms, 4) if cap_ms > 0 else 0.0,
            "peak_gpus": _r(float(allocated.max(initial=0)) / MILLI, 2),
            "capacity_gpus": _r(float(capacity[0]) / MILLI, 2) if capacity.size else 0.0,
        },
        "fragmentation": {
            "mean_stranded_share": _r(frag_share, 4),
            "mean_stranded_gpus": _r(float(s.stranded_milli.mean()) / MILLI, 3) if s.stranded_milli.size else 0.0,
            "typical_pod": {"gpus": typical.whole, "blocks": typical.blocks},
            # GPU-hours of whole-GPU jobs queued while the free GPUs in total of the nodes large
            # enough for their largest pod could hold them (and counting every node's free GPUs)
            "delay_gpu_hours": _r(_gpu_hours(result.fragmentation_delay_ms), 3),
            "delay_any_node_gpu_hours": _r(_gpu_hours(result.free_delay_ms), 3),
        },
        "moves": {
            "pods": result.moved_pods,
            "share_of_pods": _r(result.moved_pods / pods, 5) if pods else 0.0,
            "gpu_hours_lost": _r(_gpu_hours(sum(i.gpu_milli * i.lost_s for i in moves)), 3),
        },
        "gpu_hours": _r(_gpu_hours(job_ms), 2),
        "cost": _r(sum(costs), 2),
        "queues": per_queue,
        "fairness": fairness_by_month(result),
        "cycles": {"run": result.cycles, "event_batches": result.instants},
    }


MONTH_S = 30 * 86400.0
BUSY_SHARE = 0.5  # a queue is busy in a month when work of it waited in at least this share of its samples


def fairness_by_month(result: SimResult) -> dict[str, Any]:
    """Per-queue share of the GPU-hours of each 30-day month against the weights (docs/simulator.md,
    "Fairness over time"): among the month's **busy** queues (work of theirs waiting in at least half of
    the month's samples), each one's share of their GPU-hours against its weight-proportional
    entitlement ``weight / sum of their weights``; ``max_deviation`` is the largest gap of a month,
    ``mean_max_deviation`` the mean over the months with two or more busy queues."""
    s = result.samples
    names = list(result.queue_names)
    weights = {q.name: q.weight for q in result.setup.queues}
    w = np.array([weights.get(n, 1.0) for n in names], dtype=np.float64)
    months: list[dict[str, Any]] = []
    demand = (s.queue_usage_milli + s.queue_queued_milli).astype(np.float64) if names else np.zeros((0, 0))
    entitled_rows = weighted_fair_split(demand, w, s.capacity_milli.astype(np.float64)) if names else demand
    if s.time_s.size and names:
        index = (s.time_s // MONTH_S).astype(np.int64)
        for k in range(int(index.max()) + 1):
            rows = index == k
            if not rows.any():
                continue
            used = s.queue_usage_milli[rows].sum(axis=0).astype(np.float64)
            busy = (s.queue_queued_milli[rows] > 0).mean(axis=0) >= BUSY_SHARE
            total = used.sum()
            month: dict[str, Any] = {
                "month": k,
                "share": {n: _r(float(used[i] / total), 4) for i, n in enumerate(names) if total > 0 and used[i] > 0},
                "busy": [n for i, n in enumerate(names) if busy[i]],
                "max_deviation": None,
            }
            busy_used = used[busy].sum()
            if busy.sum() >= 2 and busy_used > 0:
                share = used[busy] / busy_used
                entitled = w[busy] / w[busy].sum()
                month["max_deviation"] = _r(float(np.abs(share - entitled).max()), 4)
            month.update(_against_entitlement(names, s.queue_usage_milli[rows], entitled_rows[rows]))
            months.append(month)
    gaps = [m["max_deviation"] for m in months if m["max_deviation"] is not None]
    out: dict[str, Any] = {"months": months, "mean_max_deviation": _r(float(np.mean(gaps)), 4) if gaps else None}
    if s.time_s.size and names:
        out["run"] = _against_entitlement(names, s.queue_usage_milli, entitled_rows)
    return out


def weighted_fair_split(demand: np.ndarray, weights: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Each row's demand-capped weighted max-min split of ``capacity`` (water-filling): queue q gets
    ``min(demand[q], level * weights[q])`` with the level at which the split uses the whole capacity
    (or each queue its whole demand, when the capacity holds it). ``demand``: [row, queue] (>= 0);
    ``weights``: [queue] (> 0); ``capacity``: [row]. NumPy over all rows at once."""
    rows, n = demand.shape
    if not n:
        return np.zeros_like(demand, dtype=np.float64)
    ratio = demand / weights  # the level at which each queue's demand is met
    order = np.argsort(ratio, axis=1, kind="stable")
    r = np.take_along_axis(ratio, order, axis=1)
    d = np.take_along_axis(demand, order, axis=1)
    w = weights[order]
    # With the first k queues (by ratio) met in full, the rest share what is left by weight: level_k.
    met = np.concatenate([np.zeros((rows, 1)), np.cumsum(d, axis=1)], axis=1)  # [row, k], k = 0..n
    w_left = np.concatenate([w.sum(axis=1, keepdims=True), w.sum(axis=1, keepdims=True) - np.cumsum(w, axis=1)],
                            axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        level = (capacity[:, None] - met) / w_left
    # The level is the first k's whose level does not reach the next queue's ratio (k = n: all met).
    next_ratio = np.concatenate([r, np.full((rows, 1), np.inf)], axis=1)
    ok = (level < next_ratio) | (np.arange(n + 1)[None, :] == n)
    k = np.argmax(ok, axis=1)
    chosen = np.where(k == n, np.inf, level[np.arange(rows), k])
    split: np.ndarray = np.minimum(demand, np.maximum(chosen, 0.0)[:, None] * weights)
    return split


def _against_entitlement(names: Sequence[str], used_rows: np.ndarray, entitled_rows: np.ndarray) -> dict[str, Any]:
    """GPU-hour shares against the demand-capped weighted fair split (``weighted_fair_split`` of each
    sample, summed): ``entitled`` per queue, ``deviation`` (half the sum of the share gaps: the share of
    the GPU-hours that went to another queue than the split says; 0 is the split exactly) and ``jain``
    (Jain's index over used / entitled of the queues entitled to any: 1 is every queue the same ratio)."""
    used = used_rows.sum(axis=0).astype(np.float64)
    entitled = entitled_rows.sum(axis=0)
    if used.sum() <= 0 or entitled.sum() <= 0:
        return {"entitled": {}, "deviation": None, "jain": None}
    share, fair = used / used.sum(), entitled / entitled.sum()
    x = used[entitled > 0] / entitled[entitled > 0]
    return {
        "entitled": {n: _r(float(fair[i]), 4) for i, n in enumerate(names) if fair[i] > 0},
        "deviation": _r(float(np.abs(share - fair).sum() / 2), 4),
        "jain": _r(float(x.sum() ** 2 / (len(x) * (x**2).sum())), 4) if (x > 0).any() else None,
    }


def check_invariants(result: SimResult) -> list[str]:
    """Problems with the run's books (empty when all hold):

    - every job ended exactly once (completed or rejected) or is queued/running (or not arrived,
      under ``--until``) at the end;
    - a completed job ran its duration plus the work it lost, no more, no less;
    - GPU-seconds from the usage log equal the sum over jobs of GPUs x run time;
    - allocated GPUs never exceed the capacity of the nodes up, at any event.
    """
    problems: list[str] = []
    jobs, runs = result.setup.jobs, result.runs
    for job, run in zip(jobs, runs, strict=True):
        ended = run.status in (JobStatus.COMPLETED, JobStatus.REJECTED)
        if ended != (run.end_s is not None):
            problems.append(f"{job.name}: status {run.status.value} but end {run.end_s}")
        if run.status is JobStatus.FUTURE and job.submit_s <= result.end_s and result.options.until_s is None:
            problems.append(f"{job.name}: never arrived")
        done = run.status is JobStatus.COMPLETED and job.duration_s is not None
        if done and not math.isclose(run.run_s, (job.duration_s or 0.0) + run.lost_s, rel_tol=1e-9, abs_tol=1e-6):
            problems.append(f"{job.name}: ran {run.run_s}s for {job.duration_s}s of work and {run.lost_s}s lost")
    t, _q, d = result.usage_log
    open_run = _open_run_s(result)
    from_log = step_integral(t, np.cumsum(d), result.end_s)
    from_jobs = sum(j.gpu_milli * (r.run_s + o) for j, r, o in zip(jobs, runs, open_run, strict=True))
    if not np.isclose(from_log, from_jobs, rtol=1e-9, atol=1e-3):
        problems.append(f"GPU-seconds: usage log {from_log / MILLI} != jobs {from_jobs / MILLI}")
    problems.extend(_overcommit(result))
    return problems


def _overcommit(result: SimResult) -> list[str]:
    t, _q, d = result.usage_log
    ct, cd = result.capacity_log
    if t.size == 0:
        return []
    # state after the last change at each event time
    alloc = np.cumsum(d)
    last = np.append(t[1:] != t[:-1], True)
    times, alloc_at = t[last], alloc[last]
    cap = np.cumsum(cd)
    idx = np.searchsorted(ct, times, side="right") - 1
    cap_at = cap[np.maximum(idx, 0)]
    bad = np.flatnonzero(alloc_at > cap_at)
    if bad.size:
        i = int(bad[0])
        return [f"at {times[i]}s {alloc_at[i] / MILLI} GPUs allocated on {cap_at[i] / MILLI} GPUs up"]
    return []


def summary_rows(metrics: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Side-by-side headline numbers of one or more runs, for the terminal and the report."""
    headers = ["metric", *(str(m["label"] or f"run {i + 1}") for i, m in enumerate(metrics))]
    lines: list[tuple[str, Any]] = [
        ("jobs completed", lambda m: m["jobs"]["completed"]),
        ("jobs queued at end", lambda m: m["jobs"]["queued"]),
        ("jobs running at end", lambda m: m["jobs"]["running"]),
        ("jobs rejected (never fit)", lambda m: m["jobs"]["rejected"]),
        ("wait p50 (s)", lambda m: m["wait_s"]["all"]["p50"]),
        ("wait p95 (s)", lambda m: m["wait_s"]["all"]["p95"]),
        ("wait p99 (s)", lambda m: m["wait_s"]["all"]["p99"]),
        ("wait p99, jobs of 32+ GPUs (s)", lambda m: m["wait_s"]["by_gpus"]["32+"]["p99"]),
        ("jobs of 32+ GPUs started", lambda m: m["wait_s"]["by_gpus"]["32+"]["count"]),
        ("JCT p50 (s)", lambda m: m["jct_s"]["p50"]),
        ("JCT p99 (s)", lambda m: m["jct_s"]["p99"]),
        ("JCT p99/p50", lambda m: m["jct_s"]["tail_ratio_p99_p50"]),
        ("evictions", lambda m: m["preemptions"]["evictions"]),
        ("GPU-hours lost to evictions", lambda m: m["preemptions"]["gpu_hours_lost"]),
        ("node failures + spot reclaims", lambda m: m["outages"]["node_failures"] + m["outages"]["spot_reclaims"]),
        ("GPU-hours lost to outages", lambda m: m["outages"]["gpu_hours_lost"]),
        ("allocation (mean)", lambda m: m["allocation"]["mean"]),
        ("stranded share of free GPUs", lambda m: m["fragmentation"]["mean_stranded_share"]),
        ("fair-share gap (mean monthly max)", lambda m: m["fairness"]["mean_max_deviation"]),
        ("GPU-hours off the fair split (run)", lambda m: (m["fairness"].get("run") or {}).get("deviation")),
        ("Jain index, used / fair split (run)", lambda m: (m["fairness"].get("run") or {}).get("jain")),
        ("fragmentation delay (GPU-hours)", lambda m: m["fragmentation"]["delay_gpu_hours"]),
        ("  counting free GPUs of any node", lambda m: m["fragmentation"]["delay_any_node_gpu_hours"]),
        ("moved pods (share of pods)", lambda m: f"{m['moves']['pods']:,} ({m['moves']['share_of_pods']:.3%})"),
        ("GPU-hours", lambda m: m["gpu_hours"]),
        ("cost", lambda m: m["cost"]),
        ("scheduling cycles", lambda m: m["cycles"]["run"]),
        ("simulated days", lambda m: round(m["end_s"] / 86400, 2)),
    ]
    rows = [[name, *(_fmt(get(m)) for m in metrics)] for name, get in lines]
    return headers, rows


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
