"""The per-queue, per-project and health metrics of the controller (docs/metrics.md), written once per
cycle from :class:`~gpufleet.kube.controller.metrics_queues.CycleFigures`.

Label sets are fixed (:data:`ALLOWED_LABELS`); label values are queue, project and PriorityClass
names, or a few fixed words. Series of a queue that disappeared are removed; the used and idle GPU
gauges have no series at all while telemetry is not configured (never NaN).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from gpufleet.kube.controller.metrics_queues import CycleFigures, QueueFigures

__all__ = ["ALLOWED_LABELS", "JCT_BUCKETS", "WAIT_BUCKETS", "QueueMetrics"]

# Label names any controller metric may carry (tests hold every metric to it).
ALLOWED_LABELS = frozenset({"queue", "project", "priority_class", "reason", "health", "state",
                            "kind", "result", "operation", "code", "resource"})

_MINUTE, _HOUR, _DAY = 60.0, 3600.0, 86400.0
# From seconds (a free cluster binds at once) to a week (a starved queue on a busy cluster); few
# buckets, as every queue x PriorityClass has each (2,000 queues: 15 lines each per class).
WAIT_BUCKETS = (5.0, 30.0, _MINUTE, 5 * _MINUTE, 15 * _MINUTE, 30 * _MINUTE, _HOUR, 2 * _HOUR, 4 * _HOUR,
                12 * _HOUR, _DAY, 3 * _DAY, 7 * _DAY)
# GPU jobs: minutes (tests, notebooks killed) to weeks (pre-training).
JCT_BUCKETS = (_MINUTE, 5 * _MINUTE, 15 * _MINUTE, 30 * _MINUTE, _HOUR, 2 * _HOUR, 4 * _HOUR, 8 * _HOUR,
               12 * _HOUR, _DAY, 2 * _DAY, 4 * _DAY, 7 * _DAY, 14 * _DAY, 28 * _DAY)

_QUEUE_GAUGES: tuple[tuple[str, str, Callable[[QueueFigures], float | None]], ...] = (
    ("gpufleet_queue_leaf", "1 for a leaf queue, 0 for a parent: the per-queue figures are subtree sums, so "
     "multiply by this before summing over queues (a project, the cluster).", lambda f: float(f.leaf)),
    ("gpufleet_queue_allocated_gpus", "GPUs allocated to the queue's pods (subtree), once the cycle's "
     "decisions are carried out; a fractional pod counts blocks/100.", lambda f: f.allocated_gpus),
    ("gpufleet_queue_used_gpus", "GPUs the queue's pods use (subtree): the sum of GPUs times utilisation, "
     "from telemetry; no series without telemetry.", lambda f: f.used_gpus),
    ("gpufleet_queue_quota_gpus", "The queue's GPU quota (a queue without one: the sum of its children's).",
     lambda f: f.quota_gpus),
    ("gpufleet_queue_borrowed_gpus", "GPUs the queue holds beyond its quota.", lambda f: f.borrowed_gpus),
    ("gpufleet_queue_lent_gpus", "Unused GPU quota of the queue that its siblings borrow.", lambda f: f.lent_gpus),
    ("gpufleet_queue_pending_gangs", "Gangs of the queue (subtree) waiting to be admitted.",
     lambda f: float(f.pending_gangs)),
    ("gpufleet_queue_pending_gpus", "GPUs requested by the queue's (subtree) pending pods.", lambda f: f.pending_gpus),
    ("gpufleet_queue_idle_gpus", "GPUs allocated to pods of the queue (subtree) that the idle rule finds idle "
     "(utilisation under the threshold for the window); no series without telemetry.", lambda f: f.idle_gpus),
)


class QueueMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.gauges = [(Gauge(name, text, ["queue", "project"], registry=r), value)
                       for name, text, value in _QUEUE_GAUGES]
        self.wait = Histogram(
            "gpufleet_queue_wait_seconds", "Time from a pod's creation to its binding, by queue (and its "
            "project) and PriorityClass.", ["queue", "project", "priority_class"], buckets=WAIT_BUCKETS, registry=r)
        self.preemptions = Counter(
            "gpufleet_queue_preemptions_total", "Pods of the queue evicted by the scheduler, by reason "
            "(reclaim, preempt).", ["queue", "project", "reason"], registry=r)
        self.preempted_gpu_seconds = Counter(
            "gpufleet_queue_preempted_gpu_seconds_total", "GPU-seconds the evicted pods of the queue had run "
            "(their GPUs times their run time), by reason: the work they lose without checkpoints.",
            ["queue", "project", "reason"], registry=r)
        self.completion = Histogram(
            "gpufleet_queue_job_completion_seconds",
            "Time from a pod's creation to its success, by queue (and its project).",
            ["queue", "project"], buckets=JCT_BUCKETS, registry=r)
        self.gpus = Gauge("gpufleet_gpus", "GPUs of the cluster's nodes by health (healthy, unhealthy: the "
                          "device plugin's unhealthy GPUs).", ["health"], registry=r)
        self.nodes = Gauge("gpufleet_nodes", "Nodes by state (ready, not_ready: tainted not-ready or unreachable, "
                           "cordoned).", ["state"], registry=r)
        # Per gauge, its children by (queue, project): labels() once per series, not once per cycle.
        self._children: dict[int, dict[tuple[str, str], Gauge]] = {}
        self._project: dict[str, str] = {}

    def update(self, figures: CycleFigures) -> None:
        """Writes one cycle's figures; gauges of queues gone (or whose project changed) lose their series."""
        for i, (gauge, value) in enumerate(self.gauges):
            children = self._children.setdefault(i, {})
            wanted = {(q, f.project) for q, f in figures.queues.items() if value(f) is not None}
            for gone in set(children) - wanted:
                del children[gone]
                with contextlib.suppress(KeyError):
                    gauge.remove(*gone)
            for queue, f in figures.queues.items():
                amount = value(f)
                if amount is not None:
                    pair = (queue, f.project)
                    child = children.get(pair)
                    if child is None:
                        child = children[pair] = gauge.labels(*pair)
                    child.set(amount)
        self._project = {q: f.project for q, f in figures.queues.items()}
        by_series: dict[tuple[str, str], list[float]] = {}
        for w in figures.waits:
            by_series.setdefault((w.queue, w.priority_class), []).append(w.seconds)
        for (queue, pc), seconds in by_series.items():
            observe = self.wait.labels(queue, self._project.get(queue, ""), pc).observe
            for each in seconds:
                observe(each)
        for e in figures.evictions:
            project = self._project.get(e.queue, "")
            self.preemptions.labels(e.queue, project, e.reason).inc()
            self.preempted_gpu_seconds.labels(e.queue, project, e.reason).inc(e.gpu_seconds)
        for health, count in figures.health.gpus.items():
            self.gpus.labels(health).set(count)
        for state, count in figures.health.nodes.items():
            self.nodes.labels(state).set(count)

    def clear(self) -> None:
        """Removes every gauge series (a replica that stops leading); counters and histograms stay."""
        for i, (gauge, _) in enumerate(self.gauges):
            for pair in self._children.pop(i, {}):
                with contextlib.suppress(KeyError):
                    gauge.remove(*pair)
        self._project = {}

    def completed(self, queue: str, seconds: float) -> None:
        if queue in self._project:
            self.completion.labels(queue, self._project[queue]).observe(seconds)
