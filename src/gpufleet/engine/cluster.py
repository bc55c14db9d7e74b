"""Node and GPU state as NumPy arrays, updated incrementally as pods bind and leave.

Nodes are indexed in name order, so "the first index among equals" is the spec's tie-break by
node name everywhere (``np.argmin`` returns the first minimum). Each GPU is a cell of
``gpu_free`` ([node, gpu] free blocks, -1 where the GPU does not exist or is unhealthy) and
``gpu_whole`` (given out whole). A change bumps ``dirty`` so that cached per-request score arrays
recompute only the nodes that changed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from gpufleet.domain import BLOCKS_PER_GPU, CPU, GPU, MEMORY, MILLI, PODS, Node

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

BASE_RESOURCES = (CPU, MEMORY, PODS)


class ClusterState:
    """Mutable capacity state of every node; the engine's working copy of the cluster."""

    def __init__(self, nodes: Sequence[Node], extra_resources: Sequence[str]) -> None:
        self.nodes: list[Node] = sorted(nodes, key=lambda n: n.name)
        self.index: dict[str, int] = {n.name: i for i, n in enumerate(self.nodes)}
        names = set(BASE_RESOURCES)
        self.resources: list[str] = list(BASE_RESOURCES) + sorted(
            {r for r in extra_resources if r != GPU and r not in names}
            | {r for n in self.nodes for r in n.allocatable if r != GPU and r not in names}
        )
        self.res_index: dict[str, int] = {r: i for i, r in enumerate(self.resources)}
        n_nodes, n_res = len(self.nodes), len(self.resources)
        self.alloc: IntArray = np.zeros((n_nodes, n_res), dtype=np.int64)
        allocs = [n.allocatable for n in self.nodes]
        for r, j in self.res_index.items():  # column by column: few resources, many nodes
            column = [a.get(r, 0) for a in allocs]
            if any(column):
                self.alloc[:, j] = column
        self.free: IntArray = self.alloc.copy()
        self.gpu_count: IntArray = np.array([a.get(GPU, 0) // MILLI for a in allocs], dtype=np.int64)
        width = max(1, int(self.gpu_count.max(initial=0)))
        exists = np.arange(width)[None, :] < self.gpu_count[:, None]
        self.gpu_free: IntArray = np.where(exists, BLOCKS_PER_GPU, -1).astype(np.int64)
        for i, node in enumerate(self.nodes):
            if node.unhealthy_gpus:
                for g in node.unhealthy_gpus:
                    if 0 <= g < width:
                        self.gpu_free[i, g] = -1
        self.healthy: BoolArray = self.gpu_free == BLOCKS_PER_GPU
        self.gpu_whole: BoolArray = np.zeros((n_nodes, width), dtype=np.bool_)
        self.free_whole: IntArray = (self.gpu_free == BLOCKS_PER_GPU).sum(axis=1).astype(np.int64)
        self.schedulable: BoolArray = np.array([not n.unschedulable for n in self.nodes], dtype=np.bool_)
        self.gpu_memory_mib: IntArray = np.array(
            [n.gpu_memory_mib or 0 for n in self.nodes], dtype=np.int64
        )
        # Every change appends the node index; caches remember how far they have read.
        self.dirty: list[int] = []

    # -- capacity of the forest -------------------------------------------------------------

    def capacity(self, resource: str) -> int:
        """Allocatable capacity of schedulable nodes, in milli-units."""
        if resource == GPU:
            return int(self.gpu_count[self.schedulable].sum()) * MILLI
        j = self.res_index.get(resource)
        # Python ints: memory in milli-bytes summed over thousands of nodes would overflow int64.
        return 0 if j is None else sum(self.alloc[self.schedulable, j].tolist())

    # -- changes ------------------------------------------------------------------------------

    def take(self, node: int, res: IntArray, gpus: Sequence[int], blocks: int | None) -> None:
        """Give a pod ``res`` (vector over ``resources``) and its GPUs on ``node``."""
        self.free[node] -= res
        healthy = self.healthy[node]
        if blocks is not None:
            g = gpus[0]
            if not healthy[g]:
                pass  # a running pod on a GPU marked unhealthy since: the GPU is out anyway
            elif self.gpu_free[node, g] == BLOCKS_PER_GPU:
                self.free_whole[node] -= 1
                self.gpu_free[node, g] -= blocks
            else:
                self.gpu_free[node, g] -= blocks
        elif len(gpus) == 1:  # the common case: one GPU, by item() and (node, gpu) indexes (no row views)
            g = gpus[0]
            if healthy.item(g):
                if self.gpu_free.item(node, g) == BLOCKS_PER_GPU:
                    self.free_whole[node] -= 1
                self.gpu_free[node, g] = 0
                self.gpu_whole[node, g] = True
        elif gpus:
            row, given = self.gpu_free[node], self.gpu_whole[node]  # row views: 1-D indexing is cheaper
            taken = 0
            for g in gpus:
                if healthy[g]:
                    if row[g] == BLOCKS_PER_GPU:
                        taken += 1
                    row[g] = 0
                    given[g] = True
            if taken:
                self.free_whole[node] -= taken
        self.dirty.append(node)

    def take_many(self, nodes: IntArray, res: IntArray, whole: tuple[IntArray, IntArray],
                  shares: tuple[IntArray, IntArray, IntArray]) -> None:
        """``take`` for many pods at once, with NumPy: the state a snapshot's running pods hold.

        ``nodes[i]`` is pod i's node and ``res[i]`` its requests (a row over ``resources``).
        ``whole`` lists the (node, gpu) cells given out whole; ``shares`` the (node, gpu, blocks)
        of the GPU shares. Cells of unhealthy GPUs are skipped, as ``take`` skips them. The result
        is that of ``take`` pod after pod with the whole GPUs before the shares (the order only
        matters where a snapshot overcommits a GPU). Tens of thousands of running pods bind here on
        every call, so nothing loops over pods in Python.
        """
        if not len(nodes):
            return
        order = np.argsort(nodes, kind="stable")
        touched, starts = np.unique(nodes[order], return_index=True)
        self.free[touched] -= np.add.reduceat(res[order], starts, axis=0)
        w_nodes, w_gpus = whole
        if len(w_nodes):
            keep = self.healthy[w_nodes, w_gpus]
            cells = (w_nodes[keep], w_gpus[keep])
            self.gpu_whole[cells] = True
            self.gpu_free[cells] = 0
        s_nodes, s_gpus, s_blocks = shares
        if len(s_nodes):
            keep = self.healthy[s_nodes, s_gpus]
            np.subtract.at(self.gpu_free, (s_nodes[keep], s_gpus[keep]), s_blocks[keep])
        self.free_whole[:] = (self.gpu_free == BLOCKS_PER_GPU).sum(axis=1)
        self.dirty.extend(touched.tolist())

    def retire(self, nodes: IntArray, gpus: IntArray) -> None:
        """Take the (node, GPU) cells ``nodes[i], gpus[i]`` out of service for the call, as unhealthy
        GPUs are: running pods hold them more than once (docs/semantics-notes.md). Pods that hold
        them keep them; releasing one gives nothing back, and nothing is placed on them."""
        if not len(nodes):
            return
        self.healthy[nodes, gpus] = False
        self.gpu_free[nodes, gpus] = -1
        touched = np.unique(nodes)
        self.free_whole[touched] = (self.gpu_free[touched] == BLOCKS_PER_GPU).sum(axis=1)
        self.dirty.extend(touched.tolist())

    def give_back(self, node: int, res: IntArray, gpus: Sequence[int], blocks: int | None) -> None:
        """Undo ``take`` for a pod that leaves ``node``."""
        self.free[node] += res
        healthy = self.healthy[node]
        if blocks is not None:
            g = gpus[0]
            if healthy[g]:
                self.gpu_free[node, g] += blocks
                if self.gpu_free[node, g] == BLOCKS_PER_GPU:
                    self.free_whole[node] += 1
        elif gpus:
            row, given = self.gpu_free[node], self.gpu_whole[node]
            back = 0
            for g in gpus:
                if healthy[g]:
                    given[g] = False
                    row[g] = BLOCKS_PER_GPU
                    back += 1
            if back:
                self.free_whole[node] += back
        self.dirty.append(node)

    def whole_gpus_for(self, node: int, count: int, nvlink: Sequence[Sequence[int]], spread: bool) -> list[int]:
        """Pick ``count`` free whole GPUs on ``node``: inside one NVLink domain when one can hold them.

        Lowest indices first; among NVLink domains that can hold the request, the one with the
        fewest free GPUs (binpack) or the most (spread), ties by lowest index.
        """
        if count <= 0:
            return []
        free = [g for g, blocks in enumerate(self.gpu_free[node].tolist()) if blocks == BLOCKS_PER_GPU]
        if nvlink:
            fitting: list[tuple[int, int, list[int]]] = []
            for domain in nvlink:
                members = set(domain)
                in_domain = [g for g in free if g in members]
                if len(in_domain) >= count:
                    size = -len(in_domain) if spread else len(in_domain)
                    fitting.append((size, min(domain), in_domain))
            if fitting:
                fitting.sort(key=lambda t: (t[0], t[1]))
                return fitting[0][2][:count]
        return free[:count]

    def fractional_gpu_on(self, node: int, blocks: int, spread: bool) -> int | None:
        """The GPU of ``node`` a fractional pod of ``blocks`` takes, or None.

        Binpack: the partly used GPU with the fewest free blocks that fit, else a fresh one
        (lowest index). Spread: the GPU with the most free blocks.
        """
        row = self.gpu_free[node]
        ok = (row >= blocks) & ~self.gpu_whole[node]
        if not ok.any():
            return None
        key = np.where(ok, -row if spread else row, np.iinfo(np.int64).max)
        return int(np.argmin(key))
