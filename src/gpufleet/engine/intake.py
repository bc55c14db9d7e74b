"""What the engine does not take from a snapshot as it is, and the warnings that say so
(docs/semantics-notes.md, "Cluster state the engine does not trust").

A node advertising more than ``MAX_GPUS_PER_NODE`` GPUs is left out (the engine's per-GPU arrays
are as wide as the largest node), and pods bound to a node the engine does not have (deleted, or
left out) are neither pending nor holding capacity. Every reader gets this from the one engine;
the controller reads :func:`screen` too, for its Node Events and its queue usage.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gpufleet.domain import GPU, MILLI, Node, Pod, Snapshot
from gpufleet.domain.nodes import MAX_GPUS_PER_NODE, GpuCountProblem, TooManyGpus, gpu_count_problem

__all__ = ["Screened", "ScreenedNodes", "screen", "screen_nodes"]

_LIMIT = MAX_GPUS_PER_NODE * MILLI


@dataclass(frozen=True)
class Screened:
    """A snapshot as the engine takes it, and what it did not take as it was."""

    snapshot: Snapshot  # without the nodes left out and the pods on no node of it
    nodes: tuple[GpuCountProblem, ...]  # nodes left out (TooManyGpus) or rounded down, by name
    strays: tuple[Pod, ...]  # pods bound to a node the snapshot does not have, by key

    @property
    def warnings(self) -> list[str]:
        return [p.text for p in self.nodes] + [
            f"pod {p.key} is bound to node {p.node_name}, which is not in the snapshot: ignored" for p in self.strays
        ]


@dataclass(frozen=True)
class ScreenedNodes:
    """The node half of :func:`screen`, which depends on the nodes alone (kept between calls by
    an engine that keeps its state)."""

    nodes: tuple[Node, ...]  # the nodes as given, less those left out
    problems: tuple[GpuCountProblem, ...]  # nodes left out (TooManyGpus) or rounded down, by name
    present: frozenset[str | None]  # the names of ``nodes``, and None (a pod bound to no node)
    left_out: bool  # some node was left out (``nodes`` is then a new tuple)


def screen_nodes(nodes: tuple[Node, ...]) -> ScreenedNodes:
    """The nodes of a snapshot without those over the GPU bound, and the problems found."""
    # One cheap pass over every node; the rule itself runs on the odd ones only.
    odd = [n for n in nodes if (m := n.allocatable.get(GPU, 0)) % MILLI or m > _LIMIT]
    problems = [p for n in sorted(odd, key=lambda n: n.name) if (p := gpu_count_problem(n)) is not None]
    left_out = {p.node for p in problems if isinstance(p, TooManyGpus)}
    if left_out:
        nodes = tuple(n for n in nodes if n.name not in left_out)
    present: set[str | None] = {n.name for n in nodes}
    present.add(None)  # not bound: one set lookup per pod decides
    return ScreenedNodes(nodes, tuple(problems), frozenset(present), bool(left_out))


def screen(snapshot: Snapshot, nodes: ScreenedNodes | None = None) -> Screened:
    """``snapshot`` without the nodes over the GPU bound and the pods bound to no node of it.
    ``nodes``: ``screen_nodes(snapshot.nodes)``, when the caller has it already."""
    if nodes is None:
        nodes = screen_nodes(snapshot.nodes)
    present = nodes.present
    strays = [p for p in snapshot.pods if p.node_name not in present and not p.finished]
    if strays:
        gone = {id(p) for p in strays}
        snapshot = dataclasses.replace(snapshot, pods=tuple(p for p in snapshot.pods if id(p) not in gone))
    if nodes.left_out:
        snapshot = dataclasses.replace(snapshot, nodes=nodes.nodes)
    return Screened(snapshot, nodes.problems, tuple(sorted(strays, key=lambda p: p.key)))
