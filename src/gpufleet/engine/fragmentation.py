"""How fragmented the free GPU capacity is for a target workload, kept up to date node by node.

The measure is the one of FGD (Weng et al., "Beware of Fragmentation", USENIX ATC'23). For a node
with free blocks per GPU and free CPU and memory, and a task shape m of the target workload M:

- m is CPU-only, or m cannot go to the node at all (node constraints, too little CPU or memory,
  fewer than ``m.gpus`` GPUs with ``m.blocks`` free each): every free block is a fragment for m;
- else the free blocks of the GPUs with fewer than ``m.blocks`` free are.

``F_n = Σ_m p_m · frag_n(m)``. The popularities are kept as integer counts, so the engine works
with ``W_n = Σ_m count_m · frag_n(m)``, an exact integer (``F_n = W_n / Σ count``): equal
fragmentation compares equal, with no float noise deciding a placement.

Everything is NumPy over (node, GPU, shape) arrays. Per node the model keeps T (free blocks),
S[m] (free blocks on GPUs too small for m) and cap[m] (GPUs big enough for m); the effect of
placing a pod follows from these in O(shapes) per candidate GPU, and only the nodes that changed
since a cache last looked (``ClusterState.dirty``) are recomputed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from gpufleet.domain import BLOCKS_PER_GPU, CPU, MEMORY, MILLI_PER_BLOCK, Pod
from gpufleet.engine.cluster import BoolArray, ClusterState, IntArray
from gpufleet.engine.feasibility import StaticFeasibility, StaticKey, static_key
from gpufleet.engine.fit import blocks_for_memory, share_cells

NO_CONSTRAINTS: StaticKey = ((), (), (), None)
DEFAULT_COVERAGE = 0.95
DEFAULT_MAX_SHAPES = 64
# Weight of stranded blocks against fragmented ones in the defrag cost, in percent. Measured on the
# openb default trace (seeds 42-43): 25, 100 and 400 % gave 95.88, 95.91 and 95.86 % allocation.
DEFAULT_STRAND_PERCENT = 100
# Weight of the demand on nodes that GPU-model-pinned tasks need, in percent. gpuspec25 (seed 42):
# 10, 25, 50, 100, 200 % gave 95.81, 95.82, 95.82, 95.63, 95.07 %; 0 when no task is pinned.
DEFAULT_PRESSURE_PERCENT = 50
INF = np.iinfo(np.int64).max


@dataclass(frozen=True, slots=True)
class TargetShape:
    """One kind of task of a target workload.

    ``gpus`` whole GPUs (``blocks == 100``), or one GPU share of ``blocks`` (1..99), or none
    (CPU-only: ``gpus == blocks == 0``). A share given as GPU memory has ``gpu_memory_bytes`` and
    its blocks depend on the node. ``constraints`` are the nodeSelector, required affinity and
    tolerations of the tasks (what decides which nodes they may use at all).
    """

    cpu: int
    gpus: int = 0
    blocks: int = 0
    gpu_memory_bytes: int | None = None
    constraints: StaticKey = NO_CONSTRAINTS
    memory: int = 0  # milli-bytes

    @property
    def gpu_milli(self) -> int:
        """GPU asked for in total, in milli-GPU (0 for a share given as memory)."""
        return self.gpus * self.blocks * MILLI_PER_BLOCK


def shape_of(pod: Pod) -> TargetShape:
    """The target shape a pod counts as."""
    cpu, memory = pod.requests.get(CPU, 0), pod.requests.get(MEMORY, 0)
    whole = pod.whole_gpus
    if pod.gpu_blocks is not None:
        return TargetShape(cpu, 1, pod.gpu_blocks, None, static_key(pod), memory)
    if pod.gpu_memory_bytes is not None:
        return TargetShape(cpu, 1, 0, pod.gpu_memory_bytes, static_key(pod), memory)
    if whole:
        return TargetShape(cpu, whole, BLOCKS_PER_GPU, None, static_key(pod), memory)
    return TargetShape(cpu, 0, 0, None, static_key(pod), memory)


@dataclass(frozen=True, slots=True)
class TargetWorkload:
    """Task shapes and their popularity (integer counts)."""

    shapes: tuple[TargetShape, ...]
    weights: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.shapes) != len(self.weights):
            raise ValueError("one weight per shape")
        if any(w <= 0 for w in self.weights):
            raise ValueError("weights must be positive")

    @property
    def total(self) -> int:
        return sum(self.weights)

    @staticmethod
    def popular(counts: Mapping[TargetShape, int], coverage: float = DEFAULT_COVERAGE,
                max_shapes: int | None = None) -> TargetWorkload:
        """The most frequent shapes, in decreasing count, until they cover ``coverage`` of all.

        Ties go to the larger shape (more CPU, then more GPU per task), as in the FGD artifact.
        """
        ordered = sorted(
            ((s, c) for s, c in counts.items() if c > 0),
            key=lambda sc: (-sc[1], -sc[0].cpu, -(sc[0].blocks or 0), -sc[0].gpus, -sc[0].memory,
                            repr(sc[0].constraints)),
        )
        total = sum(c for _, c in ordered)
        wanted = coverage * total
        shapes: list[TargetShape] = []
        weights: list[int] = []
        covered = 0
        for shape, count in ordered:
            if covered >= wanted and shapes:
                break
            if max_shapes is not None and len(shapes) >= max_shapes:
                break
            shapes.append(shape)
            weights.append(count)
            covered += count
        return TargetWorkload(tuple(shapes), tuple(weights))

    @staticmethod
    def of_pods(pods: Iterable[Pod], coverage: float = DEFAULT_COVERAGE,
                max_shapes: int | None = DEFAULT_MAX_SHAPES) -> TargetWorkload:
        counts: dict[TargetShape, int] = {}
        for pod in pods:
            shape = shape_of(pod)
            counts[shape] = counts.get(shape, 0) + 1
        return TargetWorkload.popular(counts, coverage, max_shapes)


def constraint_pod(key: StaticKey) -> Pod:
    """A pod carrying only the node constraints of ``key`` (to ask StaticFeasibility for a mask)."""
    selector, affinity, tolerations, device_nodes = key
    return Pod(namespace="", name="", node_selector=dict(selector), affinity=affinity, tolerations=tolerations,
               device_nodes=device_nodes)


class NodeStates(NamedTuple):
    """Node states the measure needs, for rows (and possibly candidate GPUs): T, S[m], cap[m], free CPU
    and memory."""

    T: IntArray
    S: IntArray
    cap: IntArray
    cpu: IntArray
    mem: IntArray


class ChangedNodes:
    """Which nodes changed since a cache last read ``ClusterState.dirty``."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster

    def since(self, seen: int) -> tuple[IntArray | None, int]:
        """Rows changed since position ``seen`` (None when all must be recomputed) and the new position."""
        dirty = self.cluster.dirty
        end = len(dirty)
        if end == seen:
            return np.empty(0, dtype=np.int64), end
        rows = np.unique(np.asarray(dirty[seen:end], dtype=np.int64))
        # past a quarter of the nodes one pass over all of them is as cheap and simpler
        return (None if len(rows) > len(self.cluster.nodes) // 4 else rows), end


class FragmentationModel:
    """Per-node fragmentation of a cluster against a target workload, refreshed incrementally."""

    def __init__(self, cluster: ClusterState, feasibility: StaticFeasibility, target: TargetWorkload) -> None:
        self.cluster = cluster
        self.target = target
        self.changed = ChangedNodes(cluster)
        n_nodes, n_shapes = len(cluster.nodes), len(target.shapes)
        self.cpu_j = cluster.res_index[CPU]
        self.mem_j = cluster.res_index[MEMORY]
        self.weight: IntArray = np.array(target.weights, dtype=np.int64).reshape(n_shapes)
        self.total = int(self.weight.sum())
        self.shape_cpu: IntArray = np.array([s.cpu for s in target.shapes], dtype=np.int64).reshape(n_shapes)
        self.shape_mem: IntArray = np.array([s.memory for s in target.shapes], dtype=np.int64).reshape(n_shapes)
        self.shape_gpus: IntArray = np.array([s.gpus for s in target.shapes], dtype=np.int64).reshape(n_shapes)
        self.need: IntArray = np.zeros((n_nodes, n_shapes), dtype=np.int64)
        # Nodes each GPU shape may use at all (node constraints; a share given as memory also needs a
        # GPU big enough). CPU-only shapes: none (every free block is a fragment for them).
        self.access: BoolArray = np.zeros((n_nodes, n_shapes), dtype=np.bool_)
        masks: dict[StaticKey, BoolArray] = {}
        for m, shape in enumerate(target.shapes):
            if shape.gpus == 0:
                continue  # CPU-only: every free block is a fragment for it
            access = masks.get(shape.constraints)
            if access is None:
                access = feasibility.mask(constraint_pod(shape.constraints))
                masks[shape.constraints] = access
            if shape.gpu_memory_bytes is not None:
                self.need[:, m] = blocks_for_memory(shape.gpu_memory_bytes, cluster.gpu_memory_mib)
            else:
                self.need[:, m] = shape.blocks
            self.access[:, m] = access & (self.need[:, m] > 0)
        all_rows = np.arange(n_nodes, dtype=np.int64)
        self.T, self.S, self.cap = self.aggregates(all_rows)
        self.W: IntArray = self.weighted(all_rows, self.T, self.S, self.cap, self.cpu_free(all_rows),
                                         self.mem_free(all_rows))
        self._seen = len(cluster.dirty)

    # -- node state ---------------------------------------------------------------------------

    def free_blocks(self, rows: IntArray) -> IntArray:
        """Free blocks per GPU of ``rows`` (GPUs that do not exist, are unhealthy or given out whole: 0)."""
        free: IntArray = np.maximum(self.cluster.gpu_free[rows], 0)
        return free

    def cpu_free(self, rows: IntArray) -> IntArray:
        cpu: IntArray = self.cluster.free[rows, self.cpu_j]
        return cpu

    def mem_free(self, rows: IntArray) -> IntArray:
        mem: IntArray = self.cluster.free[rows, self.mem_j]
        return mem

    def aggregates(self, rows: IntArray) -> tuple[IntArray, IntArray, IntArray]:
        """T (free blocks), S[m] (free blocks on GPUs smaller than m needs), cap[m] (GPUs that fit m)."""
        f = self.free_blocks(rows)[:, :, None]
        fits = f >= self.need[rows][:, None, :]
        return f[:, :, 0].sum(axis=1), np.where(fits, 0, f).sum(axis=1), fits.sum(axis=1)

    def weighted(self, rows: IntArray, T: IntArray, S: IntArray, cap: IntArray, cpu: IntArray,
                 mem: IntArray) -> IntArray:
        """W = Σ_m count_m · frag(m) for node states given by T, S, cap and free CPU and memory.

        ``T``, ``cpu`` and ``mem`` have the shape of the result, ``S`` and ``cap`` one more (last)
        axis of shapes; the leading axis is ``rows``.
        """
        extra = (1,) * (T.ndim - 1)
        access = self.access[rows].reshape((len(rows), *extra, self.access.shape[1]))
        ok = access & (cpu[..., None] >= self.shape_cpu) & (mem[..., None] >= self.shape_mem) & (
            cap >= self.shape_gpus)
        frag = np.where(ok, S, T[..., None])
        result: IntArray = frag @ self.weight
        return result

    def refresh(self) -> None:
        """Recompute the nodes that changed since the last call."""
        rows, self._seen = self.changed.since(self._seen)
        if rows is None:
            rows = np.arange(len(self.cluster.nodes), dtype=np.int64)
        if len(rows):
            T, S, cap = self.aggregates(rows)
            self.T[rows], self.S[rows], self.cap[rows] = T, S, cap
            self.W[rows] = self.weighted(rows, T, S, cap, self.cpu_free(rows), self.mem_free(rows))

    # -- measures -----------------------------------------------------------------------------

    def fragmented_milli(self) -> float:
        """F_cluster in milli-GPU: the expected free GPU the target workload cannot use."""
        self.refresh()
        return float(self.W.sum()) * MILLI_PER_BLOCK / self.total if self.total else 0.0

    def free_milli(self) -> int:
        self.refresh()
        return int(self.T.sum()) * MILLI_PER_BLOCK

    # -- effect of one placement ----------------------------------------------------------------

    def after_whole(self, rows: IntArray, cpu: int, mem: int, gpus: int) -> NodeStates:
        """States of ``rows`` after a pod of ``cpu``, ``mem`` and ``gpus`` whole GPUs (or none) goes there.

        The GPUs taken were fully free: they fitted every shape before and none after, and never
        counted in S.
        """
        return NodeStates(self.T[rows] - gpus * BLOCKS_PER_GPU, self.S[rows], self.cap[rows] - gpus,
                          self.cpu_free(rows) - cpu, self.mem_free(rows) - mem)

    def after_fractional(self, rows: IntArray, cpu: int, mem: int,
                         blocks: IntArray) -> tuple[NodeStates, BoolArray]:
        """States after a share of ``blocks`` (per row) goes to each GPU of ``rows`` (axes: row, GPU),
        and where that share fits at all."""
        f = self.free_blocks(rows)
        b = blocks[:, None]
        valid = (f >= b) & (b > 0) & ~self.cluster.gpu_whole[rows]
        after = f - b
        need = self.need[rows][:, None, :]
        f3, a3 = f[:, :, None], after[:, :, None]
        S = self.S[rows][:, None, :] - np.where(f3 < need, f3, 0) + np.where(a3 < need, a3, 0)
        cap = self.cap[rows][:, None, :] - (f3 >= need) + (a3 >= need)
        T = np.broadcast_to((self.T[rows] - blocks)[:, None], f.shape)
        cpu_after = np.broadcast_to((self.cpu_free(rows) - cpu)[:, None], f.shape)
        mem_after = np.broadcast_to((self.mem_free(rows) - mem)[:, None], f.shape)
        return NodeStates(T, S, cap, cpu_after, mem_after), valid

    def delta_whole(self, rows: IntArray, cpu: int, mem: int, gpus: int) -> IntArray:
        """Change of W on each of ``rows`` when a pod of ``cpu``, ``mem`` and ``gpus`` whole GPUs goes there."""
        return self.weighted(rows, *self.after_whole(rows, cpu, mem, gpus)) - self.W[rows]

    def delta_fractional(self, rows: IntArray, cpu: int, mem: int, blocks: IntArray) -> IntArray:
        """Change of W for a share of ``blocks`` (per row) on each GPU of ``rows``; INF where it does not fit."""
        states, valid = self.after_fractional(rows, cpu, mem, blocks)
        delta: IntArray = np.where(valid, self.weighted(rows, *states) - self.W[rows][:, None], INF)
        return delta


def lexmin(candidates: IntArray, keys: Sequence[npt.NDArray[np.generic]]) -> int:
    """The candidate with the smallest keys, compared in order (ties: the first candidate)."""
    for key in keys:
        if len(candidates) == 1:
            break
        values = key[candidates]
        candidates = candidates[values == values.min()]
    return int(candidates[0])


class DefragScorer:
    """The ``defrag`` placement (docs/placement-defrag.md).

    A pod goes where ``ΔW + strand · total · Δstranded (+ pressure · total · blocks · P)`` is
    least: ``W`` is the FGD fragmentation of the target workload (integer weights), ``stranded``
    the free blocks a node's free CPU or memory cannot feed at the CPU and memory per block of the
    target's GPU tasks that may use it, and ``P`` the demand of GPU-model-pinned tasks on the node
    (only when some are pinned). Ties: fewer free blocks left on the node, fewer on the GPU (a
    share), less free CPU, then node name and GPU index.

    Per pod shape, the cost of every node (every GPU for a share) is cached and only the nodes that
    changed since are recomputed: one placement costs O(changed nodes · GPUs · shapes) plus a few
    passes over the nodes.
    """

    def __init__(self, cluster: ClusterState, feasibility: StaticFeasibility, target: TargetWorkload,
                 strand_percent: int = DEFAULT_STRAND_PERCENT,
                 pressure_percent: int = DEFAULT_PRESSURE_PERCENT, max_cached: int = 256) -> None:
        self.cluster = cluster
        self.model = FragmentationModel(cluster, feasibility, target)
        self.changed = ChangedNodes(cluster)
        self.max_cached = max_cached
        self._cache: dict[tuple[int, int, int, int, int], tuple[IntArray, int]] = {}
        # CPU and memory per GPU block of the GPU tasks of the target that may use each node.
        m = self.model
        use = m.access * m.weight.astype(np.float64)  # (node, shape): tasks that may use the node
        blocks = (use * m.need * m.shape_gpus).sum(axis=1)
        safe = np.where(blocks > 0, blocks, 1.0)
        self.cpu_per_block = np.where(blocks > 0, (use * m.shape_cpu).sum(axis=1) / safe, 0.0)
        self.mem_per_block = np.where(blocks > 0, (use * m.shape_mem).sum(axis=1) / safe, 0.0)
        self.strand_weight = strand_percent * self.model.total
        # Demand of each GPU shape (blocks) over the free blocks of the nodes it may use: a node that
        # tasks pinned to few nodes need is worth more than one anything can use.
        self.pressure_weight = pressure_percent * self.model.total
        self.demand = (m.weight * m.shape_gpus * m.need.max(axis=0, initial=0)).astype(np.float64)
        self.constrained = bool(((m.access != m.access[:1]) & (m.shape_gpus > 0)).any())
        self.supply = np.zeros(len(target.shapes))
        self._stranded_seen = -1
        self.stranded_now = np.zeros(len(cluster.nodes), dtype=np.int64)

    # -- cost -------------------------------------------------------------------------------------

    def stranded(self, rows: IntArray, T: IntArray, cpu: IntArray, mem: IntArray) -> IntArray:
        """Free blocks of ``rows`` that their free CPU (memory) cannot feed, at the CPU (memory) per
        block of the target's GPU tasks that may use the node."""
        out = np.zeros(T.shape, dtype=np.int64)
        extra = (1,) * (T.ndim - 1)
        for per_block, free in ((self.cpu_per_block, cpu), (self.mem_per_block, mem)):
            rate = per_block[rows].reshape((len(rows), *extra))
            # blocks the free amount feeds, in float64 (memory in milli-bytes overflows int64
            # products); a rate of 0 (no GPU task of the target may use the node) strands nothing
            fed = np.floor(np.maximum(free, 0) / np.where(rate > 0, rate, 1.0))
            short = np.where(rate > 0, T - np.minimum(fed, T), 0)
            out = np.maximum(out, short.astype(np.int64))
        return out

    def _refresh_stranded(self) -> None:
        m = self.model
        m.refresh()
        if self._stranded_seen < 0:
            rows: IntArray | None = None
        else:
            rows, _ = self.changed.since(self._stranded_seen)
        self._stranded_seen = len(self.cluster.dirty)
        if rows is None:
            rows = np.arange(len(self.cluster.nodes), dtype=np.int64)
        if len(rows):
            self.stranded_now[rows] = self.stranded(rows, m.T[rows], m.cpu_free(rows), m.mem_free(rows))
            if self.constrained:
                self.supply = (m.access * m.T[:, None]).sum(axis=0).astype(np.float64)

    def pressure(self) -> npt.NDArray[np.float64]:
        """Per node: Σ over the GPU shapes that may use it of demand / free supply (0 when unconstrained)."""
        m = self.model
        if not self.constrained or not self.pressure_weight:
            return np.zeros(len(self.cluster.nodes))
        ratio = np.where(self.supply > 0, self.demand / np.where(self.supply > 0, self.supply, 1.0), 0.0)
        out: npt.NDArray[np.float64] = m.access.astype(np.float64) @ ratio
        return out

    def cost(self, rows: IntArray, states: NodeStates) -> IntArray:
        """Cost change of the node states ``states`` of ``rows`` (after a placement) over now."""
        m = self.model
        extra = (1,) * (states.T.ndim - 1)
        w_now = m.W[rows].reshape((len(rows), *extra))
        delta: IntArray = m.weighted(rows, *states) - w_now
        if self.strand_weight:
            s_now = self.stranded_now[rows].reshape((len(rows), *extra))
            after = self.stranded(rows, states.T, states.cpu, states.mem)
            delta = delta + (self.strand_weight * (after - s_now)) // 100
        return delta

    def _costs(self, key: tuple[int, int, int, int, int], width: int,
               compute: Callable[[IntArray], IntArray]) -> IntArray:
        """Cost per node (or node x GPU) for one pod shape, refreshed where nodes changed."""
        n = len(self.cluster.nodes)
        got = self._cache.pop(key, None)
        rows: IntArray | None
        if got is None:
            values = np.zeros((n, width) if width else n, dtype=np.int64)
            rows = None
        else:
            values, seen = got
            rows, _ = self.changed.since(seen)
        if rows is None:
            rows = np.arange(n, dtype=np.int64)
        if len(rows):
            values[rows] = compute(rows)
        if len(self._cache) >= self.max_cached:
            self._cache.pop(next(iter(self._cache)))  # the least recently used shape
        self._cache[key] = (values, len(self.cluster.dirty))
        return values

    # -- choices ----------------------------------------------------------------------------------

    def choose_whole(self, cpu: int, mem: int, whole: int, fit: BoolArray, rank: IntArray | None) -> int | None:
        """Node for a pod of ``whole`` GPUs (0: none), ``cpu`` and ``mem``, among ``fit``."""
        candidates = np.flatnonzero(fit)
        if not len(candidates):
            return None
        self._refresh_stranded()
        m = self.model
        def compute(rows: IntArray) -> IntArray:
            # Only nodes with enough free whole GPUs now (see choose_share)
            cost = np.full(len(rows), INF, dtype=np.int64)
            can = self.cluster.free_whole[rows] >= whole
            some = rows[can]
            if len(some):
                cost[can] = self.cost(some, m.after_whole(some, cpu, mem, whole))
            return cost

        cost = self._costs((cpu, mem, whole, 0, 0), 0, compute)
        keys: list[npt.NDArray[np.generic]] = [cost]
        if whole and self.constrained and self.pressure_weight:
            keys = [cost + self.pressure() * (self.pressure_weight * whole * BLOCKS_PER_GPU / 100)]
        keys += [m.T - whole * BLOCKS_PER_GPU, m.cpu_free(np.arange(len(fit), dtype=np.int64))]
        if rank is not None:
            keys.insert(0, rank)
        return lexmin(candidates, keys)

    def choose_share(self, cpu: int, mem: int, blocks: int | None, memory: int | None, need: IntArray,
                     fit: BoolArray, rank: IntArray | None) -> tuple[int, int] | None:
        """(node, GPU) for a share of ``need`` blocks (per node), ``cpu`` and ``mem``, among ``fit``.

        ``blocks``/``memory`` (the pod's annotation) only name the shape for the cache.
        """
        c = self.cluster
        ok = share_cells(c, need) & fit[:, None]
        flat = np.flatnonzero(ok)
        if not len(flat):
            return None
        self._refresh_stranded()
        m = self.model
        width = c.gpu_free.shape[1]

        def compute(rows: IntArray) -> IntArray:
            # Only nodes with a GPU that can take the share now: the others stay INF until they
            # change (a change marks them dirty), which skips most of a full cluster.
            cost = np.full((len(rows), width), INF, dtype=np.int64)
            can = ((c.gpu_free[rows] >= need[rows][:, None]) & ~c.gpu_whole[rows]).any(axis=1) & (need[rows] > 0)
            some = rows[can]
            if len(some):
                states, valid = m.after_fractional(some, cpu, mem, need[some])
                cost[can] = np.where(valid, self.cost(some, states), INF)
            return cost

        cost = self._costs((cpu, mem, -1, blocks or 0, memory or 0), width, compute)
        first: npt.NDArray[np.generic] = cost
        if self.constrained and self.pressure_weight:
            first = cost + (self.pressure() * need * (self.pressure_weight / 100))[:, None]
        nodes = np.arange(len(fit), dtype=np.int64)
        keys: list[npt.NDArray[np.generic]] = [first.ravel(), np.broadcast_to((m.T - need)[:, None], ok.shape).ravel(),
                (c.gpu_free - need[:, None]).ravel(),
                np.broadcast_to(m.cpu_free(nodes)[:, None], ok.shape).ravel()]
        if rank is not None:
            keys.insert(0, np.broadcast_to(rank[:, None], ok.shape).ravel())
        node, gpu = divmod(lexmin(flat, keys), width)
        return node, gpu
