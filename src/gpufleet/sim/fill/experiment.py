"""The FGD paper's fill experiment: tasks arrive one at a time into an empty cluster and never leave.

Procedure (FGD artifact, see /work/shared/traces/fgd-atc23-results/README.md and docs/placement-defrag.md):

- cluster: a node list (openb: 1213 GPU nodes, 6212 GPUs); node tie-breaks follow a seeded random
  node order (nodes are named ``<rank>-<name>`` and every policy breaks ties by name);
- tasks: the list sorted by name, shuffled with the seed, then "inflated": tasks drawn uniformly
  with replacement from the list are appended until the next one would take the summed GPU request
  past ``inflate`` × capacity (a list already past it is cut down by removing random tasks);
- each task is placed by the policy or fails (dropped; no retry, no departure, no preemption);
- after each task: arrived GPU (requested so far, failed included), allocated GPU, and the
  fragmentation of the free GPU against the target workload (the trace's most popular task shapes
  covering ≥ 95 % of tasks).

Curves are bucketed by arrived % of capacity rounded to an integer, as the artifact's analysis does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from gpufleet.adapters.cluster_spec import trace_nodes_to_domain
from gpufleet.adapters.traces.records import TraceJob, TraceNode
from gpufleet.domain import (
    BLOCKS_PER_GPU,
    CPU,
    GPU,
    LABEL_GPU_PRODUCT,
    MEMORY,
    MILLI,
    MILLI_PER_BLOCK,
    Node,
    Pod,
    SelectorRequirement,
    SelectorTerm,
)
from gpufleet.domain.units import mib_to_milli
from gpufleet.engine import (  # gpu_fit, resources_fit: the engine's fit test
    FragmentationModel,
    TargetShape,
    TargetWorkload,
    gpu_fit,
    resources_fit,
    shape_of,
)
from gpufleet.sim.fill.policies import Choice, FillPolicy, Request, make_policy

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

NODE_PODS = 256  # pod slots per node: the openb lists give none, and none of them binds
NAMESPACE = "fill"
DEFAULT_INFLATE = 1.3
MAX_BUCKET = 130
FAILURE_KINDS = ("gpu_model", "gpu_full", "gpu_fragmented", "cpu", "memory", "other")


# -- inputs -------------------------------------------------------------------------------------

def fill_nodes(nodes: Sequence[TraceNode], ranks: Sequence[int]) -> list[Node]:
    """Domain nodes named ``<rank>-<name>`` (rank: position in the seeded tie-break order), with
    ``NODE_PODS`` pod slots; otherwise as every trace node list is converted."""
    width = max(4, len(str(len(nodes))))
    names = [f"{rank:0{width}d}-{node.name}" for node, rank in zip(nodes, ranks, strict=True)]
    return list(trace_nodes_to_domain(nodes, pods_per_node=NODE_PODS, names=names))


def task_pod(job: TraceJob, memory: bool) -> Pod:
    """A task as a pod: CPU, memory (when ``memory``), whole GPUs or blocks of one, GPU models."""
    requests = {CPU: job.cpu_milli}
    if memory and job.memory_mib:
        requests[MEMORY] = mib_to_milli(job.memory_mib)
    blocks: int | None = None
    if job.fractional:
        blocks = min(BLOCKS_PER_GPU, max(1, -(-job.gpu_milli // MILLI_PER_BLOCK)))
    elif job.num_gpu > 0:
        requests[GPU] = job.num_gpu * MILLI
    affinity: tuple[SelectorTerm, ...] = ()
    if job.gpu_models:
        models = tuple(sorted(job.gpu_models))
        affinity = (SelectorTerm(expressions=(SelectorRequirement(LABEL_GPU_PRODUCT, "In", models),)),)
    return Pod(namespace=NAMESPACE, name=job.name, requests=requests, gpu_blocks=blocks, affinity=affinity)


def gpu_request(job: TraceJob) -> int:
    return job.num_gpu * job.gpu_milli if job.num_gpu > 0 else 0


def task_order(jobs: Sequence[TraceJob], seed: int, inflate: float, capacity_milli: int) -> list[int]:
    """Indices into ``jobs`` of the tasks of one run, in arrival order (see the module docstring).

    Inflation stops at the first drawn task whose per-GPU request would take the total past the
    target, as the artifact's ``tuneUpPods`` does.
    """
    rng = np.random.default_rng(seed)
    by_name = sorted(range(len(jobs)), key=lambda i: jobs[i].name)
    order = [by_name[i] for i in rng.permutation(len(by_name)).tolist()]
    limit = inflate * capacity_milli
    total = sum(gpu_request(jobs[i]) for i in order)
    while total > limit and order:
        total -= gpu_request(jobs[order.pop(int(rng.integers(len(order))))])
    if not jobs or total == limit:
        return order
    while True:
        j = by_name[int(rng.integers(len(by_name)))]
        if total + (jobs[j].gpu_milli if jobs[j].num_gpu else 0) > limit:
            return order
        total += gpu_request(jobs[j])
        order.append(j)


def node_ranks(count: int, seed: int) -> list[int]:
    """The seeded random tie-break rank of each node."""
    ranks = np.empty(count, dtype=np.int64)
    ranks[np.random.default_rng([seed, 1]).permutation(count)] = np.arange(count)
    return [int(r) for r in ranks]


def target_workload(pods: Sequence[Pod], coverage: float = 0.95, memory: bool = False) -> TargetWorkload:
    """The trace's most frequent task shapes covering ``coverage`` of its tasks.

    Without ``memory`` (the FGD paper's measure) a shape is CPU, GPU and GPU models; with it, also
    the memory request (what the ``gpufleet`` placement keeps room for).
    """
    counts: dict[TargetShape, int] = {}
    for pod in pods:
        shape = shape_of(pod)
        if not memory:
            shape = replace(shape, memory=0)
        counts[shape] = counts.get(shape, 0) + 1
    return TargetWorkload.popular(counts, coverage)


# -- one run ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FillRun:
    """What one (policy, seed) run recorded, per task in arrival order."""

    policy: str
    seed: int
    capacity_milli: int
    task_names: tuple[str, ...]
    placed: npt.NDArray[np.bool_]
    node: IntArray  # node index (-1: failed)
    arrived_milli: IntArray  # cumulative, after each task
    allocated_milli: IntArray
    frag_milli: FloatArray  # fragmented free GPU after each task
    free_milli: IntArray
    failures: dict[str, int] = field(default_factory=dict)
    node_names: tuple[str, ...] = ()
    # per task: index into FAILURE_KINDS of why it failed, -1 when placed
    failure_at: npt.NDArray[np.int8] = field(default_factory=lambda: np.zeros(0, dtype=np.int8))

    @property
    def tasks(self) -> int:
        return len(self.task_names)

    @property
    def failed(self) -> int:
        return int((~self.placed).sum())

    def alloc_pct(self) -> FloatArray:
        pct: FloatArray = self.allocated_milli * 100.0 / self.capacity_milli
        return pct

    def arrived_pct(self) -> FloatArray:
        pct: FloatArray = self.arrived_milli * 100.0 / self.capacity_milli
        return pct

    def frag_pct(self) -> FloatArray:
        pct: FloatArray = self.frag_milli * 100.0 / self.capacity_milli
        return pct

    def failures_until(self, arrived_pct: float) -> dict[str, int]:
        """Failed tasks by cause among those that arrived while arrived % (rounded) was at most ``arrived_pct``."""
        upto = np.round(self.arrived_pct()) <= arrived_pct
        kinds = self.failure_at[upto & (self.failure_at >= 0)]
        counts = np.bincount(kinds.astype(np.int64), minlength=len(FAILURE_KINDS))
        return {k: int(c) for k, c in zip(FAILURE_KINDS, counts.tolist(), strict=True) if c}

    def frag_ratio_pct(self) -> FloatArray:
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(self.free_milli > 0, self.frag_milli * 100.0 / self.free_milli, 0.0)
        pct: FloatArray = ratio.astype(np.float64)
        return pct


def failure_kind(policy: FillPolicy, req: Request) -> str:
    """Why a task fits no node: its GPU model absent, GPU full, GPU fragmented, CPU or memory short."""
    c = policy.cluster
    static = policy.feasibility.mask(req.pod)
    if not static.any():
        return "gpu_model"
    if req.gpus:
        free_gpu = np.maximum(c.gpu_free, 0) * MILLI_PER_BLOCK
        if int(free_gpu[static].sum()) < req.gpu_milli:
            return "gpu_full"
        gpus_fit = static & gpu_fit(c, req.whole, req.share)
        if not gpus_fit.any():
            return "gpu_fragmented"
    else:
        gpus_fit = static
    cpu_fit = gpus_fit & resources_fit(c, req.res, [c.res_index[CPU]])
    if not cpu_fit.any():
        return "cpu"
    if not (cpu_fit & resources_fit(c, req.res, [c.res_index[MEMORY]])).any():
        return "memory"
    return "other"


Progress = Callable[[int], None]


def run_sequence(policy_name: str, nodes: Sequence[Node], jobs: Sequence[TraceJob], order: Sequence[int],
                 seed: int = 0, memory: bool = True, target: TargetWorkload | None = None,
                 progress: Progress | None = None) -> FillRun:
    """Place ``jobs[order[0]]``, ``jobs[order[1]]``, ... on empty ``nodes`` with one policy."""
    pods = [task_pod(job, memory) for job in jobs]
    target = target or target_workload(pods)
    rng = np.random.default_rng([seed, 2])
    policy = make_policy(policy_name, nodes, rng, target, len(jobs), target_workload(pods, memory=True))
    measure = FragmentationModel(policy.cluster, policy.feasibility, target)
    requests: dict[int, Request] = {}
    capacity = policy.cluster.capacity(GPU)
    n = len(order)
    placed = np.zeros(n, dtype=np.bool_)
    node_of = np.full(n, -1, dtype=np.int64)
    arrived = np.zeros(n, dtype=np.int64)
    allocated = np.zeros(n, dtype=np.int64)
    frag = np.zeros(n, dtype=np.float64)
    free = np.zeros(n, dtype=np.int64)
    failures = dict.fromkeys(FAILURE_KINDS, 0)
    failure_at = np.full(n, -1, dtype=np.int8)
    names: list[str] = []
    total_arrived = total_alloc = 0
    copies = 0
    for step, j in enumerate(order):
        req = requests.get(j)
        if req is None:
            req = requests[j] = policy.request(pods[j])
        else:  # a copy drawn by the inflation: a pod of its own name, as in the artifact
            req = replace(req, pod=replace(req.pod, name=f"{req.pod.name}-tuned-{copies}"))
            copies += 1
        choice: Choice | None = policy.place(req)
        total_arrived += req.gpu_milli
        if choice is not None:
            placed[step] = True
            node_of[step] = choice.node
            total_alloc += req.gpu_milli
        else:
            kind = failure_kind(policy, req)
            failures[kind] += 1
            failure_at[step] = FAILURE_KINDS.index(kind)
        arrived[step], allocated[step] = total_arrived, total_alloc
        frag[step] = measure.fragmented_milli()
        free[step] = measure.free_milli()
        names.append(jobs[j].name)
        if progress is not None:
            progress(1)
    node_names = tuple(n.name for n in policy.cluster.nodes)
    return FillRun(policy_name, seed, capacity, tuple(names), placed, node_of, arrived, allocated, frag, free,
                   {k: v for k, v in failures.items() if v}, node_names, failure_at)


def run_fill(policy_name: str, trace_nodes: Sequence[TraceNode], jobs: Sequence[TraceJob], seed: int,
             inflate: float = DEFAULT_INFLATE, memory: bool = True, progress: Progress | None = None) -> FillRun:
    """One seeded run of the fill experiment."""
    capacity = sum(n.gpus for n in trace_nodes) * MILLI
    nodes = fill_nodes(trace_nodes, node_ranks(len(trace_nodes), seed))
    order = task_order(jobs, seed, inflate, capacity)
    return run_sequence(policy_name, nodes, jobs, order, seed, memory, progress=progress)


# -- curves -------------------------------------------------------------------------------------

def bucket_means(arrived_pct: FloatArray, values: FloatArray, top: int = MAX_BUCKET) -> dict[int, float]:
    """Mean of ``values`` per integer bucket of arrived % (0..top), as the artifact's analysis:
    arrived % rounded (half to even), an empty bucket borrowing the events of its neighbours."""
    buckets = np.round(arrived_pct)
    out: dict[int, float] = {}
    for x in range(top + 1):
        sel = buckets == x
        if not sel.any():
            sel = (buckets >= x - 1) & (buckets <= x + 1)
            if not sel.any():
                continue
        out[x] = float(values[sel].mean())
    return out
