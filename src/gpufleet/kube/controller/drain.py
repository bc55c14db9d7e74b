"""The controller's side of draining (docs/semantics-notes.md, "Draining nodes and failed GPUs").

The rule is :func:`gpufleet.policy.drain_plan`; this module feeds it from a cycle's snapshot and
hands its closed nodes to the engine as unschedulable. Both are per cycle, so both keep what they
built for a Node object (the converted cache keeps a node's domain object while the Node does not
change): a cycle with no signal anywhere costs one dictionary look-up per node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from gpufleet.domain import Node, Pod, PodKey, Snapshot
from gpufleet.domain.queues import gang_id
from gpufleet.ledger import is_spot_node
from gpufleet.policy import DrainNode, DrainPlan, RunningPod, drain_plan, node_facts

__all__ = ["DrainInputs", "gang_age"]


class DrainInputs:
    """Builds :func:`drain_plan`'s input from snapshots, keeping per Node object what it read."""

    def __init__(self) -> None:
        # id(node) -> (node, what the rule reads of it, or None when it can never signal)
        self._nodes: dict[int, tuple[Node, DrainNode | None]] = {}
        self._closed: dict[int, tuple[Node, Node]] = {}
        self._keys: tuple[str, ...] = ()

    def _drain_node(self, node: Node, keys: frozenset[str]) -> DrainNode | None:
        seen = self._nodes.get(id(node))
        if seen is not None and seen[0] is node:
            return seen[1]
        relevant = node.unschedulable or node.unhealthy_gpus or not keys.isdisjoint(node.labels) or \
            any(t.key in keys for t in node.taints)
        found = node_facts(node, is_spot_node(node.labels)) if relevant else None
        self._nodes[id(node)] = (node, found)
        return found

    def plan(self, snapshot: Snapshot, pods: Mapping[PodKey, Pod]) -> DrainPlan:
        """The drain plan of this snapshot: only nodes that may signal, and only the gangs with a pod on one."""
        config = snapshot.config
        if config.interruption_keys != self._keys:
            self._nodes.clear()
            self._keys = config.interruption_keys
        keys = frozenset(config.interruption_keys)
        nodes = [d for d in (self._drain_node(n, keys) for n in snapshot.nodes) if d is not None]
        if len(self._nodes) > 2 * len(snapshot.nodes) + 64:  # forget nodes that changed or went
            live = {id(n) for n in snapshot.nodes}
            self._nodes = {k: v for k, v in self._nodes.items() if k in live}
        if not nodes:
            return DrainPlan()
        watched = {d.name for d in nodes}
        gangs: dict[str, list[RunningPod]] = {}
        touched: set[str] = set()
        for pod in pods.values():
            if pod.node_name is None or pod.finished or not pod.ours:
                continue
            gang = gang_id(pod)
            gangs.setdefault(gang, []).append(RunningPod(pod.key, gang, pod.node_name, pod.gpu_index))
            if pod.node_name in watched:
                touched.add(gang)
        running = [p for gang in sorted(touched) for p in gangs[gang]]
        return drain_plan(nodes, running, config)

    def closed(self, snapshot: Snapshot, closed: Iterable[str]) -> Snapshot:
        """``snapshot`` with the ``closed`` nodes unschedulable: the engine places nothing there, whatever
        their taints and the pods' tolerations."""
        names = set(closed)
        if not names:
            return snapshot
        nodes: list[Node] = []
        for node in snapshot.nodes:
            if node.name not in names or node.unschedulable:
                nodes.append(node)
                continue
            kept = self._closed.get(id(node))
            if kept is None or kept[0] is not node:  # the same object each cycle: the engine keeps its state
                kept = (node, replace(node, unschedulable=True))
                self._closed[id(node)] = kept
            nodes.append(kept[1])
        if len(self._closed) > 2 * len(names) + 64:
            live = {id(n) for n in snapshot.nodes}
            self._closed = {k: v for k, v in self._closed.items() if k in live}
        return replace(snapshot, nodes=tuple(nodes))


def gang_age(pods: Iterable[Pod], queued_at: float | None) -> float | None:
    """The age a drained gang keeps (the engine's: its pods' earliest creation, or its group's
    ``queued-at`` when earlier); None when nothing says."""
    created = [p.creation_time for p in pods if p.creation_time > 0]
    if queued_at is not None:
        created.append(queued_at)
    return min(created) if created else None
