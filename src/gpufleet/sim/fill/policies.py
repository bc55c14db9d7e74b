"""Placement policies of the fill experiment: the FGD paper's six baselines and the engine's own.

The six baselines (Random, DotProd, GpuClustering, GpuPacking, BestFit, FGD) are simulator-side
re-implementations of the score plugins of the FGD artifact (hkust-adsl/kubernetes-scheduler-simulator),
on the engine's ClusterState arrays: the same integer scores (truncated as the artifact truncates
them), the same GPU choice inside a node, and ties broken by the node order (index order: the
fill experiment names nodes after a seeded random rank, as the artifact does). FGD evaluates the
fragmentation with the artifact's float arithmetic, bucket by bucket in its order, so that its
decisions equal the artifact's (see tests/sim/test_fill_repro.py).

``gpufleet``, ``binpack`` and ``spread`` are the engine's own placements, called through
:class:`gpufleet.engine.session.PlacementSession`: exactly the code ``schedule()`` runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.domain import (
    BLOCKS_PER_GPU,
    CPU,
    GPU,
    LABEL_GPU_PRODUCT,
    MILLI,
    MILLI_PER_BLOCK,
    FlavorChoice,
    Node,
    Placement,
    Pod,
    ResourceFlavor,
    SchedulerConfig,
)
from gpufleet.engine import (  # node_fit, share_cells: the engine's fit test
    BoolArray,
    ChangedNodes,
    ClusterState,
    FragmentationModel,
    IntArray,
    NodeStates,
    PlacementSession,
    StaticFeasibility,
    TargetWorkload,
    node_fit,
    share_cells,
)

FloatArray = npt.NDArray[np.float64]

MAX_SCORE = 100
MAX_SPEC_CPU = 128_000  # the artifact's normalisers: 128 vCPU and 8 GPUs
MAX_SPEC_GPU = 8_000
NO_SCORE = np.iinfo(np.int64).min


@dataclass(frozen=True, slots=True)
class Request:
    """What a task asks for, in the units of the ClusterState (built once per distinct task)."""

    pod: Pod
    res: IntArray  # over ClusterState.resources ("pods" included)
    whole: int  # whole GPUs
    blocks: int  # blocks of one GPU for a share, else 0
    cpu: int
    gpu_milli: int  # total GPU asked for, milli-GPU

    @property
    def fractional(self) -> bool:
        return self.blocks > 0

    @property
    def gpus(self) -> int:
        return self.whole or (1 if self.blocks else 0)

    @property
    def share(self) -> int | None:
        """Blocks of one GPU for the engine's fit test (None: not a share)."""
        return self.blocks or None


@dataclass(frozen=True, slots=True)
class Choice:
    node: int
    gpus: tuple[int, ...]
    blocks: int | None


def make_request(pod: Pod, cluster: ClusterState) -> Request:
    res = np.zeros(len(cluster.resources), dtype=np.int64)
    res[cluster.res_index["pods"]] = MILLI
    for r, v in pod.requests.items():
        j = cluster.res_index.get(r)
        if j is not None and r != GPU:
            res[j] = v
    whole = pod.whole_gpus
    blocks = pod.gpu_blocks or 0
    return Request(pod, res, whole, blocks, pod.requests.get(CPU, 0),
                   whole * MILLI + blocks * MILLI_PER_BLOCK)


class FillPolicy:
    """A policy places one task at a time on its own cluster state and commits it."""

    name = ""

    def __init__(self, nodes: Sequence[Node], extra: Sequence[str] = ()) -> None:
        self.cluster = ClusterState(nodes, extra)
        self.feasibility = StaticFeasibility(self.cluster.nodes, self.cluster.schedulable)

    def request(self, pod: Pod) -> Request:
        return make_request(pod, self.cluster)

    def place(self, req: Request) -> Choice | None:
        raise NotImplementedError


