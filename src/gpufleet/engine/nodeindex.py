"""Nodes bucketed by free whole GPUs per feasibility class: the common placement without a pass
over every node.

For a pod of whole GPUs with no rule beyond its static mask, requests and GPU count (no soft
rank, no domain, no inter-pod rule, host port or claim), the placement's score is the node's free
whole GPUs (binpack: fewest first; spread: most first) and ties fall to the lowest node index.
So the chosen node is the lowest index of the first non-empty bucket, in score order, holding a
node whose free resources cover the requests. :class:`FreeGpuIndex` keeps, per feasibility
class (the static mask), one min-heap of node indexes per free-GPU count, updated lazily from
``ClusterState.dirty``: a changed node is pushed into the heap of its new count, and entries
whose count has changed since are dropped when they reach the top.

The answer is exactly the vectorised argmin's (a property test compares them); where the index
cannot give it cheaply (many nodes of a bucket short of CPU or memory) it says so and the
placement takes the vectorised path.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush

import numpy as np

from gpufleet.engine.cluster import BoolArray, ClusterState, IntArray

__all__ = ["FALLBACK", "DomainSums", "FreeGpuIndex"]

FALLBACK = -2  # the index cannot answer cheaply: take the vectorised path
MAX_CLASSES = 32  # feasibility classes indexed; pods of further classes take the vectorised path
MAX_WIDTH = 64  # GPUs per node beyond which the buckets are not worth walking
SCAN_LIMIT = 16  # nodes of a bucket tried (short of CPU, memory...) before falling back


def _covers(row: list[int], need: list[tuple[int, int]]) -> bool:
    """Whether a node's free amounts ``row`` cover every (column, amount) of ``need``."""
    for j, r in need:  # noqa: SIM110 (a loop: no generator per node tried)
        if row[j] < r:
            return False
    return True


class _Class:
    """The nodes of one static mask, as heaps of node indexes per free whole GPU count."""

    __slots__ = ("heaps", "member", "size")

    def __init__(self, mask: BoolArray, free_whole: IntArray, width: int) -> None:
        self.member: list[bool] = mask.tolist()
        self.size = int(mask.sum())
        self.heaps: list[list[int]] = []
        self.rebuild(mask, free_whole, width)

    def rebuild(self, mask: BoolArray | None, free_whole: IntArray, width: int) -> None:
        nodes = np.flatnonzero(self.member if mask is None else mask)
        counts = free_whole[nodes]
        order = np.argsort(counts, kind="stable")  # ascending node index within each count
        bounds = np.searchsorted(counts[order], np.arange(width + 2))
        sorted_nodes = nodes[order].tolist()
        self.heaps = [sorted_nodes[bounds[v]:bounds[v + 1]] for v in range(width + 1)]


