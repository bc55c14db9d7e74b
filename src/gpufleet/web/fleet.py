"""The dashboard's model of one cluster state: the snapshot, the engine's decisions on it, and the
indexes every page reads (pods by key, jobs as the engine's gangs, each GPU's holder as arrays).

A :class:`Fleet` is built once per snapshot (``Fleet.build``; the sources cache it) so that a page
request only filters and slices: the engine runs here, never per request. Everything here is the
engine's own: ``schedule`` for the decisions, ``admission_order`` for each queue's pending gangs, the
engine's queue forest (:class:`gpufleet.engine.queues.QueueForest`, built by the engine from the
snapshot, running pods bound) for quota, usage and the fair-order keys; the queue and gang of a pod
by the shared rules of :mod:`gpufleet.domain.queues`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.adapters import resolve_devices
from gpufleet.domain import (
    BLOCKS_PER_GPU,
    LABEL_GPU_PRODUCT,
    Binding,
    Decisions,
    Eviction,
    Node,
    Pod,
    PodGroup,
    QueueName,
    Snapshot,
)
from gpufleet.domain.queues import gang_key, pod_group_of, resolve_queue
from gpufleet.domain.selectors import namespace_labels
from gpufleet.engine import admission_order, schedule
from gpufleet.engine.queues import QueueForest
from gpufleet.engine.scheduler import Engine
from gpufleet.kube.inspect.explain import GroupOwner
from gpufleet.policy import ProjectIndex

__all__ = ["FREE", "NO_GPU", "NO_PROJECT", "Fleet", "Job", "Share"]

FREE = -1  # a GPU cell nobody holds
NO_GPU = -2  # past the node's GPU count (nodes have different counts)
NO_PROJECT = "(no project)"  # the last of Fleet.project_names: pods of namespaces no Project claims

IntArray = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Share:
    """A fractional pod on one GPU: its queue and project (indexes into ``Fleet.queue_names`` and
    ``Fleet.project_names``), blocks and pod."""

    queue: int
    blocks: int
    pod: str
    project: int = 0


@dataclass(slots=True)
class Job:
    """A job as the dashboard lists it: one gang (a PodGroup's pods, or a pod alone)."""

    key: str  # the gang key: namespace/group, or the pod key of a pod alone
    namespace: str
    name: str
    queue: str
    project: str | None
    user: str | None
    pods: list[str] = field(default_factory=list)  # pod keys, sorted
    bound: int = 0  # pods bound now
    gpus: float = 0.0  # GPUs asked for, all pods (a fraction counts blocks/100)
    gpu_model: str = ""  # the model it runs on, or the one its pods select ("" any)
    created: float = 0.0
    decision: str = ""  # bind | evict | pending | "" (keeps running)
    reason: str = ""  # the engine's pending reason of its first pending pod

    @property
    def state(self) -> str:
        """running (every pod bound), pending (none), partial."""
        if self.bound == len(self.pods):
            return "running"
        return "pending" if self.bound == 0 else "partial"


@dataclass
class Fleet:
    """One cluster state, decided and indexed (see the module text)."""

    snapshot: Snapshot
    decisions: Decisions
    order: Mapping[str, tuple[str, ...]]  # leaf queue -> pending gang keys, first tried first
    forest: QueueForest
    warnings: tuple[str, ...]
    pods: dict[str, Pod]
    queue_of: dict[str, str]  # pod key -> leaf queue
    project_of_ns: dict[str, str]  # namespace -> project name (namespaces of no project absent)
    queue_owners: dict[str, tuple[str, ...]]  # queue -> projects listing it
    bindings: dict[str, Binding]
    evictions: dict[str, Eviction]
    pending: dict[str, str]  # pod key -> reason
    jobs: list[Job]  # by key
    job_by_key: dict[str, Job]
    job_of_pod: dict[str, str]
    queue_names: list[str]  # every queue, sorted; cells hold indexes into it
    nodes: list[Node]
    node_index: dict[str, int]
    grid: IntArray  # (nodes, max GPUs): queue index of the whole-GPU holder, FREE or NO_GPU
    cell_project: IntArray  # (nodes, max GPUs): project index of the whole-GPU holder, FREE or NO_GPU
    project_names: list[str]  # every project of a pod, sorted, then NO_PROJECT
    blocks: IntArray  # (nodes, max GPUs): blocks held by fractional pods (0..100)
    shares: dict[tuple[int, int], list[Share]]  # (node, gpu) -> its fractional pods
    unhealthy: BoolArray  # (nodes, max GPUs)
    cordoned: BoolArray  # (nodes,)
    cell_pods: dict[tuple[int, int], str]  # (node, gpu) -> the whole-GPU pod holding it
    group_cache: dict[str, tuple[list[str], IntArray]] = field(default_factory=dict)  # views.cluster's groups
    view_cache: dict[object, object] = field(default_factory=dict)  # what views build once per fleet (and caller)
    # gang key -> the workload whose pod-grouper PodGroup it is (read from the raw PodGroups, which the
    # domain does not keep; empty when the source gave none): the job page names it, as explain does
    owners: dict[str, GroupOwner] = field(default_factory=dict)
    # (nodes, max GPUs): the measured GPU utilisation (%) of the whole-GPU pod holding each GPU, the mean
    # of its open ledger interval; NaN where none is known (no ledger, no sample, a free or shared GPU)
    used: npt.NDArray[np.float64] | None = None

    def measure(self, utilisation: Mapping[str, float]) -> None:
        """Take the pods' measured GPU utilisation (pod key -> mean %, from the usage ledger)."""
        used = np.full(self.grid.shape, np.nan)
        for (i, g), pod in self.cell_pods.items():
            value = utilisation.get(pod)
            if value is not None:
                used[i, g] = value
        self.used = used

    @classmethod
    def build(cls, snapshot: Snapshot) -> Fleet:
        view = resolve_devices(snapshot)  # DRA claims read as replay reads them
        snap = view.snapshot
        decisions = view.attach(schedule(snap))
        warnings = view.warnings + decisions.warnings
        order = admission_order(snap)
        forest = Engine(snap).forest  # the engine's queue state with the running pods bound
        names = sorted({p.namespace for p in snap.pods})
        index = ProjectIndex.build(snap.projects, namespace_labels(snap.namespaces), names)
        project_of_ns = {ns: p.name for ns, p in index.by_namespace.items()}
        owners = {str(q): tuple(ps) for q, ps in index.owners.items()}
        groups: dict[str, PodGroup] = {g.key: g for g in snap.pod_groups}
        default = snap.config.default_queue
        queue_of: dict[str, str] = {}
        pods: dict[str, Pod] = {}
        for pod in snap.pods:
            if pod.finished:
                continue
            pods[pod.key] = pod
            project = index.by_namespace.get(pod.namespace)
            fallback = project.default_queue if project is not None and project.default_queue else default
            queue_of[pod.key] = str(resolve_queue(pod, pod_group_of(pod, groups), QueueName(fallback)))
        queue_names = sorted({str(q.name) for q in snap.queues} | {str(default)} | set(queue_of.values()))
        fleet = cls(
            snapshot=snap, decisions=decisions, order=order, forest=forest, warnings=warnings, pods=pods,
            queue_of=queue_of, project_of_ns=project_of_ns, queue_owners=owners,
            bindings={b.pod: b for b in decisions.bindings}, evictions={e.pod: e for e in decisions.evictions},
            pending={p.pod: p.reason for p in decisions.pending}, jobs=[], job_by_key={}, job_of_pod={},
            queue_names=queue_names, nodes=list(snap.nodes), node_index={}, grid=np.zeros((0, 0), np.int32),
            cell_project=np.zeros((0, 0), np.int32),
            project_names=[*sorted({project_of_ns[ns] for ns in names if ns in project_of_ns}), NO_PROJECT],
            blocks=np.zeros((0, 0), np.int32), shares={}, unhealthy=np.zeros((0, 0), np.bool_),
            cordoned=np.zeros(0, np.bool_), cell_pods={},
        )
        fleet._index_jobs()
        fleet._index_gpus()
        return fleet

    # -- jobs ---------------------------------------------------------------------------------

    def _index_jobs(self) -> None:
        nodes = {n.name: n for n in self.snapshot.nodes}
        jobs: dict[str, Job] = {}
        for key in sorted(self.pods):
            pod = self.pods[key]
            gang = gang_key(pod)
            job = jobs.get(gang)
            if job is None:
                name = gang.partition("/")[2]
                job = jobs[gang] = Job(key=gang, namespace=pod.namespace, name=name, queue=self.queue_of[key],
                                       project=self.project_of_ns.get(pod.namespace), user=pod.submitted_by,
                                       created=pod.creation_time)
            job.pods.append(key)
            self.job_of_pod[key] = gang
            job.gpus += pod.whole_gpus if not pod.is_fractional else (pod.gpu_blocks or 0) / BLOCKS_PER_GPU
            job.created = min(job.created, pod.creation_time) if job.created else pod.creation_time
            where = pod.node_name if pod.bound else (self.bindings[key].node if key in self.bindings else None)
            node = nodes.get(where) if where is not None else None
            if not job.gpu_model:
                job.gpu_model = (node.gpu_product if node is not None else None) or \
                    pod.node_selector.get(LABEL_GPU_PRODUCT, "")
            if pod.bound:
                job.bound += 1
                if key in self.evictions and job.decision != "bind":
                    job.decision = "evict"
            elif key in self.bindings:
                job.decision = "bind"
            elif key in self.pending:
                if job.decision not in ("bind", "evict"):
                    job.decision = "pending"
                if not job.reason:
                    job.reason = self.pending[key]
        self.jobs = [jobs[k] for k in sorted(jobs)]
        self.job_by_key = jobs

    # -- the GPU grid -------------------------------------------------------------------------

    def _index_gpus(self) -> None:
        nodes = self.nodes
        self.node_index = {n.name: i for i, n in enumerate(nodes)}
        counts = np.array([n.gpu_count for n in nodes], dtype=np.int32)
        width = int(counts.max()) if len(nodes) else 0
        grid = np.full((len(nodes), width), FREE, dtype=np.int32)
        grid[np.arange(width)[None, :] >= counts[:, None]] = NO_GPU
        blocks = np.zeros((len(nodes), width), dtype=np.int32)
        unhealthy = np.zeros((len(nodes), width), dtype=np.bool_)
        for i, n in enumerate(nodes):
            for g in n.unhealthy_gpus:
                if 0 <= g < width:
                    unhealthy[i, g] = True
        self.cordoned = np.array([n.unschedulable for n in nodes], dtype=np.bool_)
        qindex = {q: i for i, q in enumerate(self.queue_names)}
        pindex = {p: i for i, p in enumerate(self.project_names)}
        projects = grid.copy()
        unplaced: list[tuple[int, int, int, int]] = []  # whole-GPU pods bound without a gpu-index
        for key, pod in self.pods.items():
            if not pod.bound or pod.node_name not in self.node_index:
                continue
            i = self.node_index[pod.node_name]
            q = qindex[self.queue_of[key]]
            p = pindex[self.project_of_ns.get(pod.namespace, NO_PROJECT)]
            if pod.is_fractional:
                g = pod.gpu_index[0] if pod.gpu_index else 0
                if 0 <= g < counts[i]:
                    blocks[i, g] += pod.gpu_blocks or 0
                    self.shares.setdefault((i, g), []).append(Share(q, pod.gpu_blocks or 0, key, p))
                continue
            if not pod.whole_gpus:
                continue
            if pod.gpu_index:
                for g in pod.gpu_index:
                    if 0 <= g < counts[i]:
                        grid[i, g] = q
                        projects[i, g] = p
                        self.cell_pods[(i, g)] = key
            else:
                unplaced.append((i, q, p, pod.whole_gpus))
        for i, q, p, want in unplaced:  # the annotation is missing: shown on the first free GPUs
            free = np.flatnonzero((grid[i] == FREE) & (blocks[i] == 0))[:want]
            grid[i, free] = q
            projects[i, free] = p
        self.grid, self.cell_project, self.blocks, self.unhealthy = grid, projects, blocks, unhealthy

    # -- lookups ------------------------------------------------------------------------------

    def project_of(self, pod_key: str) -> str | None:
        return self.project_of_ns.get(self.pods[pod_key].namespace)

    def queue_projects(self, queue: str) -> Sequence[str]:
        return self.queue_owners.get(queue, ())