class ArrayPolicy(FillPolicy):
    """Baselines scoring nodes from the ClusterState arrays; ties go to the lowest node index."""

    gpu_choice = "best"  # how a share picks its GPU inside the chosen node: best | random

    def __init__(self, nodes: Sequence[Node], rng: np.random.Generator) -> None:
        super().__init__(nodes)
        self.rng = rng
        self.cpu_j = self.cluster.res_index[CPU]

    def fits(self, req: Request) -> BoolArray:
        """Nodes where the task fits now: node constraints (GPU model), resources and GPUs, by the
        engine's fit test."""
        return node_fit(self.cluster, self.feasibility.mask(req.pod), req.res, req.whole, req.share)

    def free_milli(self) -> IntArray:
        """Free GPU per node in milli-GPU."""
        free: IntArray = np.maximum(self.cluster.gpu_free, 0).sum(axis=1) * MILLI_PER_BLOCK
        return free

    def scores(self, req: Request, mask: BoolArray) -> IntArray:
        """Integer score per node (higher is better); only entries under ``mask`` are read."""
        raise NotImplementedError

    def share_gpu(self, req: Request, node: int) -> int:
        """The GPU a share takes on ``node``: the best-fitting one (fewest free that fit, lowest index)."""
        row = self.cluster.gpu_free[node]
        ok = (row >= req.blocks) & ~self.cluster.gpu_whole[node]
        if self.gpu_choice == "random":
            return int(self.rng.choice(np.flatnonzero(ok)))
        return int(np.argmin(np.where(ok, row, np.iinfo(np.int64).max)))

    def exclusive_gpus(self, node: int, count: int) -> tuple[int, ...]:
        """The lowest-index fully free GPUs (the artifact's AllocateExclusiveGpuId)."""
        return tuple(int(g) for g in np.flatnonzero(self.cluster.gpu_free[node] == BLOCKS_PER_GPU)[:count])

    def choose(self, req: Request, mask: BoolArray) -> Choice:
        score = self.scores(req, mask)
        node = int(np.argmax(np.where(mask, score, NO_SCORE)))
        return self.choice_on(req, node)

    def choice_on(self, req: Request, node: int) -> Choice:
        if req.blocks:
            return Choice(node, (self.share_gpu(req, node),), req.blocks)
        return Choice(node, self.exclusive_gpus(node, req.whole), None)

    def place(self, req: Request) -> Choice | None:
        mask = self.fits(req)
        if not mask.any():
            return None
        choice = self.choose(req, mask)
        self.commit(req, choice)
        return choice

    def commit(self, req: Request, choice: Choice) -> None:
        self.cluster.take(choice.node, req.res, choice.gpus, choice.blocks)


class RandomPolicy(ArrayPolicy):
    """Random: a uniformly random feasible node, a random fitting GPU for a share."""

    name = "random"
    gpu_choice = "random"

    def choose(self, req: Request, mask: BoolArray) -> Choice:
        node = int(self.rng.choice(np.flatnonzero(mask)))
        return self.choice_on(req, node)


class DotProductPolicy(ArrayPolicy):
    """DotProd (Tetris): the smallest dot product of the node's free (CPU, GPU) and the request,
    both normalised by 128 vCPU and 8 GPUs; score ``int(100 · (1 − dot / 2))``."""

    name = "dotprod"

    def scores(self, req: Request, mask: BoolArray) -> IntArray:
        cpu_left = self.cluster.free[:, self.cpu_j].astype(np.float64)
        gpu_left = self.free_milli().astype(np.float64)
        dot = (cpu_left / MAX_SPEC_CPU) * (req.cpu / MAX_SPEC_CPU) + (gpu_left / MAX_SPEC_GPU) * (
            req.gpu_milli / MAX_SPEC_GPU)
        score: IntArray = np.trunc(MAX_SCORE * (1 - dot / 2)).astype(np.int64)
        return score


class BestFitPolicy(ArrayPolicy):
    """BestFit: the least weighted leftover 0.5·CPU/128 + 0.5·GPU/8 after placing the task.

    The artifact scales the score to an integer in 0..100 and then normalises over the feasible
    nodes (integer division); the normalisation keeps the nodes of the top raw score on top and
    no others, so the choice is the top raw integer score, ties by node order.
    """

    name = "bestfit"

    def scores(self, req: Request, mask: BoolArray) -> IntArray:
        cpu_left = self.cluster.free[:, self.cpu_j].astype(np.float64)
        gpu_left = self.free_milli().astype(np.float64)
        leftover = (cpu_left - req.cpu) / MAX_SPEC_CPU * 0.5
        leftover = leftover + (gpu_left - req.gpu_milli) / MAX_SPEC_GPU * 0.5
        score: IntArray = np.trunc((1.0 - leftover) * MAX_SCORE).astype(np.int64)
        return score


# Kinds of task for GpuClustering: a share, or k whole GPUs (CPU-only tasks have none).
SHARE_KIND = 0


def task_kind(req: Request) -> int:
    return SHARE_KIND if req.blocks else req.whole


