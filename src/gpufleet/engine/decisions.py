"""What one ``schedule()`` call decided so far, and the ``Decisions`` it returns.

Bindings and evictions are kept by pod index while the cycles run; the output names pods and
nodes, sorted by pod so that it does not depend on the order of decisions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import itemgetter

from gpufleet.domain import Decisions, Eviction, Node, NodeName, PodKey, VolumeBinding, bindings_of, pending_pods
from gpufleet.engine.placement import Assignment
from gpufleet.engine.workload import Gang, PodInfo

__all__ = ["DecisionLog"]


class DecisionLog:
    """Bindings and evictions by pod index, and the warnings of the call."""

    def __init__(self, warnings: Sequence[str] = ()) -> None:
        self.bindings: dict[int, Assignment] = {}
        self.evictions: dict[int, Eviction] = {}
        self.warnings: list[str] = list(warnings)

    def bind(self, a: Assignment) -> None:
        self.bindings[a.pod] = a

    def evict(self, pod: int, eviction: Eviction) -> None:
        """A running pod is evicted (a binding made earlier in the call, if any, is withdrawn)."""
        self.evictions[pod] = eviction
        self.bindings.pop(pod, None)

    def withdraw(self, pod: int) -> None:
        """A binding made earlier in the call is taken back before it was ever carried out."""
        del self.bindings[pod]

    def decisions(self, nodes: Sequence[Node], pods: Sequence[PodInfo], gangs: Sequence[Gang],
                  open_gangs: Sequence[int], cycles: int,
                  volumes: Mapping[int, tuple[VolumeBinding, ...]] | None = None,
                  flavors: Sequence[str] = ()) -> Decisions:
        """The output: every binding and eviction, and every member of an open gang left pending
        with its gang's reason. ``volumes``: the volumes chosen with each pod's node, by pod index."""
        volumes = volumes or {}
        rows: list[tuple[PodKey, NodeName, tuple[int, ...], int | None, tuple[VolumeBinding, ...], str | None]] = []
        add_row = rows.append
        for m, a in self.bindings.items():
            info = pods[m]
            f = info.flavor
            add_row((info.key, NodeName(nodes[a.node].name), tuple(sorted(a.gpus)), a.blocks, volumes.get(m, ()),
                     flavors[f] if flavors and f >= 0 else None))
        rows.sort(key=itemgetter(0))  # by pod key (unique)
        # (pod key, reason) of every member left pending: pod keys are unique, so the pairs sort
        # by pod key; the PendingPods are made in that order.
        pending: list[tuple[PodKey, str]] = []
        add = pending.append
        made, evicted = self.bindings, self.evictions
        for g in open_gangs:
            gang = gangs[g]
            reason = gang.pending_reason or "not tried"
            if gang.taken_back_by:
                reason += f"; admitted in this pass, then taken back for {gang.taken_back_by}"
            for m in gang.members:
                info = pods[m]
                pod = info.pod
                if (pod.node_name is not None and not pod.finished) or m in made or m in evicted:  # pod.bound
                    continue
                add((info.key, reason))
        pending.sort()
        return Decisions(
            bindings=bindings_of(*zip(*rows, strict=True)) if rows else (),
            evictions=tuple(sorted(self.evictions.values(), key=lambda e: e.pod)),
            pending=pending_pods(*zip(*pending, strict=True)) if pending else (),
            warnings=tuple(self.warnings),
            cycles=cycles,
        )
