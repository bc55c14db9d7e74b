"""Trace jobs turned into the pods (and pod groups) the engine schedules.

A job becomes **one pod** when some node can hold all its GPUs, else a **gang**: a PodGroup of
``ceil(num_gpu / G)`` pods, where G is the largest GPU count of a node the job may use; every pod
asks for G GPUs but the last, which asks for the rest, and ``minMember`` is the pod count, so the
job starts all-or-nothing like a distributed training run. CPU and memory are split over the pods
in proportion to their GPUs. A fractional job (``gpu_milli < 1000``) is one pod asking for
``ceil(gpu_milli / 10)`` blocks of one GPU.

A job no node set of the cluster could ever hold (more GPUs than the nodes it may use have in
total, or a pod larger than every such node) is **rejected** on arrival instead of being retried
by the engine in every cycle until the end; it is counted in the metrics.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpufleet.adapters.traces.records import TraceJob
from gpufleet.domain import (
    BLOCKS_PER_GPU,
    CPU,
    GPU,
    LABEL_GPU_PRODUCT,
    LABEL_QUEUE,
    MEMORY,
    MILLI,
    MILLI_PER_BLOCK,
    PodGroup,
    QueueName,
    SelectorRequirement,
    SelectorTerm,
)
from gpufleet.domain.units import MILLI_PER_MIB, mib_to_milli
from gpufleet.policy import ProjectIndex
from gpufleet.policy.grouping import GroupFacts, GroupProblem, Owner, OwnerRef, Role, group_for
from gpufleet.sim.cluster import SimCluster

NAMESPACE = "sim"


@dataclass(frozen=True, slots=True)
class PodShape:
    """What one pod of a job asks for, in domain units."""

    whole: int  # whole GPUs
    blocks: int | None  # blocks of one GPU for a fractional pod
    cpu: int  # milli-cores
    memory: int  # milli-bytes
    # the pod's requests, made once and shared by every pod object of this shape
    requests: Mapping[str, int] = field(default_factory=dict, compare=False, hash=False)

    @property
    def gpu_milli(self) -> int:
        return self.whole * MILLI if self.blocks is None else self.blocks * MILLI_PER_BLOCK


def pod_shape(whole: int, blocks: int | None, cpu: int, memory: int) -> PodShape:
    requests: dict[str, int] = {}
    if whole:
        requests[GPU] = whole * MILLI
    if cpu:
        requests[CPU] = cpu
    if memory:
        requests[MEMORY] = memory
    return PodShape(whole, blocks, cpu, memory, requests)


@dataclass(frozen=True, slots=True)
class SimJob:
    idx: int
    name: str  # unique; pods are "<name>" or "<name>-<i>" in namespace "sim"
    submit_s: float
    duration_s: float | None  # None: runs until the end
    queue: QueueName
    priority: int
    checkpoint_s: float  # 0: never checkpoints (an interruption loses all progress)
    pods: tuple[PodShape, ...]
    affinity: tuple[SelectorTerm, ...] = ()
    rejected: str = ""  # why it can never run here; empty: it can
    attrs: Mapping[str, str] = field(default_factory=dict)
    # derived from the above, stored because the timeline reads them at every start and stop
    gpu_milli: int = field(init=False, compare=False)
    pod_names: tuple[str, ...] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpu_milli", sum(p.gpu_milli for p in self.pods))
        names = (self.name,) if len(self.pods) == 1 else tuple(f"{self.name}-{i}" for i in range(len(self.pods)))
        object.__setattr__(self, "pod_names", names)

    @property
    def gang(self) -> bool:
        return len(self.pods) > 1


# The simulator knows no Projects: every queue is open, and a trace job's queue is taken as written.
_SIM_FACTS = GroupFacts(projects=ProjectIndex())


def job_owner(job: SimJob) -> Owner:
    """A gang job as the owner it stands for: a PyTorchJob of ``len(pods)`` workers in the job's queue
    (the trace has no uid: the job's index stands for it)."""
    ref = OwnerRef("kubeflow.org/v1", "PyTorchJob", NAMESPACE, job.name, f"trace-{job.idx}")
    return Owner(ref, labels={LABEL_QUEUE: str(job.queue)}, roles=(Role("worker", len(job.pods)),))


def gang_of(job: SimJob) -> PodGroup:
    """The PodGroup of a gang job, through the grouping rules the controller uses
    (``gpufleet.policy.grouping``). It keeps the job's own name rather than the derived one: reports,
    pending reasons and the ledger export name gangs by their trace job."""
    result = group_for(job_owner(job), _SIM_FACTS)
    if isinstance(result, GroupProblem):  # an open queue and no annotation: cannot happen
        raise AssertionError(result.reason)
    (plan,) = result
    return PodGroup(NAMESPACE, job.name, min_member=plan.min_member, queue=plan.queue, placement=plan.placement)


def _split(total: int, parts: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``parts`` (integers, the remainder on the first)."""
    weight = sum(parts)
    if weight == 0:
        return [total] + [0] * (len(parts) - 1)
    shares = [total * p // weight for p in parts]
    shares[0] += total - sum(shares)
    return shares


def _shapes(job: TraceJob, largest: int) -> tuple[PodShape, ...]:
    cpu, memory = job.cpu_milli, mib_to_milli(job.memory_mib)
    if job.num_gpu <= 0 or job.gpu_milli <= 0:
        return (pod_shape(0, None, cpu, memory),)
    if job.fractional:
        blocks = min(BLOCKS_PER_GPU, max(1, math.ceil(job.gpu_milli / MILLI_PER_BLOCK)))
        return (pod_shape(0, blocks, cpu, memory),)
    if largest <= 0 or job.num_gpu <= largest:
        return (pod_shape(job.num_gpu, None, cpu, memory),)
    gpus = [largest] * (job.num_gpu // largest)
    if job.num_gpu % largest:
        gpus.append(job.num_gpu % largest)
    cpus, mems = _split(cpu, gpus), _split(memory, gpus)
    return tuple(pod_shape(g, None, c, m) for g, c, m in zip(gpus, cpus, mems, strict=True))


@dataclass(frozen=True, slots=True)
class _NodeKind:
    gpus: int
    cpu: int
    memory: int
    model: str


def _node_kinds(cluster: SimCluster) -> list[_NodeKind]:
    kinds = {
        _NodeKind(
            n.node.gpu_count - len(n.node.unhealthy_gpus),
            n.node.allocatable.get(CPU, 0),
            n.node.allocatable.get(MEMORY, 0),
            n.node.gpu_product or n.node.labels.get(LABEL_GPU_PRODUCT, ""),
        )
        for n in cluster.nodes
        if not n.node.unschedulable
    }
    return sorted(kinds, key=lambda k: (k.model, k.gpus, k.cpu, k.memory))


class JobBuilder:
    """Turns trace jobs into :class:`SimJob` for one cluster (node sizes decide the gangs)."""

    def __init__(self, cluster: SimCluster, default_checkpoint_s: float) -> None:
        self.kinds = _node_kinds(cluster)
        self.default_checkpoint_s = default_checkpoint_s
        self._largest: dict[tuple[str, ...], int] = {}
        self._total: dict[tuple[str, ...], int] = {}
        self._shapes: dict[tuple[int, int, int, int, tuple[str, ...]],
                           tuple[tuple[PodShape, ...], tuple[SelectorTerm, ...], str]] = {}
        counts: dict[str, int] = {}
        for n in cluster.nodes:
            if not n.node.unschedulable:
                model = n.node.gpu_product or n.node.labels.get(LABEL_GPU_PRODUCT, "")
                counts[model] = counts.get(model, 0) + n.node.gpu_count - len(n.node.unhealthy_gpus)
        self._gpus_by_model = counts

    def _allowed(self, models: tuple[str, ...]) -> list[_NodeKind]:
        return [k for k in self.kinds if not models or k.model in models]

    def largest_gpus(self, models: tuple[str, ...]) -> int:
        got = self._largest.get(models)
        if got is None:
            got = self._largest[models] = max((k.gpus for k in self._allowed(models)), default=0)
        return got

    def total_gpus(self, models: tuple[str, ...]) -> int:
        got = self._total.get(models)
        if got is None:
            got = sum(v for m, v in self._gpus_by_model.items() if not models or m in models)
            self._total[models] = got
        return got

    def _shape_of(self, job: TraceJob) -> tuple[tuple[PodShape, ...], tuple[SelectorTerm, ...], str]:
        """Pods, affinity and rejection of a job's request (cached: traces repeat a few shapes)."""
        models = tuple(sorted(job.gpu_models))
        key = (job.num_gpu, job.gpu_milli, job.cpu_milli, job.memory_mib, models)
        got = self._shapes.get(key)
        if got is None:
            pods = _shapes(job, self.largest_gpus(models))
            affinity: tuple[SelectorTerm, ...] = ()
            if models:
                affinity = (SelectorTerm(expressions=(SelectorRequirement(LABEL_GPU_PRODUCT, "In", models),)),)
            got = self._shapes[key] = (pods, affinity, self._never_fits(pods, models))
        return got

    def build(self, idx: int, job: TraceJob, queue: QueueName, used_names: set[str]) -> SimJob:
        """The job's pods; its name is made unique against (and added to) ``used_names``."""
        pods, affinity, rejected = self._shape_of(job)
        name = claim_name(pod_name_base(job.name), len(pods), used_names)
        checkpoint = job.checkpoint_s if job.checkpoint_s is not None else self.default_checkpoint_s
        return SimJob(
            idx=idx,
            name=name,
            submit_s=job.submit_s,
            duration_s=job.duration_s,
            queue=queue,
            priority=job.priority if job.priority is not None else 0,
            checkpoint_s=max(0.0, checkpoint),
            pods=pods,
            affinity=affinity,
            rejected=rejected,
            attrs=job.attrs,
        )

    def _never_fits(self, pods: tuple[PodShape, ...], models: tuple[str, ...]) -> str:
        allowed = self._allowed(models)
        where = f"GPU model {'|'.join(models)}" if models else "the cluster"
        if not allowed:
            return f"no node of {where}"
        gpus = sum(p.whole for p in pods) + (1 if any(p.blocks for p in pods) else 0)
        if gpus > self.total_gpus(models):
            return f"{gpus} GPUs asked, {where} has {self.total_gpus(models)}"
        for p in pods:
            need = max(p.whole, 1 if p.blocks else 0)
            if not any(k.gpus >= need and k.cpu >= p.cpu and k.memory >= p.memory for k in allowed):
                cpus, mib = p.cpu // MILLI, p.memory // MILLI_PER_MIB
                return f"a pod of {need} GPUs, {cpus} CPUs, {mib} MiB fits no node of {where}"
        return ""


_UNSAFE = re.compile(r"[^a-z0-9.-]")


def pod_name_base(name: str) -> str:
    """A trace job name made safe as a pod name (lower-case letters, digits, '-' and '.')."""
    return _UNSAFE.sub("-", name.lower()).strip("-.") or "job"


def claim_name(base: str, pods: int, used: set[str]) -> str:
    """The first of ``base``, ``base.1``, ``base.2``... whose pod names are all unused; claims them."""
    n = 0
    while True:
        name = base if n == 0 else f"{base}.{n}"
        names = [name] if pods == 1 else [f"{name}-{i}" for i in range(pods)]
        if not any(x in used for x in names):
            used.update(names)
            return name
        n += 1


def build_jobs(
    trace: Sequence[TraceJob], queues: Sequence[QueueName], cluster: SimCluster, default_checkpoint_s: float
) -> tuple[SimJob, ...]:
    """Sim jobs for ``trace`` (in that order) with the queue of each job."""
    builder = JobBuilder(cluster, default_checkpoint_s)
    used: set[str] = set()
    return tuple(builder.build(i, job, q, used) for i, (job, q) in enumerate(zip(trace, queues, strict=True)))