class FreeGpuIndex:
    """Per feasibility class, the nodes bucketed by free whole GPUs (see the module's doc)."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        self.width = int(cluster.gpu_free.shape[1])
        self.usable = self.width <= MAX_WIDTH
        self._classes: dict[bytes, _Class | None] = {}  # by the static mask's content
        self._by_key: dict[object, _Class | None] = {}  # by the static key
        self._fw: list[int] = cluster.free_whole.tolist()
        self._seen = len(cluster.dirty)

    def _sync(self) -> None:
        dirty = self.cluster.dirty
        if self._seen == len(dirty):
            return
        if len(dirty) - self._seen > len(self._fw):  # bulk changes: rebuild rather than push
            self._seen = len(dirty)
            self._fw = self.cluster.free_whole.tolist()
            for cls in self._classes.values():
                if cls is not None:
                    cls.rebuild(None, self.cluster.free_whole, self.width)
            return
        fw = self._fw
        if len(dirty) - self._seen == 1:  # the common case: one pod committed since the last pick
            self._seen += 1
            n = dirty[-1]
            v = self.cluster.free_whole.item(n)
            if fw[n] == v:
                return
            fw[n] = v
            moved = [(n, v)]
        else:
            nodes = list(dict.fromkeys(dirty[self._seen:]))
            self._seen = len(dirty)
            moved = [(n, v) for n, v in zip(nodes, self.cluster.free_whole[nodes].tolist(), strict=True)
                     if fw[n] != v]
            if not moved:
                return
            for n, v in moved:
                fw[n] = v
        for cls in self._classes.values():
            if cls is None:
                continue
            member, heaps = cls.member, cls.heaps
            for n, v in moved:
                if member[n]:
                    heap = heaps[v]
                    heappush(heap, n)
                    if len(heap) > 2 * cls.size + 64:  # too many stale entries: start afresh
                        cls.rebuild(None, self.cluster.free_whole, self.width)
                        break

    def _class(self, key: object, mask: Callable[[], BoolArray]) -> _Class | None:
        if key in self._by_key:
            return self._by_key[key]
        static = mask()
        # Keys alike in effect (Projects sharing node pools, say) share one class: by the mask's content.
        content = static.tobytes()
        got = self._classes.get(content)
        if got is None and content not in self._classes:
            got = _Class(static, self.cluster.free_whole, self.width) if len(self._classes) < MAX_CLASSES else None
            self._classes[content] = got
        self._by_key[key] = got
        return got

    def choose(self, key: object, mask: Callable[[], BoolArray], whole: int, res: IntArray, spread: bool) -> int:
        """The node the vectorised placement would choose for a pod of ``whole`` (>= 1) GPUs and
        requests ``res`` whose only node rule is its static mask (``mask()``, asked for the first
        time ``key`` is seen): a node index, -1 when no node fits, or ``FALLBACK``."""
        if not self.usable or whole > self.width:
            return FALLBACK
        self._sync()
        cls = self._class(key, mask)
        if cls is None:
            return FALLBACK
        free = self.cluster.free
        need = [(j, r) for j, r in enumerate(res.tolist()) if r]
        fw = self._fw
        counts = range(self.width, whole - 1, -1) if spread else range(whole, self.width + 1)
        for v in counts:
            heap = cls.heaps[v]
            while heap and fw[heap[0]] != v:
                heappop(heap)
            if not heap:
                continue
            n = heap[0]
            if _covers(free[n].tolist(), need):
                return n
            got = self._scan(heap, v, free, need)
            if got != -1:
                return got
        return -1

    def _scan(self, heap: list[int], v: int, free: IntArray, need: list[tuple[int, int]]) -> int:
        """The lowest node of ``heap`` (count ``v``) whose free resources cover ``need``; -1 when
        none; ``FALLBACK`` after ``SCAN_LIMIT`` short nodes. The heap is left as it was but for
        stale entries."""
        fw = self._fw
        taken: list[int] = []
        seen: set[int] = set()
        found = -1
        while heap:
            n = heappop(heap)
            if fw[n] != v or n in seen:
                continue
            taken.append(n)
            seen.add(n)
            if _covers(free[n].tolist(), need):
                found = n
                break
            if len(taken) > SCAN_LIMIT:
                found = FALLBACK
                break
        for n in taken:
            heappush(heap, n)
        return found


class DomainSums:
    """The sum over each topology domain of a per-node value (free GPUs, copies of a pod) that
    depends only on the node's own state, kept up to date from ``ClusterState.dirty``: a gang's
    domain pre-filter reads it without a pass over every node. ``value(nodes)`` gives the value
    of the nodes ``nodes`` now (0 where a node does not count). It is handed in on each call, not
    kept: a kept closure over the Placer that keeps this object would be a reference cycle, which
    ``schedule()`` (the cyclic collector paused) would leave behind."""

    def __init__(self, cluster: ClusterState, codes: IntArray, n_domains: int,
                 value: Callable[[IntArray], IntArray]) -> None:
        self.cluster = cluster
        self.codes = codes
        self.n_domains = n_domains
        self._seen = 0
        self.values: IntArray = np.zeros(len(codes), dtype=np.int64)
        self.sums: IntArray = np.zeros(n_domains, dtype=np.int64)
        self._rebuild(value)

    def _rebuild(self, value: Callable[[IntArray], IntArray]) -> None:
        self._seen = len(self.cluster.dirty)
        everything = np.arange(len(self.codes), dtype=np.int64)
        self.values = np.where(self.codes >= 0, value(everything), 0).astype(np.int64)
        ok = self.codes >= 0
        self.sums = np.bincount(self.codes[ok], weights=self.values[ok], minlength=self.n_domains).astype(np.int64)

    def get(self, value: Callable[[IntArray], IntArray]) -> IntArray:
        """The sums now (a fresh array); ``value`` as given when this was made."""
        dirty = self.cluster.dirty
        if len(dirty) - self._seen > len(self.codes) // 8:
            self._rebuild(value)
        elif len(dirty) > self._seen:
            nodes = np.unique(np.array(dirty[self._seen:], dtype=np.int64))
            self._seen = len(dirty)
            nodes = nodes[self.codes[nodes] >= 0]
            new = value(nodes).astype(np.int64)
            np.add.at(self.sums, self.codes[nodes], new - self.values[nodes])
            self.values[nodes] = new
        out: IntArray = self.sums.copy()
        return out
