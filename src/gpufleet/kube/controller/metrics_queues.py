"""Per-queue and per-project figures of one controller cycle, pure (docs/metrics.md).

:func:`cycle_figures` turns a cycle's snapshot view, end state, queue reports (the same
:func:`~gpufleet.kube.controller.reporting.queue_reports` the Queue statuses come from: subtree
sums, quota, borrowed), the pods bound and evicted in the cycle and, when telemetry is configured,
the pods' GPU utilisation and the idle pods, into :class:`CycleFigures`; the exporter
(:mod:`gpufleet.kube.controller.metrics_export`) writes them into Prometheus gauges, counters and
histograms. Every label value is a queue, project or PriorityClass name the snapshot has, or one of
a few fixed words: never a pod name.

Units are those of ``semantics.md``: a whole GPU counts 1, a fractional pod blocks/100.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from gpufleet.domain import GPU, MILLI, MILLI_PER_BLOCK, Eviction, Pod, PodKey, Project, Queue, Snapshot
from gpufleet.kube.controller.convert import SnapshotView
from gpufleet.kube.controller.reporting import EndState, QueueReport

__all__ = [
    "NOT_READY_TAINTS",
    "CycleFigures",
    "EvictionCost",
    "GpuUsageFacts",
    "HealthFigures",
    "QueueFigures",
    "WaitSample",
    "completion_seconds",
    "cycle_figures",
    "health_figures",
    "project_of_queues",
    "runtime_seconds",
]

NOT_READY_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


@dataclass(frozen=True, slots=True)
class GpuUsageFacts:
    """What telemetry says at the cycle: GPU utilisation in percent per pod (``namespace/name``; pods
    without a fresh reading absent) and the pods the IdleTracker finds idle."""

    util_percent: Mapping[str, float] = field(default_factory=dict)
    idle: Collection[str] = frozenset()


@dataclass(frozen=True, slots=True)
class QueueFigures:
    project: str  # the Project naming the queue or its nearest ancestor so named; "" for none
    leaf: bool  # no queue names it as parent (pods are submitted to leaves)
    allocated_gpus: float
    quota_gpus: float
    borrowed_gpus: float
    lent_gpus: float
    pending_gangs: int
    pending_gpus: float
    used_gpus: float | None  # None: no telemetry
    idle_gpus: float | None  # None: no telemetry


@dataclass(frozen=True, slots=True)
class WaitSample:
    queue: str
    priority_class: str
    seconds: float


@dataclass(frozen=True, slots=True)
class EvictionCost:
    queue: str
    reason: str  # reclaim | preempt
    gpu_seconds: float  # the victim's GPUs times how long it had run


@dataclass(frozen=True, slots=True)
class HealthFigures:
    gpus: Mapping[str, int]  # health (healthy, unhealthy) -> GPUs
    nodes: Mapping[str, int]  # state (ready, not_ready, cordoned) -> nodes


@dataclass(frozen=True, slots=True)
class CycleFigures:
    queues: Mapping[str, QueueFigures]
    waits: tuple[WaitSample, ...]
    evictions: tuple[EvictionCost, ...]
    health: HealthFigures


def project_of_queues(projects: Iterable[Project], queues: Sequence[Queue] = ()) -> dict[str, str]:
    """Each queue named by a Project, and that Project (the first by name when several name it); a
    queue no Project names takes the Project of its nearest ancestor named by one (``queues``)."""
    out: dict[str, str] = {}
    for project in sorted(projects, key=lambda p: p.name):
        for queue in project.queues:
            out.setdefault(str(queue), project.name)
    parent = {str(q.name): q.parent for q in queues}
    for name in parent:
        seen: set[str] = set()
        node: str | None = name
        while node is not None and node not in out and node not in seen:
            seen.add(node)
            node = parent.get(node)
        if node is not None and node in out:
            out.setdefault(name, out[node])
    return out


def _gpus(pod: Pod) -> float:
    """What the pod counts against quota, in GPUs (``usage_of``'s rule)."""
    if pod.is_fractional:
        return (pod.gpu_blocks or 0) * MILLI_PER_BLOCK / MILLI
    return float(pod.whole_gpus)


def _lent(queues: Sequence[Queue], quota: Mapping[str, float], allocated: Mapping[str, float]) -> dict[str, float]:
    """Per group of siblings (children of one parent, or the top-level queues): the unused quota of
    each, scaled so that the group lends what its members borrow (never more than it has unused)."""
    groups: dict[str | None, list[str]] = {}
    for q in queues:
        groups.setdefault(q.parent if q.parent in quota else None, []).append(str(q.name))
    lent: dict[str, float] = {}
    for members in groups.values():
        unused = np.array([max(0.0, quota[m] - allocated[m]) for m in members])
        borrowed = sum(max(0.0, allocated[m] - quota[m]) for m in members)
        total = float(unused.sum())
        share = min(1.0, borrowed / total) if total > 0 else 0.0
        for name, value in zip(members, (unused * share).tolist(), strict=True):
            lent[name] = value
    return lent


def _subtree_sums(queues: Sequence[Queue], leaf: Mapping[str, float]) -> dict[str, float]:
    """Per queue, the sum of ``leaf`` over its subtree (queues listed before their parents or not)."""
    names = {str(q.name) for q in queues}
    parent = {str(q.name): q.parent for q in queues}
    out = dict.fromkeys(names, 0.0)
    for name, value in leaf.items():
        seen: set[str] = set()
        node: str | None = name
        while node is not None and node in names and node not in seen:
            seen.add(node)
            out[node] += value
            node = parent[node]
    return out


def _per_queue(keys: Iterable[PodKey], view: SnapshotView) -> dict[str, float]:
    """GPUs of the pods ``keys`` summed per leaf queue."""
    out: dict[str, float] = {}
    for key in keys:
        pod = view.pods.get(key)
        queue = view.queue_of.get(key)
        if pod is not None and queue is not None:
            out[queue] = out.get(queue, 0.0) + _gpus(pod)
    return out


def _usage_per_queue(usage: GpuUsageFacts, queue_of: Mapping[PodKey, str],
                     bound: Mapping[PodKey, Pod]) -> tuple[dict[str, float], dict[str, float]]:
    """Used GPUs (GPUs x utilisation) and idle GPUs per leaf queue, over the bound pods telemetry names."""
    used: dict[str, float] = {}
    idle: dict[str, float] = {}
    for text, percent in usage.util_percent.items():
        key = PodKey(text)
        pod = bound.get(key)
        queue = queue_of.get(key)
        if pod is not None and queue is not None:
            used[queue] = used.get(queue, 0.0) + _gpus(pod) * min(1.0, max(0.0, percent / 100.0))
    for text in usage.idle:
        key = PodKey(text)
        pod = bound.get(key)
        queue = queue_of.get(key)
        if pod is not None and queue is not None:
            idle[queue] = idle.get(queue, 0.0) + _gpus(pod)
    return used, idle


def health_figures(snapshot: Snapshot) -> HealthFigures:
    """GPUs by health (the device plugin's unhealthy GPUs, as the nodes report them) and nodes by state."""
    total = unhealthy = ready = not_ready = cordoned = 0
    for node in snapshot.nodes:
        total += node.gpu_count
        unhealthy += len(node.unhealthy_gpus)
        if any(t.key in NOT_READY_TAINTS for t in node.taints):
            not_ready += 1
        elif node.unschedulable:
            cordoned += 1
        else:
            ready += 1
    return HealthFigures(
        gpus={"healthy": max(0, total - unhealthy), "unhealthy": unhealthy},
        nodes={"ready": ready, "not_ready": not_ready, "cordoned": cordoned},
    )


def cycle_figures(
    view: SnapshotView,
    state: EndState,
    reports: Mapping[str, QueueReport],
    *,
    now: float,
    bound: Iterable[PodKey] = (),
    evictions: Iterable[Eviction] = (),
    usage: GpuUsageFacts | None = None,
) -> CycleFigures:
    """The figures of one cycle. ``bound``: pods bound in the cycle (their wait ends); ``evictions``:
    the evictions decided in it (the victims are still in ``view``); ``usage``: telemetry, or None."""
    snapshot = view.snapshot
    queues = snapshot.queues
    project = project_of_queues(snapshot.projects, queues)
    parents = {q.parent for q in queues}
    quota = {q: r.quota.get(GPU, 0) / MILLI for q, r in reports.items()}
    allocated = {q: r.usage.get(GPU, 0) / MILLI for q, r in reports.items()}
    borrowed = {q: r.borrowed.get(GPU, 0) / MILLI for q, r in reports.items()}
    lent = _lent([q for q in queues if str(q.name) in reports], quota, allocated)
    pending_gpus = _subtree_sums(queues, _per_queue(state.pending, view))
    used: dict[str, float] | None = None
    idle: dict[str, float] | None = None
    if usage is not None:
        used_leaf, idle_leaf = _usage_per_queue(usage, view.queue_of, state.bound)
        used, idle = _subtree_sums(queues, used_leaf), _subtree_sums(queues, idle_leaf)
    figures = {
        name: QueueFigures(
            project=project.get(name, ""),
            leaf=name not in parents,
            allocated_gpus=allocated[name],
            quota_gpus=quota[name],
            borrowed_gpus=borrowed[name],
            lent_gpus=lent.get(name, 0.0),
            pending_gangs=report.pending,
            pending_gpus=pending_gpus.get(name, 0.0),
            used_gpus=None if used is None else used.get(name, 0.0),
            idle_gpus=None if idle is None else idle.get(name, 0.0),
        )
        for name, report in reports.items()
    }
    classes = {pc.name for pc in snapshot.priority_classes}
    waits: list[WaitSample] = []
    for key in bound:
        pod = view.pods.get(key)
        queue = view.queue_of.get(key)
        if pod is None or queue is None or pod.creation_time <= 0:
            continue
        pc = pod.priority_class_name if pod.priority_class_name in classes else ""
        waits.append(WaitSample(queue, pc or "", max(0.0, now - pod.creation_time)))
    costs: list[EvictionCost] = []
    for eviction in evictions:
        pod = view.pods.get(eviction.pod)
        queue = view.queue_of.get(eviction.pod)
        if pod is None or queue is None:
            continue
        since = pod.start_time if pod.start_time is not None else pod.creation_time
        ran = max(0.0, now - since) if since and since > 0 else 0.0
        costs.append(EvictionCost(queue, eviction.reason.value, _gpus(pod) * ran))
    return CycleFigures(figures, tuple(waits), tuple(costs), health_figures(snapshot))


def _timestamp(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def completion_seconds(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> float | None:
    """A pod's completion time (creation to its last container's finish) when this change is the one
    that makes it Succeeded; None for every other change (a first listing of an old pod included)."""
    return _succeeded_since(old, new, lambda pod: (pod.get("metadata") or {}).get("creationTimestamp"))


def runtime_seconds(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> float | None:
    """A pod's runtime (its ``status.startTime`` to its last container's finish) when this change is the
    one that makes it Succeeded; None for every other change."""
    return _succeeded_since(old, new, lambda pod: (pod.get("status") or {}).get("startTime"))


def _succeeded_since(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None,
                     since: Callable[[Mapping[str, Any]], Any]) -> float | None:
    """Seconds from the time ``since`` reads off the pod to its last container's finish, when this change
    makes the pod Succeeded."""
    if old is None or new is None:
        return None
    if (old.get("status") or {}).get("phase") == "Succeeded":
        return None
    status = new.get("status") or {}
    if status.get("phase") != "Succeeded":
        return None
    created = _timestamp(since(new))
    finished = [_timestamp(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
                for c in status.get("containerStatuses") or [] if isinstance(c, Mapping)]
    ends = [f for f in finished if f is not None]
    if created is None or not ends:
        return None
    seconds = max(ends) - created
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
