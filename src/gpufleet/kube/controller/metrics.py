"""Prometheus metrics of the controller, and its HTTP endpoints ``/metrics``, ``/healthz``, ``/readyz``.

Every controller has its own :class:`~prometheus_client.CollectorRegistry` (tests run several
side by side). ``/readyz`` answers 200 once the informers have listed every kind, on the leader
and on followers alike (a follower is ready to take over); ``/healthz`` answers 200 while the
event loop runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gpufleet.kube.controller.metrics_export import QueueMetrics
from gpufleet.kube.controller.serving import RendersMetrics, serve_http

__all__ = ["ControllerMetrics", "RendersMetrics", "serve_http"]

_CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.cycle_duration = Histogram(
            "gpufleet_cycle_duration_seconds", "Wall time of one scheduling cycle: snapshot, engine, API calls.",
            buckets=_CYCLE_BUCKETS, registry=r,
        )
        self.engine_duration = Histogram(
            "gpufleet_engine_duration_seconds", "Wall time of the engine's schedule() call in a cycle.",
            buckets=_CYCLE_BUCKETS, registry=r,
        )
        self.decisions = Counter(
            "gpufleet_decisions_total", "Decisions of the engine, by kind (binding, eviction, pending).",
            ["kind"], registry=r,
        )
        self.bindings = Counter(
            "gpufleet_bindings_total", "Pods bound through the Binding API, by result (bound, failed).",
            ["result"], registry=r,
        )
        self.evictions = Counter(
            "gpufleet_evictions_total",
            "Evictions requested, by reason (reclaim, preempt, idle; drains: spot, maintenance, gpu-failure), result.",
            ["reason", "result"], registry=r,
        )
        self.failed_gpu_pods = Gauge(
            "gpufleet_pods_on_failed_gpus", "Running pods holding a GPU listed in gpufleet.dev/unhealthy-gpus.",
            registry=r,
        )
        self.pending_gangs = Gauge("gpufleet_pending_gangs", "Gangs waiting to be admitted, per queue.",
                                   ["queue"], registry=r)
        self.admitted_gangs = Gauge("gpufleet_admitted_gangs", "Gangs admitted (bound), per queue.",
                                    ["queue"], registry=r)
        self.reserved_gpus = Gauge("gpufleet_reserved_gpus", "Whole GPUs reserved for gangs that waited too "
                                   "long (docs/semantics.md, \"Reservation and backfill\"), at the last cycle.",
                                   registry=r)
        self.queue_usage = Gauge("gpufleet_queue_usage", "Usage of a queue (its subtree), in units of the resource.",
                                 ["queue", "resource"], registry=r)
        self.queue_quota = Gauge("gpufleet_queue_quota", "Quota of a queue, in units of the resource.",
                                 ["queue", "resource"], registry=r)
        self.queue_decayed_usage = Gauge(
            "gpufleet_queue_decayed_usage", "Decayed usage of a queue (its subtree) as its status.decayedUsage "
            "says, in units of the resource (docs/semantics.md, \"Fairness over time\"); none while "
            "fairShare.usageHalfLife is off.", ["queue", "resource"], registry=r)
        self.api_errors = Counter(
            "gpufleet_api_errors_total", "Failed Kubernetes API calls, by operation and HTTP status (0: no answer).",
            ["operation", "code"], registry=r,
        )
        self.relists = Counter("gpufleet_informer_relists_total", "Full relists of an informer (start, 410 Gone).",
                               ["kind"], registry=r)
        self.leader = Gauge("gpufleet_leader", "1 while this replica holds the leader lease.", registry=r)
        self.events = Counter("gpufleet_events_total", "Kubernetes Events written, by reason.", ["reason"], registry=r)
        self.queues = QueueMetrics(r)  # per queue and project, GPU health (docs/metrics.md)
        self._queue_labels: set[str] = set()
        self._resource_labels: set[tuple[str, str]] = set()
        self._decayed_labels: set[tuple[str, str]] = set()
        self._ledger_metrics(r)

    def _ledger_metrics(self, r: CollectorRegistry) -> None:
        """The usage ledger's writer (``gpufleet controller --database``); zero while it is off."""
        self.ledger_buffered = Gauge("gpufleet_ledger_buffered_events",
                                     "Usage ledger events waiting in memory to be written.", registry=r)
        self.ledger_dropped = Counter("gpufleet_ledger_dropped_events_total",
                                      "Usage ledger events dropped because the buffer was full.", registry=r)
        self.ledger_written = Gauge("gpufleet_ledger_written_events",
                                    "Usage ledger events written since the controller started.", registry=r)
        self.ledger_failures = Gauge("gpufleet_ledger_write_failures",
                                     "Failed usage ledger writes in a row (0 while writes succeed).", registry=r)
        self.ledger_reconcile_failures = Counter(
            "gpufleet_ledger_reconcile_failures_total",
            "Reconciliations of the usage ledger after a start that could not read the database.", registry=r)

    def api_error(self, operation: str, status: int) -> None:
        self.api_errors.labels(operation, str(status)).inc()

    def set_queues(
        self,
        pending: Mapping[str, int],
        admitted: Mapping[str, int],
        usage: Mapping[str, Mapping[str, float]],
        quota: Mapping[str, Mapping[str, float]],
    ) -> None:
        """Per-queue gauges; queues that disappeared lose their series."""
        names = set(pending) | set(admitted) | set(usage) | set(quota)
        for gone in self._queue_labels - names:
            for gauge in (self.pending_gangs, self.admitted_gangs):
                with contextlib.suppress(KeyError):
                    gauge.remove(gone)
        self._queue_labels = names
        pairs = {(q, r) for table in (usage, quota) for q, amounts in table.items() for r in amounts}
        for gone_pair in self._resource_labels - pairs:
            for gauge in (self.queue_usage, self.queue_quota):
                with contextlib.suppress(KeyError):
                    gauge.remove(*gone_pair)
        self._resource_labels = pairs
        for name in names:
            self.pending_gangs.labels(name).set(pending.get(name, 0))
            self.admitted_gangs.labels(name).set(admitted.get(name, 0))
            for resource, amount in usage.get(name, {}).items():
                self.queue_usage.labels(name, resource).set(amount)
            for resource, amount in quota.get(name, {}).items():
                self.queue_quota.labels(name, resource).set(amount)

    def set_decayed_usage(self, decayed: Mapping[str, Mapping[str, float]]) -> None:
        """``gpufleet_queue_decayed_usage`` per queue and resource; series not in ``decayed`` are removed
        (every one of them when the half-life is off and ``decayed`` is empty)."""
        pairs = {(q, r) for q, amounts in decayed.items() for r in amounts}
        for gone in self._decayed_labels - pairs:
            with contextlib.suppress(KeyError):
                self.queue_decayed_usage.remove(*gone)
        self._decayed_labels = pairs
        for name, amounts in decayed.items():
            for resource, amount in amounts.items():
                self.queue_decayed_usage.labels(name, resource).set(amount)

    def render(self) -> bytes:
        return generate_latest(self.registry)
