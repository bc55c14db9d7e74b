"""The snapshot's running pods take their capacity before anything is decided.

Pods whose gpu-index annotation is complete are bound in bulk with NumPy (``Placer.commit_many``);
the others follow one by one, in order of start time, then name, and those without a usable
gpu-index get the lowest free GPUs. Then the running members count towards their gangs, and
their usage towards their queues.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpufleet.domain import GPU, MILLI, MILLI_PER_BLOCK, PODS
from gpufleet.engine.cluster import BoolArray, ClusterState, IntArray
from gpufleet.engine.placement import Assignment, Placer
from gpufleet.engine.queues import QueueForest
from gpufleet.engine.workload import Gang, PodInfo

__all__ = ["bind_running", "preset_node_warnings"]


def bind_running(pods: Sequence[PodInfo], requests: IntArray, placer: Placer, gangs: Sequence[Gang],
                 forest: QueueForest) -> None:
    """Bind every running pod of ``pods`` (rows of ``requests``) where the snapshot has it."""
    c = placer.cluster
    width = c.gpu_free.shape[1]
    index = c.index
    running = [p for p in pods if p.pod.node_name in index and not p.pod.finished]
    rest: list[PodInfo] = []
    # One pass sorts pods into the bulk (complete gpu-index) and the rest, and collects the
    # bulk's cells; the pass is flat Python because every running pod goes through it.
    b_pods: list[int] = []
    b_nodes: list[int] = []
    w_nodes: list[int] = []
    w_gpus: list[int] = []
    f_nodes: list[int] = []
    f_gpus: list[int] = []
    f_blocks: list[int] = []
    for info in running:
        pod = info.pod
        idx = pod.gpu_index
        n = len(idx)
        if info.blocks is not None or info.gpu_mem_bytes is not None:  # fractional
            if not (n == 1 and 0 <= idx[0] < width and info.blocks is not None):
                rest.append(info)
                continue
            node = index[pod.node_name or ""]
            f_nodes.append(node)
            f_gpus.append(idx[0])
            f_blocks.append(info.blocks)
            info.bound_blocks = info.blocks
        else:
            if n != info.whole or (n and not (min(idx) >= 0 and max(idx) < width
                                              and (n == 1 or len(set(idx)) == n))):
                rest.append(info)
                continue
            node = index[pod.node_name or ""]
            if n == 1:
                w_nodes.append(node)
                w_gpus.append(idx[0])
            elif n:
                w_nodes.extend([node] * n)
                w_gpus.extend(idx)
        info.node, info.gpus = node, idx
        b_pods.append(info.idx)
        b_nodes.append(node)
    if b_pods:
        bulk = np.array(b_pods, dtype=np.int64)
        placer.commit_many(
            bulk, np.array(b_nodes, dtype=np.int64), requests[bulk],
            (np.array(w_nodes, dtype=np.int64), np.array(w_gpus, dtype=np.int64)),
            (np.array(f_nodes, dtype=np.int64), np.array(f_gpus, dtype=np.int64),
             np.array(f_blocks, dtype=np.int64)),
        )
    rest.sort(key=lambda p: (0 if p.pod.gpu_index else 1, p.start, p.key))
    for info in rest:
        node = c.index[info.pod.node_name or ""]
        blocks: int | None = None
        if info.fractional:
            blocks = info.blocks if info.blocks is not None else info.blocks_on(int(c.gpu_memory_mib[node]))
            blocks = blocks or 1
            gpus = tuple(g for g in info.pod.gpu_index[:1] if 0 <= g < width)
            if not gpus:
                g = c.fractional_gpu_on(node, blocks, False)
                gpus = (g,) if g is not None else ()
            if not gpus:
                blocks = None  # nowhere to put it: holds cpu/memory only
        else:
            gpus = tuple(g for g in info.pod.gpu_index if 0 <= g < width)
            if len(gpus) != info.whole:
                gpus = tuple(c.whole_gpus_for(node, info.whole, (), False))
        placer.commit(Assignment(info.idx, node, gpus, blocks))
    ours = [info for info in running if info.gang >= 0]
    for info in ours:
        gangs[info.gang].alive += 1
    managed = forest.managed
    if ours and managed:
        # Queue usage of everything running, summed per leaf with NumPy, then added once per leaf.
        rows = np.array([i.idx for i in ours], dtype=np.int64)
        leaves = np.array([i.queue for i in ours], dtype=np.int64)
        usage = np.zeros((len(ours), len(managed)), dtype=np.int64)
        for j, r in enumerate(managed):
            if r == GPU:
                usage[:, j] = [i.whole * MILLI
                               + ((i.bound_blocks or i.blocks or 0) * MILLI_PER_BLOCK if i.fractional else 0)
                               for i in ours]
            elif r in c.res_index and r != PODS:
                usage[:, j] = requests[rows, c.res_index[r]]
        order = np.argsort(leaves, kind="stable")
        by_leaf, starts = np.unique(leaves[order], return_index=True)
        sums = np.add.reduceat(usage[order], starts, axis=0).tolist()
        for leaf, total in zip(by_leaf.tolist(), sums, strict=True):
            if leaf >= 0:
                forest.add(leaf, total)


def preset_node_warnings(pods: Sequence[PodInfo], cluster: ClusterState) -> list[str]:
    """Pods of ours still Pending on a node set in ``spec.nodeName`` by their author (no scheduler
    chose it), where the node cannot hold what is bound there: counted there all the same, as the
    kubelet runs them or rejects them; said, never hidden. One vector test when nothing is short."""
    short_res: BoolArray = cluster.free < 0
    short: BoolArray = np.logical_or(short_res.any(axis=1), (cluster.gpu_free < -1).any(axis=1))
    if not short.any():
        return []
    out: list[str] = []
    for info in pods:
        node = info.node
        pod = info.pod
        if node is None or not short[node] or pod.phase != "Pending" or info.queue < 0:
            continue
        what = [cluster.resources[j] for j in np.flatnonzero(short_res[node])]
        if (cluster.gpu_free[node] < -1).any():
            what.append("GPU blocks")
        out.append(f"pod {info.key} names node {pod.node_name} in spec.nodeName and is counted there, but the "
                    f"node is over-committed ({', '.join(what)}): the kubelet may reject it")
    return out
