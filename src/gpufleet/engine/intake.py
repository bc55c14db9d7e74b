"""What the engine does not take from a snapshot as it is, and the warnings that say so
(docs/semantics-notes.md, "Cluster state the engine does not trust").

A node advertising more than ``MAX_GPUS_PER_NODE`` GPUs is left out (the engine's per-GPU arrays
are as wide as the largest node), and pods bound to a node the engine does not have (deleted, or
left out) are neither pending nor holding capacity. Every reader gets this from the one engine.
"""

from __future__ import annotations

import dataclasses

from gpufleet.domain import GPU, MILLI, Snapshot
from gpufleet.domain.nodes import MAX_GPUS_PER_NODE, TooManyGpus, gpu_count_problem

__all__ = ["screen"]

_LIMIT = MAX_GPUS_PER_NODE * MILLI


def screen(snapshot: Snapshot) -> tuple[Snapshot, list[str]]:
    """``snapshot`` without the nodes over the GPU bound and the pods bound to no node of it, and
    a warning for each (and for each node whose GPU count is rounded down)."""
    warnings: list[str] = []
    nodes = snapshot.nodes
    # One cheap pass over every node; the rule itself runs on the odd ones only.
    odd = [n for n in nodes if (m := n.allocatable.get(GPU, 0)) % MILLI or m > _LIMIT]
    left_out: set[str] = set()
    for node in sorted(odd, key=lambda n: n.name):
        problem = gpu_count_problem(node)
        if problem is None:  # pragma: no cover - odd nodes all have one
            continue
        warnings.append(problem.text)
        if isinstance(problem, TooManyGpus):
            left_out.add(node.name)
    if left_out:
        nodes = tuple(n for n in nodes if n.name not in left_out)
    present = {n.name for n in nodes}
    strays = [p for p in snapshot.pods if p.node_name is not None and p.node_name not in present and not p.finished]
    if strays:
        gone = {id(p) for p in strays}
        warnings.extend(f"pod {p.key} is bound to node {p.node_name}, which is not in the snapshot: ignored"
                        for p in sorted(strays, key=lambda p: p.key))
        snapshot = dataclasses.replace(snapshot, pods=tuple(p for p in snapshot.pods if id(p) not in gone))
    if left_out:
        snapshot = dataclasses.replace(snapshot, nodes=nodes)
    return snapshot, warnings
