"""Successive snapshots of one cluster, for timing engines that keep their state between calls
(scripts/bench_incremental.py) and for testing them."""

from __future__ import annotations

from dataclasses import replace

from gpufleet.domain import Decisions, NodeName, Snapshot

__all__ = ["carried_out", "small_delta"]


def carried_out(snapshot: Snapshot, decisions: Decisions, start: float) -> Snapshot:
    """The snapshot once the decisions are carried out: bound pods running where they were put
    (since ``start``, with the blocks they got), evicted pods gone."""
    bound = {b.pod: b for b in decisions.bindings}
    evicted = {e.pod for e in decisions.evictions}
    pods = []
    for p in snapshot.pods:
        if p.key in evicted:
            continue
        b = bound.get(p.key)
        if b is not None:
            p = replace(p, node_name=NodeName(b.node), phase="Running", gpu_index=b.gpus, start_time=start,
                        gpu_blocks=b.gpu_blocks if b.gpu_blocks is not None else p.gpu_blocks,
                        gpu_memory_bytes=None if b.gpu_blocks is not None else p.gpu_memory_bytes)
        pods.append(p)
    return replace(snapshot, pods=tuple(pods))


def small_delta(snapshot: Snapshot, step: int, size: int) -> Snapshot:
    """``size`` running pods finish (spread over the pod list, another set at each ``step``) and
    ``size`` new pending pods arrive (copies of pending pods, or of running ones when none is
    pending, without a PodGroup)."""
    pods = list(snapshot.pods)
    running = [i for i, p in enumerate(pods) if p.bound]
    stride = max(1, len(running) // max(1, size))
    for i in running[step % stride::stride][:size]:
        pods[i] = replace(pods[i], phase="Succeeded")
    models = [p for p in pods if not p.bound and not p.finished] or [p for p in pods if p.bound]
    for k in range(size if models else 0):
        model = models[(step * size + k) % len(models)]
        pods.append(replace(model, name=f"{model.name}-d{step}-{k}", node_name=None, phase="Pending", gpu_index=(),
                            start_time=None, group_label=None))
    return replace(snapshot, pods=tuple(pods))
