"""Incremental placement: one pod at a time, with exactly the placement code ``schedule()`` runs.

``schedule(snapshot)`` decides a whole snapshot at once; a simulator that feeds tasks one by one
(the FGD fill experiment) needs the same decisions without rebuilding the engine per task. A
:class:`PlacementSession` holds the engine's own ClusterState, StaticFeasibility and Placer and
commits each placement to them, so the choice for every pod is the Placer's, not a copy of it.

For pods of one queue, one priority and no gang, placed in creation order, a session decides
what ``schedule()`` decides for the same pods (tests/engine/test_session.py checks it). It knows
nothing of queues, quotas or preemption: those are the Engine's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpufleet.domain import (
    GPU,
    Binding,
    FlavorChoice,
    Node,
    NodeName,
    Pod,
    PodKey,
    ResourceFlavor,
    SchedulerConfig,
    Snapshot,
)
from gpufleet.engine.cluster import ClusterState
from gpufleet.engine.feasibility import StaticFeasibility
from gpufleet.engine.flavors import with_any_flavor, with_flavor
from gpufleet.engine.fragmentation import TargetWorkload
from gpufleet.engine.placement import Assignment, Placer
from gpufleet.engine.workload import PodInfo, build_pods

__all__ = ["PlacementSession"]


class PlacementSession:
    """Places pods one by one on ``nodes`` (empty at first) with ``config.placement``.

    ``target`` is the workload the ``defrag`` placement keeps room for: a TargetWorkload, or pods
    whose shapes make one (their most frequent shapes, see TargetWorkload.of_pods). Without one,
    ``defrag`` takes the shapes of the pods known at the first placement (the first pod alone):
    give it one.
    """

    def __init__(self, nodes: Sequence[Node], config: SchedulerConfig | None = None,
                 target: TargetWorkload | Sequence[Pod] | None = None,
                 flavors: Sequence[ResourceFlavor] = (), choice: FlavorChoice = FlavorChoice.IN_ORDER) -> None:
        """``flavors``: the ResourceFlavors of one queue that lists them all in this order, each
        with a quota of its capacity: a pod that asks GPUs takes the first flavor it fits on
        (``choice`` InOrder) or the best node over all of them (BestPlacement), as the engine does
        (docs/semantics.md, "GPU-model quotas")."""
        self.config = config or SchedulerConfig()
        self.flavors = [dict(f.node_labels) for f in flavors]
        self.choice = choice
        self.cluster = ClusterState(nodes, ())
        self.feasibility = StaticFeasibility(self.cluster.nodes, self.cluster.schedulable)
        if target is not None and not isinstance(target, TargetWorkload):
            target = TargetWorkload.of_pods(target)
        self._pods: list[PodInfo] = []
        self.placer = Placer(self.cluster, self.feasibility, self._pods, self.config.placement, target=target)
        self._by_key: dict[PodKey, int] = {}

    @property
    def bound(self) -> int:
        """Pods placed and not released."""
        return len(self._by_key)

    def _info(self, pod: Pod) -> PodInfo | None:
        """The engine's view of ``pod`` (None: it can fit no node of this cluster)."""
        for r, v in pod.requests.items():
            if v > 0 and r != GPU and r not in self.cluster.res_index:
                return None  # a resource no node offers
        got = build_pods(Snapshot(pods=(pod,), config=self.config), self.cluster, {})
        if not got:
            return None  # finished pods hold and need nothing
        info = got[0]
        info.idx = info.name_rank = len(self._pods)
        return info

    def _grow(self) -> None:
        node_of = self.placer.node_of
        if len(node_of) < len(self._pods):
            grown = np.full(max(16, 2 * len(self._pods)), -1, dtype=np.int64)
            grown[: len(node_of)] = node_of
            self.placer.node_of = grown

    def place(self, pod: Pod) -> Binding | None:
        """Bind ``pod`` where the Placer chooses and commit it; None when it fits nowhere now."""
        if pod.key in self._by_key:
            raise ValueError(f"pod {pod.key} is already placed")
        info = self._info(pod)
        if info is None:
            return None
        self._pods.append(info)
        self._grow()
        assignment = self._flavored(info) if self.flavors and (info.whole or info.fractional) else (
            self.placer.best_node(info))
        if assignment is None:
            self._pods.pop()
            return None
        self.placer.commit(assignment)
        self._by_key[pod.key] = info.idx
        node = NodeName(self.cluster.nodes[assignment.node].name)
        return Binding(pod.key, node, tuple(sorted(assignment.gpus)), assignment.blocks)

    def _flavored(self, info: PodInfo) -> Assignment | None:
        """The placement on the first flavor the pod fits on (its pod given back after)."""
        pod = info.pod
        try:
            if self.choice is FlavorChoice.BEST_PLACEMENT:
                union = with_any_flavor(pod, self.flavors)
                if union is None:
                    return None
                info.pod = union
                return self.placer.best_node(info)
            for labels in self.flavors:
                flavored = with_flavor(pod, labels)
                if flavored is None:
                    continue
                info.pod = flavored
                assignment = self.placer.best_node(info)
                if assignment is not None:
                    return assignment
            return None
        finally:
            info.pod = pod

    def release(self, key: PodKey) -> None:
        """Give back what a placed pod holds (the pod leaves)."""
        idx = self._by_key.pop(key)
        self.placer.release(idx)
