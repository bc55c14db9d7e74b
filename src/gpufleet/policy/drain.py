"""Draining nodes and failed GPUs (docs/semantics-notes.md, "Draining nodes and failed GPUs").

One rule, pure: the nodes (their interruption taints and labels, cordon, maintenance marker, unhealthy
GPUs), the running pods with their gangs and GPUs, and the SchedulerConfig in; the gangs to evict whole
with their reason, the pods on failed GPUs to report, and the nodes closed to new pods out. The
controller (``kube/controller/loop.py``) and the simulator (``sim/timeline.py``) both call
:func:`drain_plan`, so that ``simulate run`` predicts what the controller does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpufleet.domain import ANNOTATION_DRAIN, EvictionReason, GpuFailurePolicy, Node, PodKey, SchedulerConfig

__all__ = [
    "DRAIN_REASONS", "DrainNode", "DrainPlan", "FailedGpuPod", "GangDrain", "RunningPod", "drain_node", "drain_plan",
    "node_facts", "node_signal",
]

# The reasons a drain gives, most urgent first: a gang caught by several takes the first.
DRAIN_REASONS = (EvictionReason.SPOT, EvictionReason.MAINTENANCE, EvictionReason.GPU_FAILURE)
_RANK = {reason: i for i, reason in enumerate(DRAIN_REASONS)}


@dataclass(frozen=True, slots=True)
class DrainNode:
    """What the rule reads of a node. ``keys``: its taint keys and label keys together."""

    name: str
    keys: frozenset[str] = frozenset()
    unschedulable: bool = False
    drain_marked: bool = False  # annotation gpufleet.dev/drain: "true"
    spot: bool = False  # its capacity type is spot (gpufleet.ledger.capacity_type_of)
    unhealthy_gpus: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class RunningPod:
    """A bound, unfinished pod of ours: its gang (PodGroup key, or its own key), node and GPU indices."""

    pod: PodKey
    gang: str
    node: str
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class GangDrain:
    """A gang to evict whole: every pod of it, on every node."""

    gang: str
    reason: EvictionReason
    node: str  # the node that caused it
    pods: tuple[PodKey, ...]
    message: str


@dataclass(frozen=True, slots=True)
class FailedGpuPod:
    """A running pod holding a GPU listed unhealthy: reported whatever the policy."""

    pod: PodKey
    node: str
    gpus: tuple[int, ...]  # the failed ones it holds
    evicted: bool  # onGPUFailure: evict

    @property
    def message(self) -> str:
        which = ",".join(map(str, self.gpus))
        noun = "GPU" if len(self.gpus) == 1 else "GPUs"
        then = "its gang is evicted to requeue (onGPUFailure: evict)" if self.evicted else \
            "it keeps running (onGPUFailure: keep)"
        return f"{noun} {which} of node {self.node} listed unhealthy (gpufleet.dev/unhealthy-gpus): {then}"


@dataclass(frozen=True, slots=True)
class DrainPlan:
    drains: tuple[GangDrain, ...] = ()  # by gang
    closed: frozenset[str] = frozenset()  # draining nodes: nothing new lands there
    failed: tuple[FailedGpuPod, ...] = ()  # by pod

    def evictions(self) -> dict[PodKey, GangDrain]:
        return {pod: drain for drain in self.drains for pod in drain.pods}


def node_signal(node: DrainNode, config: SchedulerConfig) -> tuple[EvictionReason, str] | None:
    """Why ``node`` drains, or None."""
    hit = sorted(node.keys.intersection(config.interruption_keys))
    if hit:
        reason = EvictionReason.SPOT if node.spot else EvictionReason.MAINTENANCE
        what = "spot interruption notice" if node.spot else "interruption notice"
        return reason, f"node {node.name} drains: {what} ({hit[0]})"
    if node.unschedulable and (node.drain_marked or config.drain_cordoned):
        marker = "gpufleet.dev/drain" if node.drain_marked else "drainCordoned"
        return EvictionReason.MAINTENANCE, f"node {node.name} drains: cordoned for maintenance ({marker})"
    return None


def drain_plan(nodes: Iterable[DrainNode], pods: Iterable[RunningPod], config: SchedulerConfig) -> DrainPlan:
    """The gangs to drain and the nodes closed (see the module docstring)."""
    signals: dict[str, tuple[EvictionReason, str]] = {}
    unhealthy: dict[str, frozenset[int]] = {}
    for node in nodes:
        signal = node_signal(node, config)
        if signal is not None:
            signals[node.name] = signal
        if node.unhealthy_gpus:
            unhealthy[node.name] = node.unhealthy_gpus
    members: dict[str, list[PodKey]] = {}
    # gang -> (rank, node, message): the most urgent cause seen so far
    cause: dict[str, tuple[int, str, str]] = {}
    failed: list[FailedGpuPod] = []
    evict_failed = config.on_gpu_failure is GpuFailurePolicy.EVICT
    if not signals and not unhealthy:
        return DrainPlan()
    for pod in pods:
        members.setdefault(pod.gang, []).append(pod.pod)
        found = signals.get(pod.node)
        if found is not None:
            _note(cause, pod.gang, _RANK[found[0]], pod.node, found[1])
        bad = unhealthy.get(pod.node)
        if bad is not None and pod.gpus:
            hit = tuple(g for g in pod.gpus if g in bad)
            if hit:
                report = FailedGpuPod(pod.pod, pod.node, hit, evict_failed)
                failed.append(report)
                if evict_failed:
                    _note(cause, pod.gang, _RANK[EvictionReason.GPU_FAILURE], pod.node,
                          f"pod {pod.pod}: {report.message}")
    drains = tuple(
        GangDrain(gang, DRAIN_REASONS[rank], node, tuple(sorted(members[gang])), message)
        for gang, (rank, node, message) in sorted(cause.items())
    )
    return DrainPlan(drains, frozenset(signals), tuple(sorted(failed, key=lambda f: f.pod)))


def _note(cause: dict[str, tuple[int, str, str]], gang: str, rank: int, node: str, message: str) -> None:
    was = cause.get(gang)
    if was is None or (rank, node) < (was[0], was[1]):
        cause[gang] = (rank, node, message)


def drain_node(name: str, taints: Iterable[str], labels: Mapping[str, str], *, unschedulable: bool = False,
               drain_marked: bool = False, spot: bool = False,
               unhealthy_gpus: frozenset[int] = frozenset()) -> DrainNode:
    """A :class:`DrainNode` from a node's taint keys and labels."""
    return DrainNode(name, frozenset(taints) | frozenset(labels), unschedulable, drain_marked, spot, unhealthy_gpus)


def node_facts(node: Node, spot: bool) -> DrainNode:
    """What the rule reads of a snapshot's node (``spot``: its capacity type is spot)."""
    return drain_node(node.name, (t.key for t in node.taints), node.labels, unschedulable=node.unschedulable,
                      drain_marked=node.annotations.get(ANNOTATION_DRAIN) == "true", spot=spot,
                      unhealthy_gpus=node.unhealthy_gpus)