class GpuClusteringPolicy(ArrayPolicy):
    """GpuClustering: nodes that hold only tasks of the same kind, then mixed nodes holding that
    kind, then idle nodes, then nodes holding other kinds; within a tier less free GPU."""

    name = "clustering"

    def __init__(self, nodes: Sequence[Node], rng: np.random.Generator) -> None:
        super().__init__(nodes, rng)
        width = int(self.cluster.gpu_count.max(initial=0)) + 1
        self.kinds: IntArray = np.zeros((len(self.cluster.nodes), max(width, 2)), dtype=np.int64)

    def scores(self, req: Request, mask: BoolArray) -> IntArray:
        n = len(self.cluster.nodes)
        if not req.gpus:
            return np.zeros(n, dtype=np.int64)
        quarter = MAX_SCORE // 4
        base = quarter * (MAX_SPEC_GPU - self.free_milli()) // MAX_SPEC_GPU
        kind = task_kind(req)
        held = self.kinds[:, kind] > 0 if kind < self.kinds.shape[1] else np.zeros(n, dtype=np.bool_)
        distinct = (self.kinds > 0).sum(axis=1)
        tier = np.where(held, np.where(distinct == 1, 3, 2), np.where(distinct == 0, 1, 0))
        score: IntArray = base + tier * quarter
        return score

    def commit(self, req: Request, choice: Choice) -> None:
        super().commit(req, choice)
        if req.gpus:
            kind = task_kind(req)
            if kind >= self.kinds.shape[1]:
                self.kinds = np.pad(self.kinds, ((0, 0), (0, kind + 1 - self.kinds.shape[1])))
            self.kinds[choice.node, kind] += 1


class GpuPackingPolicy(ArrayPolicy):
    """GpuPacking: shares on partly used GPUs first, then nodes where the task needs some fully
    free GPUs (the fewer the better), then idle nodes (the fewer GPUs the better)."""

    name = "gpupacking"

    def scores(self, req: Request, mask: BoolArray) -> IntArray:
        c = self.cluster
        n = len(c.nodes)
        if not req.gpus:
            return np.zeros(n, dtype=np.int64)
        free_whole = c.free_whole
        idle = free_whole == c.gpu_count
        idle_score = np.maximum(MAX_SCORE // 3 - free_whole, free_whole)
        if req.blocks:
            ok = share_cells(c, req.blocks)
            tightest = np.min(np.where(ok, c.gpu_free, np.iinfo(np.int64).max), axis=1)
            uses_free = tightest == BLOCKS_PER_GPU
            ratio = (tightest * MILLI_PER_BLOCK) * 100 // MILLI
            shared = np.maximum(MAX_SCORE - ratio // 10, MAX_SCORE // 2)
            used = np.where(uses_free, max(MAX_SCORE // 2 - 1, MAX_SCORE // 3), shared)
        else:
            used = np.full(n, max(MAX_SCORE // 2 - req.whole, MAX_SCORE // 3), dtype=np.int64)
        score: IntArray = np.where(idle, idle_score, used)
        return score


class PaperFgdPolicy(ArrayPolicy):
    """FGD: the node and GPU whose fragmentation (for the target workload) grows least.

    Score ``int(100 · sigmoid((F_before − F_after) / 1000))`` per node (a share: the best GPU of
    the node, first index among equals), as the artifact computes it, in float64 accumulated bucket
    by bucket in its order, so that equal scores (and thus ties) are the artifact's.
    """

    name = "fgd"

    def __init__(self, nodes: Sequence[Node], rng: np.random.Generator, target: TargetWorkload,
                 tasks_counted: int) -> None:
        super().__init__(nodes, rng)
        self.model = FragmentationModel(self.cluster, self.feasibility, target)
        self.p = artifact_popularity(target.weights, tasks_counted)
        self.changed = ChangedNodes(self.cluster)
        self.F_before = np.zeros(len(self.cluster.nodes))
        self._seen_before = -1
        self._cache: dict[tuple[int, int, int], tuple[IntArray, IntArray, int]] = {}

    def artifact_frag(self, rows: IntArray, states: NodeStates) -> FloatArray:
        return artifact_fragmentation(self.model, rows, states, self.p)

    def _refresh_before(self) -> None:
        self.model.refresh()
        if self._seen_before < 0:
            rows: IntArray | None = None
            self._seen_before = len(self.cluster.dirty)
        else:
            rows, self._seen_before = self.changed.since(self._seen_before)
        if rows is None:
            rows = np.arange(len(self.cluster.nodes), dtype=np.int64)
        if len(rows):
            m = self.model
            self.F_before[rows] = self.artifact_frag(rows, NodeStates(m.T[rows], m.S[rows], m.cap[rows],
                                                                      m.cpu_free(rows), m.mem_free(rows)))

    def _node_scores(self, req: Request, rows: IntArray) -> tuple[IntArray, IntArray]:
        """Score and GPU (for a share) of each of ``rows``."""
        m = self.model
        if req.blocks:
            states, valid = m.after_fractional(rows, req.cpu, 0, np.full(len(rows), req.blocks, dtype=np.int64))
            after = self.artifact_frag(rows, states)
            score = sigmoid_score(self.F_before[rows][:, None] - after)
            score = np.where(valid, score, NO_SCORE)
            gpu = np.argmax(score, axis=1)
            return score[np.arange(len(rows)), gpu], gpu.astype(np.int64)
        after = self.artifact_frag(rows, m.after_whole(rows, req.cpu, 0, req.whole))
        return sigmoid_score(self.F_before[rows] - after), np.zeros(len(rows), dtype=np.int64)

    def choose(self, req: Request, mask: BoolArray) -> Choice:
        self._refresh_before()
        key = (req.cpu, req.whole, req.blocks)
        got = self._cache.get(key)
        if got is None:
            rows: IntArray | None = None
            score = np.full(len(self.cluster.nodes), NO_SCORE, dtype=np.int64)
            gpu = np.zeros(len(self.cluster.nodes), dtype=np.int64)
        else:
            score, gpu, seen = got
            rows, _ = self.changed.since(seen)
        if rows is None:
            rows = np.arange(len(self.cluster.nodes), dtype=np.int64)
        if len(rows):
            score[rows], gpu[rows] = self._node_scores(req, rows)
        self._cache[key] = (score, gpu, len(self.cluster.dirty))
        node = int(np.argmax(np.where(mask, score, NO_SCORE)))
        if req.blocks:
            return Choice(node, (int(gpu[node]),), req.blocks)
        return Choice(node, self.exclusive_gpus(node, req.whole), None)


def sigmoid_score(gain: FloatArray) -> IntArray:
    """``int64(sigmoid(gain / 1000) · 100)`` as the artifact computes it (gain in milli-GPU)."""
    with np.errstate(over="ignore"):
        s = 1.0 / (1.0 + np.exp(-(gain / 1000)))
    score: IntArray = np.trunc(s * float(MAX_SCORE)).astype(np.int64)
    return score


def artifact_popularity(weights: Sequence[int], tasks_counted: int) -> FloatArray:
    """Popularity of each target shape in float64 as the artifact computes it: count / total,
    renormalised by (covered / total) when the shapes do not cover every task."""
    total = float(tasks_counted)
    covered = float(sum(weights))
    p = np.array([w / total for w in weights], dtype=np.float64)
    if sum(weights) < tasks_counted:
        p = p / (covered / total)
    return p


def artifact_fragmentation(model: FragmentationModel, rows: IntArray, states: NodeStates,
                           p: FloatArray) -> FloatArray:
    """F per node state in milli-GPU, summed like the artifact: one float bucket per fragment kind
    (lack both, lack GPU, satisfied, lack CPU, CPU-only fits, CPU-only lacks CPU, no access), each
    accumulated shape by shape in target order, then the buckets but "satisfied" added in order."""
    T, S, cap, cpu, _ = states
    Tm = T.astype(np.float64) * MILLI_PER_BLOCK
    Sm = S.astype(np.float64) * MILLI_PER_BLOCK
    extra = (1,) * (T.ndim - 1)
    access = model.access[rows].reshape((len(rows), *extra, model.access.shape[1]))
    gpu_shape = model.shape_gpus > 0
    cpu_ok = cpu[..., None] >= model.shape_cpu
    host = cap >= model.shape_gpus
    pT = p * Tm[..., None]
    zero = 0.0
    lack_gpu = np.where(access & host & cpu_ok, p * Sm, np.where(access & ~host & cpu_ok, pT, zero))
    lack_cpu = np.where(access & host & ~cpu_ok, pT, zero)
    lack_both = np.where(access & ~host & ~cpu_ok, pT, zero)
    cpu_fits = np.where(~gpu_shape & cpu_ok, pT, zero)
    cpu_lacks = np.where(~gpu_shape & ~cpu_ok, pT, zero)
    no_access = np.where(gpu_shape & ~access, pT, zero)

    def bucket(contrib: FloatArray) -> FloatArray:
        # add.accumulate adds strictly in order along the axis, like the artifact's loop
        total: FloatArray = np.add.accumulate(contrib, axis=-1)[..., -1]
        return total

    out: FloatArray = bucket(lack_both) + bucket(lack_gpu) + bucket(lack_cpu) + bucket(cpu_fits) + bucket(
        cpu_lacks) + bucket(no_access)
    return out


class EnginePolicy(FillPolicy):
    """The engine's own placement (``binpack``, ``spread`` or ``defrag``) through a PlacementSession."""

    def __init__(self, nodes: Sequence[Node], placement: Placement, target: TargetWorkload | None,
                 name: str, flavors: Sequence[ResourceFlavor] = (),
                 choice: FlavorChoice = FlavorChoice.IN_ORDER) -> None:
        self.session = PlacementSession(nodes, SchedulerConfig(placement=placement), target=target, flavors=flavors,
                                        choice=choice)
        self.cluster = self.session.cluster
        self.feasibility = self.session.feasibility
        self.name = name
        self._index = self.cluster.index

    def place(self, req: Request) -> Choice | None:
        binding = self.session.place(req.pod)
        if binding is None:
            return None
        return Choice(self._index[binding.node], binding.gpus, binding.gpu_blocks)


PolicyFactory = Callable[[Sequence[Node], np.random.Generator, TargetWorkload, int], FillPolicy]

BASELINES: dict[str, PolicyFactory] = {
    "random": lambda nodes, rng, target, counted: RandomPolicy(nodes, rng),
    "dotprod": lambda nodes, rng, target, counted: DotProductPolicy(nodes, rng),
    "clustering": lambda nodes, rng, target, counted: GpuClusteringPolicy(nodes, rng),
    "gpupacking": lambda nodes, rng, target, counted: GpuPackingPolicy(nodes, rng),
    "bestfit": lambda nodes, rng, target, counted: BestFitPolicy(nodes, rng),
    "fgd": lambda nodes, rng, target, counted: PaperFgdPolicy(nodes, rng, target, counted),
}
ENGINE_POLICIES: dict[str, Placement] = {
    "gpufleet": Placement.DEFRAG,
    "binpack": Placement.BINPACK,
    "spread": Placement.SPREAD,
    # GPU-model quotas (docs/semantics.md): one ResourceFlavor per GPU model, a queue listing them all
    # (most GPUs first), each with a quota of its capacity: a task takes the first model it fits on
    # (flavorChoice InOrder), or the best node over all models (BestPlacement).
    "gpufleet-flavors": Placement.DEFRAG,
    "gpufleet-flavors-best": Placement.DEFRAG,
}
POLICIES = (*BASELINES, *ENGINE_POLICIES)


def model_flavors(nodes: Sequence[Node]) -> list[ResourceFlavor]:
    """One ResourceFlavor per GPU model (label ``nvidia.com/gpu.product``) of ``nodes``, the model
    with the most GPUs first (ties by name)."""
    gpus: dict[str, int] = {}
    for node in nodes:
        model = node.labels.get(LABEL_GPU_PRODUCT)
        if model is not None and node.allocatable.get(GPU, 0) > 0:
            gpus[model] = gpus.get(model, 0) + node.allocatable[GPU]
    return [ResourceFlavor(m.lower(), ((LABEL_GPU_PRODUCT, m),)) for m in sorted(gpus, key=lambda m: (-gpus[m], m))]


def make_policy(name: str, nodes: Sequence[Node], rng: np.random.Generator, target: TargetWorkload,
                tasks_counted: int, engine_target: TargetWorkload | None = None) -> FillPolicy:
    """A fresh policy over ``nodes``. FGD measures against ``target`` (the paper's shapes, out of
    ``tasks_counted`` tasks); ``gpufleet`` keeps room for ``engine_target`` (default: ``target``)."""
    if name in BASELINES:
        return BASELINES[name](nodes, rng, target, tasks_counted)
    if name in ENGINE_POLICIES:
        placement = ENGINE_POLICIES[name]
        defrag_target = (engine_target or target) if placement == Placement.DEFRAG else None
        flavored = name.startswith("gpufleet-flavors")
        return EnginePolicy(nodes, placement, defrag_target, name, model_flavors(nodes) if flavored else (),
                            FlavorChoice.BEST_PLACEMENT if name == "gpufleet-flavors-best" else FlavorChoice.IN_ORDER)
    raise ValueError(f"unknown policy {name!r} (expected one of {', '.join(POLICIES)})")


__all__ = [
    "BASELINES",
    "ENGINE_POLICIES",
    "POLICIES",
    "Choice",
    "FillPolicy",
    "Request",
    "artifact_fragmentation",
    "artifact_popularity",
    "make_policy",
    "sigmoid_score",
]
