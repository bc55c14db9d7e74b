"""The discrete-event simulator: a trace of jobs on a modelled cluster, in virtual time.

Events (arrivals, completions, node outages) move the cluster forward; after them a scheduling
cycle builds a :class:`~gpufleet.domain.Snapshot` of the cluster as it is (nodes, running pods
bound with their exact GPUs, pending pods, pod groups, queues, config), has the engine decide it
-- an :class:`~gpufleet.engine.IncrementalEngine` per run, which decides exactly what ``schedule``,
the very function replay uses, decides for the snapshot, keeping its state between cycles -- and
applies its bindings and evictions. Nothing of the engine is copied here.

Cycles
    ``events`` mode (default): a cycle follows a batch of events (all events of one instant) when
    something changed and work is pending, but no sooner than ``cycle_interval_s`` after the
    previous cycle (events in between are batched into the next one). ``fixed`` mode: cycles
    at multiples of ``cycle_interval_s``, again only when something changed and work is pending.
    Cycles that cannot change anything (nothing pending, or nothing changed since the last cycle)
    are never run.

Interruptions
    An evicted job (reclaim or preempt) and the jobs on a node that fails or is reclaimed (spot)
    go back to their queue and keep only the work done up to their last checkpoint (every
    ``checkpoint_s`` seconds of run time since they last started; 0: no checkpoints). A down
    node is cordoned (``unschedulable``) until it returns.

The snapshot objects persist between cycles: a pod's domain object is made once when it is
queued and once when it binds, nodes change only when they go down or return, so a cycle costs
the engine's work plus two tuple builds.
"""

from __future__ import annotations

import bisect
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

import numpy as np

from gpufleet.domain import (
    ANNOTATION_CHECKPOINTED,
    ANNOTATION_GPU_BLOCKS,
    ANNOTATION_GPU_INDEX,
    ANNOTATION_MOVED_AT,
    GPU,
    MILLI,
    MILLI_PER_BLOCK,
    Decisions,
    EvictionReason,
    Node,
    NodeName,
    Pod,
    PodGroup,
    PodKey,
    PriorityClass,
    Queue,
    QueueName,
    SchedulerConfig,
    Snapshot,
)
from gpufleet.engine import IncrementalEngine
from gpufleet.policy import DrainNode, RunningPod, drain_plan
from gpufleet.sim.clock import VirtualClock
from gpufleet.sim.cluster import Occupancy, SimCluster, Typical
from gpufleet.sim.events import EventKind, EventQueue
from gpufleet.sim.failures import FailureModel, OutageKind, OutageStreams
from gpufleet.sim.jobs import NAMESPACE, SimJob, gang_of

__all__ = [
    "Allocation", "CycleMode", "JobRun", "JobStatus", "SimOptions", "SimResult", "SimSetup", "Timeline", "simulate",
]

_FIGURES = re.compile(r"\d+(?:\.\d+)?")  # the figures of a warning, which may change from cycle to cycle

Scheduler = Callable[[Snapshot], Decisions]
Progress = Callable[[float, int], None]  # (virtual time, jobs finished so far)

# Consecutive cycles at one instant after which the next one waits a second: a safety net against
# an eviction loop (none is known; each cycle here needs evictions to ask for another).
MAX_CYCLES_PER_INSTANT = 10


class CycleMode(str, Enum):
    EVENTS = "events"
    FIXED = "fixed"


class JobStatus(str, Enum):
    FUTURE = "future"  # not arrived yet
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    REJECTED = "rejected"  # can never fit this cluster (see jobs.py)


# The taint a simulated spot notice puts on its node (the AWS Node Termination Handler's).
SIM_SPOT_NOTICE = "aws-node-termination-handler/spot-itn"


class InterruptKind(str, Enum):
    RECLAIM = "reclaim"
    PREEMPT = "preempt"
    FAILURE = "failure"
    SPOT = "spot"
    MOVE = "move"  # consolidation (docs/semantics.md): stopped and started at once elsewhere


@dataclass(frozen=True, slots=True)
class SimOptions:
    cycle_interval_s: float = 0.0
    cycle_mode: CycleMode = CycleMode.EVENTS
    until_s: float | None = None
    seed: int = 0
    sample_step_s: float | None = None  # None: about 1,000 samples over the expected span


@dataclass(frozen=True, slots=True)
class SimSetup:
    cluster: SimCluster
    jobs: tuple[SimJob, ...]
    queues: tuple[Queue, ...] = ()
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    failures: FailureModel = field(default_factory=FailureModel)
    priority_classes: tuple[PriorityClass, ...] = ()


@dataclass(slots=True)
class JobRun:
    """What happened to one job: mutable while the simulation runs."""

    status: JobStatus = JobStatus.FUTURE
    saved_s: float = 0.0  # work kept by checkpoints (or done, once completed)
    run_start: float = 0.0
    epoch: int = 0  # bumped at every start: completions of an earlier run are stale
    first_start: float | None = None
    end_s: float | None = None
    queued_since: float = 0.0
    queued_s: float = 0.0  # time spent queued, all waits added up
    run_s: float = 0.0  # time spent running, all runs added up (closed runs only)
    interruptions: int = 0
    lost_s: float = 0.0  # run time whose work was lost
    cost: float = 0.0  # closed runs only
    placement: list[tuple[int, tuple[int, ...], int | None]] = field(default_factory=list)  # per pod


@dataclass(frozen=True, slots=True)
class Interruption:
    time_s: float
    job: int
    kind: InterruptKind
    gpu_milli: int
    lost_s: float  # run time lost (seconds; multiply by GPUs for GPU-seconds)


PodPlacement = tuple[int, tuple[int, ...], int | None]  # node index, GPU indices, blocks (fractional pods)


@dataclass(frozen=True, slots=True)
class Allocation:
    """One start of a job's pods, to its stop: what the usage ledger records (``sim/ledger_export.py``).

    ``end_s`` None: still running at the end. ``stopped_by`` None with an end: completed; else the
    interruption. ``preemptor``: the (job, pod index) an eviction made room for, when the engine named one.
    """

    job: int
    start_s: float
    placement: tuple[PodPlacement, ...]  # per pod of the job
    end_s: float | None = None
    stopped_by: InterruptKind | None = None
    preemptor: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class Samples:
    """The cluster on a regular grid of virtual times (for curves; exact sums come from the logs)."""

    time_s: np.ndarray
    allocated_milli: np.ndarray
    capacity_milli: np.ndarray
    stranded_milli: np.ndarray
    free_milli: np.ndarray
    queued_jobs: np.ndarray
    queued_milli: np.ndarray
    running_jobs: np.ndarray
    queue_usage_milli: np.ndarray  # [sample, queue]
    queue_queued_milli: np.ndarray  # [sample, queue]: GPUs its waiting jobs ask


@dataclass(frozen=True, slots=True)
class SimResult:
    setup: SimSetup
    options: SimOptions
    runs: tuple[JobRun, ...]
    end_s: float
    queue_names: tuple[QueueName, ...]
    # every start/stop of a job: (time, queue index, +/- GPU milli), in time order
    usage_log: tuple[np.ndarray, np.ndarray, np.ndarray]
    # every node up/down: (time, +/- GPU milli of capacity), in time order; starts with the initial capacity
    capacity_log: tuple[np.ndarray, np.ndarray]
    interruptions: tuple[Interruption, ...]
    samples: Samples
    typical: Typical
    cycles: int
    instants: int  # batches of events handled
    node_outages: dict[str, int]
    warnings: tuple[str, ...]
    engine_seconds: float  # wall time inside schedule(); not deterministic, kept out of the JSON
    open_cost: tuple[float, ...]  # per job: cost of the run still open at the end
    allocations: tuple[Allocation, ...] = ()  # every start of a job's pods, in start order
    # Fragmentation delay (docs/semantics.md, "Consolidation"): milli-GPU-seconds of whole-GPU jobs
    # queued while the free GPUs of the nodes up that are large enough for their largest pod could
    # hold them in total; ``free_delay_ms`` the same counting the free GPUs of every node up.
    fragmentation_delay_ms: float = 0.0
    free_delay_ms: float = 0.0
    moved_pods: int = 0


def _typical_pod(jobs: Sequence[SimJob]) -> Typical:
    """Median GPU pod of the workload (lower median per dimension): the fragmentation reference."""
    shapes = [p for j in jobs if not j.rejected for p in j.pods if p.gpu_milli > 0]
    if not shapes:
        return Typical(1, 0, 0, 0)

    def lower_median(values: list[int]) -> int:
        return sorted(values)[(len(values) - 1) // 2]

    gpu = lower_median([p.gpu_milli for p in shapes])
    cpu = lower_median([p.cpu for p in shapes])
    mem = lower_median([p.memory for p in shapes])
    if gpu < MILLI:
        return Typical(0, max(1, gpu // MILLI_PER_BLOCK), cpu, mem)
    return Typical(gpu // MILLI, 0, cpu, mem)


class Timeline:
    """One simulation run. ``run()`` once; the result carries everything the metrics need."""

    def __init__(
        self,
        setup: SimSetup,
        options: SimOptions,
        *,
        scheduler: Scheduler | None = None,
        progress: Progress | None = None,
    ) -> None:
        self.setup, self.options = setup, options
        # The engine's decisions for each snapshot, as schedule() makes them; by default an
        # IncrementalEngine of this run, which keeps the engine's state between its cycles.
        self.scheduler: Scheduler = scheduler if scheduler is not None else IncrementalEngine()
        self.progress = progress
        self.clock = VirtualClock(0.0)
        self.events = EventQueue()
        self.jobs = setup.jobs
        self.runs = [JobRun() for _ in setup.jobs]
        cluster = setup.cluster
        self.occupancy = Occupancy(cluster)
        self.base_nodes: list[Node] = [n.node for n in cluster.nodes]
        self.nodes: list[Node] = list(self.base_nodes)
        self.node_tuple: tuple[Node, ...] = tuple(self.nodes)
        self.node_index = cluster.index()
        self.node_epoch = [0] * len(self.nodes)
        self.node_down_until = [0.0] * len(self.nodes)
        self.nodes_down = 0
        self.node_jobs: list[set[int]] = [set() for _ in self.nodes]
        self.streams = OutageStreams(options.seed)
        # queues: every leaf queue and every queue the jobs use, in name order
        parents = {q.parent for q in setup.queues if q.parent}
        names = {q.name for q in setup.queues if q.name not in parents} | {j.queue for j in setup.jobs}
        self.queue_names: tuple[QueueName, ...] = tuple(sorted(names))
        self.queue_index = {q: i for i, q in enumerate(self.queue_names)}
        self.queue_usage = np.zeros(len(self.queue_names), dtype=np.int64)
        self.queue_queued = np.zeros(len(self.queue_names), dtype=np.int64)
        # Decayed usage per queue (docs/semantics.md, "Fairness over time"): GPU milli, exact for the
        # piecewise-constant usage (brought up to date before every change of it and at every cycle).
        self.decayed = np.zeros(len(self.queue_names), dtype=np.float64)
        self.decayed_t = 0.0
        leaves = set(self.queue_names)
        self.decayed_leaves = [(q, self.queue_index[q.name]) for q in setup.queues if q.name in leaves]
        # live snapshot objects
        self.pods: dict[PodKey, Pod] = {}
        self.groups: dict[str, PodGroup] = {}
        self.owner: dict[PodKey, tuple[int, int]] = {}
        self.queued: set[int] = set()
        self.queued_milli = 0
        self.running = 0
        self.running_finite = 0
        self.arrivals_left = 0
        self.finished = 0
        # Runtimes of the jobs completed so far, per queue, sorted: the queues' observed runtime
        # percentile the engine's reservations count on (never a running job's true duration).
        self.completed_runtimes: dict[str, list[float]] = {}
        self._observed: dict[str, float] | None = None
        self.dirty = False
        self.cycle_pending = False
        self.last_cycle = -math.inf
        self.same_instant_cycles = 0
        # logs
        self.u_t: list[float] = []
        self.u_q: list[int] = []
        self.u_d: list[int] = []
        self.c_t: list[float] = [0.0]
        self.c_d: list[int] = [self.occupancy.capacity_milli()]
        self.interruptions: list[Interruption] = []
        self.allocations: list[Allocation] = []
        self.open_allocation: dict[int, int] = {}  # job -> index of its running allocation
        self.outage_counts = {k.value: 0 for k in OutageKind}
        # Warnings by their words with the figures taken out -> (the first one, how many came):
        # a warning whose figures follow the capacity (over-committed quotas) comes every cycle.
        self.warnings: dict[str, tuple[str, int]] = {}
        self.cycles = 0
        self.instants = 0
        self.engine_seconds = 0.0
        self.typical = _typical_pod(setup.jobs)
        self._samples: list[tuple[float, int, int, int, int, int, int, int]] = []
        self._sample_usage: list[np.ndarray] = []
        self._sample_queued: list[np.ndarray] = []
        self.sample_step = self._sample_step()
        self.next_sample = 0.0
        # Consolidation: its jobs' pods say they checkpoint, and carry their moves' times.
        cons = setup.config.consolidation
        self.consolidating = cons is not None and cons.enabled
        self.moved_at: dict[int, list[float]] = {}
        self.moved_pods = 0
        # Queued whole-GPU jobs by (GPU milli, largest pod's) -> how many, for the fragmentation delay.
        self.queued_sizes: dict[tuple[int, int], int] = {}
        self.node_gpu_milli = self.occupancy.gpus_per_node * MILLI
        self.frag_ms = 0.0
        self.free_ms = 0.0
        self.frag_at = 0.0

    # -- setup ------------------------------------------------------------------------------

    def _sample_step(self) -> float:
        if self.options.sample_step_s:
            return self.options.sample_step_s
        horizon = self.options.until_s
        if horizon is None:
            horizon = max((j.submit_s + (j.duration_s or 0.0) for j in self.jobs), default=0.0)
        return max(1.0, horizon / 1000.0)

    def _schedule_initial_events(self) -> None:
        for job in self.jobs:
            self.events.push(job.submit_s, EventKind.ARRIVAL, job.idx)
        self.arrivals_left = len(self.jobs)
        model = self.setup.failures
        for outage in model.outages:
            node = self.node_index.get(outage.node)
            if node is None:
                raise KeyError(outage.node)
            self.events.push(outage.at_s, EventKind.NODE_DOWN, node, detail=outage.for_s, tag=outage.kind.value)
        for i, sim_node in enumerate(self.setup.cluster.nodes):
            if model.mtbf_s:
                gap = self.streams.next_gap(i, OutageStreams.FAILURE_STREAM, model.mtbf_s)
                self.events.push(gap, EventKind.NODE_DOWN, i, detail=model.repair_s, tag="random-failure")
            if model.spot_rate_per_hour and sim_node.spot:
                gap = self.streams.next_gap(i, OutageStreams.SPOT_STREAM, 3600.0 / model.spot_rate_per_hour)
                self.events.push(gap, EventKind.NODE_DOWN, i, detail=model.spot_down_s, tag="random-spot")

    # -- the loop ---------------------------------------------------------------------------

    def _busy(self) -> bool:
        """Whether jobs will still arrive, end or be scheduled."""
        return bool(self.arrivals_left or self.running_finite or self.cycle_pending)

    def _live(self) -> bool:
        """Whether anything can still happen to the jobs: when not busy, only a node coming back
        for queued jobs can (new random outages are then ignored, so that the run ends)."""
        return self._busy() or (bool(self.queued) and self.nodes_down > 0)

    def run(self) -> SimResult:
        self._schedule_initial_events()
        until = self.options.until_s
        stopped_at_until = False
        while self.events and self._live():
            t = self.events.peek_time()
            assert t is not None
            if until is not None and t > until:
                stopped_at_until = True
                break
            self._sample_until(t)
            self._accrue(t)
            self.clock.advance_to(t)
            self.instants += 1
            while self.events.peek_time() == t:
                self._handle(t)
            self._maybe_plan_cycle(t)
            if self.progress is not None and self.instants % 256 == 0:
                self.progress(t, self.finished)
        end = until if stopped_at_until and until is not None else self.clock.now
        self._sample_until(end, inclusive=True)
        self._accrue(end)
        return self._result(end)

    def _accrue(self, t: float) -> None:
        """Add the fragmentation delay from the last instant to ``t`` (the state constant between)."""
        dt = t - self.frag_at
        if dt > 0 and self.queued_sizes:
            free = self.occupancy.free_milli()
            total = int(free.sum())
            large: dict[int, int] = {}  # free GPUs on the nodes at least this large
            for (m, pod), c in self.queued_sizes.items():
                if m > total:
                    continue
                self.free_ms += m * c * dt
                if pod not in large:
                    large[pod] = int(free[self.node_gpu_milli >= pod].sum())
                if m <= large[pod]:
                    self.frag_ms += m * c * dt
        self.frag_at = max(self.frag_at, t)

    def _handle(self, t: float) -> None:
        ev = self.events.pop()
        kind = ev.kind
        if kind is EventKind.COMPLETION:
            run = self.runs[ev.subject]
            if run.status is JobStatus.RUNNING and run.epoch == ev.epoch:
                self._complete(ev.subject, t)
        elif kind is EventKind.ARRIVAL:
            self.arrivals_left -= 1
            self._arrive(ev.subject, t)
        elif kind is EventKind.NODE_DOWN:
            if self._busy() or not ev.tag.startswith("random-"):  # see _live
                self._node_down(ev.subject, t, ev.detail, ev.tag)
        elif kind is EventKind.NODE_UP:
            if ev.epoch == self.node_epoch[ev.subject]:
                self._node_up(ev.subject, t)
        else:
            self.cycle_pending = False
            if self.dirty and self.queued:
                self._cycle(t)

    def _maybe_plan_cycle(self, t: float) -> None:
        if self.cycle_pending or not self.dirty or not self.queued:
            return
        interval = self.options.cycle_interval_s
        if self.options.cycle_mode is CycleMode.FIXED:
            at = math.ceil(t / interval) * interval if interval > 0 else t
        else:
            at = max(t, self.last_cycle + interval)
        if at == t and self.last_cycle == t:
            self.same_instant_cycles += 1
            if self.same_instant_cycles >= MAX_CYCLES_PER_INSTANT:
                at = t + max(interval, 1.0)
        self.events.push(at, EventKind.CYCLE)
        self.cycle_pending = True

    # -- jobs -------------------------------------------------------------------------------

    def _arrive(self, j: int, t: float) -> None:
        job, run = self.jobs[j], self.runs[j]
        if job.rejected:
            run.status, run.end_s = JobStatus.REJECTED, t
            self.finished += 1
            return
        for m, name in enumerate(job.pod_names):
            self.owner[PodKey(f"{NAMESPACE}/{name}")] = (j, m)
        if job.gang:
            self.groups[job.name] = gang_of(job)
        self._enqueue(j, t)

    def _enqueue(self, j: int, t: float) -> None:
        job, run = self.jobs[j], self.runs[j]
        run.status, run.queued_since = JobStatus.QUEUED, t
        group = job.name if job.gang else None
        for name, shape in zip(job.pod_names, job.pods, strict=True):
            pod = Pod(
                namespace=NAMESPACE,
                name=name,
                requests=shape.requests,
                gpu_blocks=shape.blocks,
                priority=job.priority,
                queue_label=job.queue,
                group_label=group,
                creation_time=job.submit_s,
                affinity=job.affinity,
            )
            self.pods[pod.key] = pod
        self.queued.add(j)
        self.queued_milli += job.gpu_milli
        self.queue_queued[self.queue_index[job.queue]] += job.gpu_milli
        if job.gpu_milli >= MILLI:
            size = (job.gpu_milli, max(p.gpu_milli for p in job.pods))
            self.queued_sizes[size] = self.queued_sizes.get(size, 0) + 1
        self.dirty = True

    def _start(self, j: int, t: float, placement: list[tuple[int, tuple[int, ...], int | None]]) -> None:
        job, run = self.jobs[j], self.runs[j]
        self.queued.discard(j)
        self.queued_milli -= job.gpu_milli
        self.queue_queued[self.queue_index[job.queue]] -= job.gpu_milli
        if job.gpu_milli >= MILLI:
            size = (job.gpu_milli, max(p.gpu_milli for p in job.pods))
            left = self.queued_sizes[size] - 1
            if left:
                self.queued_sizes[size] = left
            else:
                del self.queued_sizes[size]
        run.queued_s += t - run.queued_since
        run.status, run.run_start, run.placement = JobStatus.RUNNING, t, placement
        run.epoch += 1
        if run.first_start is None:
            run.first_start = t
        self.open_allocation[j] = len(self.allocations)
        self.allocations.append(Allocation(j, t, tuple(placement)))
        group = job.name if job.gang else None
        for (node, gpus, blocks), name, shape in zip(placement, job.pod_names, job.pods, strict=True):
            self.occupancy.take(node, gpus, blocks, shape.cpu, shape.memory)
            self.node_jobs[node].add(j)
            annotations = {ANNOTATION_GPU_INDEX: ",".join(map(str, gpus))}
            if blocks is not None:
                annotations[ANNOTATION_GPU_BLOCKS] = str(blocks)
            if self.consolidating:
                if job.checkpoint_s > 0:
                    annotations[ANNOTATION_CHECKPOINTED] = "true"
                if j in self.moved_at:
                    annotations[ANNOTATION_MOVED_AT] = ",".join(map(repr, self.moved_at[j]))
            pod = Pod(
                namespace=NAMESPACE,
                name=name,
                annotations=annotations,
                requests=shape.requests,
                gpu_blocks=blocks,
                priority=job.priority,
                queue_label=job.queue,
                group_label=group,
                node_name=NodeName(self.nodes[node].name),
                phase="Running",
                creation_time=job.submit_s,
                start_time=t,
                affinity=job.affinity,
                gpu_index=gpus,
            )
            self.pods[pod.key] = pod
        q = self.queue_index[job.queue]
        self._decay_to(t)
        self.queue_usage[q] += job.gpu_milli
        self.u_t.append(t)
        self.u_q.append(q)
        self.u_d.append(job.gpu_milli)
        self.running += 1
        if job.duration_s is not None:
            self.running_finite += 1
            remaining = max(0.0, job.duration_s - run.saved_s)
            self.events.push(t + remaining, EventKind.COMPLETION, j, epoch=run.epoch)

    def _stop(self, j: int, t: float, by: InterruptKind | None = None,
              preemptor: tuple[int, int] | None = None) -> float:
        """Close the current run at ``t`` (``by`` None: completed): free its capacity, account it;
        returns its length."""
        job, run = self.jobs[j], self.runs[j]
        a = self.open_allocation.pop(j)
        opened = self.allocations[a]
        self.allocations[a] = Allocation(j, opened.start_s, opened.placement, t, by, preemptor)
        elapsed = t - run.run_start
        run.run_s += elapsed
        price = self.occupancy.price_per_gpu_s
        for (node, gpus, blocks), shape in zip(run.placement, job.pods, strict=True):
            self.occupancy.release(node, gpus, blocks, shape.cpu, shape.memory)
            self.node_jobs[node].discard(j)
            run.cost += shape.gpu_milli / MILLI * price[node] * elapsed
        run.placement = []
        q = self.queue_index[job.queue]
        self._decay_to(t)
        self.queue_usage[q] -= job.gpu_milli
        self.u_t.append(t)
        self.u_q.append(q)
        self.u_d.append(-job.gpu_milli)
        self.running -= 1
        if job.duration_s is not None:
            self.running_finite -= 1
        self.dirty = True
        return elapsed

    def _complete(self, j: int, t: float) -> None:
        job, run = self.jobs[j], self.runs[j]
        self._stop(j, t)
        run.saved_s = job.duration_s if job.duration_s is not None else run.saved_s
        run.status, run.end_s = JobStatus.COMPLETED, t
        if job.duration_s is not None and self.setup.config.reservation is not None:
            bisect.insort(self.completed_runtimes.setdefault(str(job.queue), []), job.duration_s)
            self._observed = None
        for name in job.pod_names:
            key = PodKey(f"{NAMESPACE}/{name}")
            del self.pods[key]
            del self.owner[key]
        self.groups.pop(job.name, None)
        self.finished += 1

    def _interrupt(self, j: int, t: float, kind: InterruptKind, preemptor: tuple[int, int] | None = None,
                   checkpointed: bool = False) -> None:
        """Stop a running job, keep its work up to the last checkpoint (``checkpointed``: it wrote one
        now, in its grace period), and queue it again."""
        job, run = self.jobs[j], self.runs[j]
        elapsed = self._stop(j, t, kind, preemptor)
        ckpt = job.checkpoint_s
        periodic = math.floor(elapsed / ckpt) * ckpt if ckpt > 0 else 0.0
        kept = elapsed if checkpointed else periodic
        lost = elapsed - kept
        run.saved_s += kept
        run.lost_s += lost
        run.interruptions += 1
        run.epoch += 1
        self.interruptions.append(Interruption(t, j, kind, job.gpu_milli, lost))
        self._enqueue(j, t)

    # -- nodes ------------------------------------------------------------------------------

    def _node_down(self, i: int, t: float, length: float, tag: str) -> None:
        if self.base_nodes[i].unschedulable:
            return  # cordoned in the cluster spec: it stays out, outages or not
        kind = OutageKind(tag.removeprefix("random-"))
        model = self.setup.failures
        if tag == "random-failure" and model.mtbf_s:
            gap = self.streams.next_gap(i, OutageStreams.FAILURE_STREAM, model.mtbf_s)
            self.events.push(t + length + gap, EventKind.NODE_DOWN, i, detail=length, tag=tag)
        elif tag == "random-spot" and model.spot_rate_per_hour:
            gap = self.streams.next_gap(i, OutageStreams.SPOT_STREAM, 3600.0 / model.spot_rate_per_hour)
            self.events.push(t + length + gap, EventKind.NODE_DOWN, i, detail=length, tag=tag)
        self.outage_counts[kind.value] += 1
        notice = model.spot_notice_s if kind is OutageKind.SPOT else 0.0
        back = t + notice + length  # with a notice, t is the notice: the node is closed from then on
        was_down = not self.occupancy.up[i]
        if was_down and back <= self.node_down_until[i]:
            return  # inside an outage that lasts longer
        self.node_down_until[i] = back
        self.node_epoch[i] += 1  # an earlier NODE_UP of this node is now stale
        self.events.push(back, EventKind.NODE_UP, i, epoch=self.node_epoch[i])
        if was_down:
            return  # the outage is extended
        self.nodes_down += 1
        reason = InterruptKind.FAILURE if kind is OutageKind.FAILURE else InterruptKind.SPOT
        if notice > 0:
            checkpointed = model.grace_s <= notice
            for j in self._drained(i):
                self._interrupt(j, t, reason, checkpointed=checkpointed)
        else:
            for j in sorted(self.node_jobs[i]):
                self._interrupt(j, t, reason)
        before = self.occupancy.capacity_milli()
        self.occupancy.set_up(i, False)
        self._set_node(i, self._cordoned(self.base_nodes[i]))
        self.c_t.append(t)
        self.c_d.append(self.occupancy.capacity_milli() - before)
        self.dirty = True

    def _drained(self, i: int) -> list[int]:
        """The jobs a spot notice on node ``i`` drains: the controller's rule (gpufleet.policy.drain_plan)
        on the node tainted with the AWS Node Termination Handler's notice and the jobs on it."""
        name = self.base_nodes[i].name
        notice = DrainNode(name, frozenset({SIM_SPOT_NOTICE}), spot=True)  # the rule reads only this of it
        config = replace(self.setup.config, interruption_keys=(SIM_SPOT_NOTICE,))
        running: list[RunningPod] = []
        by_gang: dict[str, int] = {}
        for j in self.node_jobs[i]:
            job = self.jobs[j]
            by_gang[job.name] = j
            for (node, gpus, _), pod in zip(self.runs[j].placement, job.pod_names, strict=True):
                running.append(RunningPod(PodKey(f"{NAMESPACE}/{pod}"), job.name, self.nodes[node].name, gpus))
        plan = drain_plan([notice], running, config)
        return sorted(by_gang[d.gang] for d in plan.drains)

    def _node_up(self, i: int, t: float) -> None:
        self.nodes_down -= 1
        before = self.occupancy.capacity_milli()
        self.occupancy.set_up(i, True)
        self.node_down_until[i] = t
        self._set_node(i, self.base_nodes[i])
        self.c_t.append(t)
        self.c_d.append(self.occupancy.capacity_milli() - before)
        self.dirty = True

    @staticmethod
    def _cordoned(node: Node) -> Node:
        return Node(
            name=node.name,
            labels=node.labels,
            annotations=node.annotations,
            allocatable=node.allocatable,
            taints=node.taints,
            unschedulable=True,
            unhealthy_gpus=node.unhealthy_gpus,
            nvlink_domains=node.nvlink_domains,
            gpu_memory_mib=node.gpu_memory_mib,
            gpu_product=node.gpu_product,
        )

    def _set_node(self, i: int, node: Node) -> None:
        self.nodes[i] = node
        self.node_tuple = tuple(self.nodes)

    # -- cycles -----------------------------------------------------------------------------

    def _decay_to(self, t: float) -> None:
        """Bring the decayed usage to ``t`` with the usage since the last time (constant since)."""
        half_life = self.setup.config.usage_half_life
        if half_life <= 0 or t <= self.decayed_t:
            return
        d = 2.0 ** (-(t - self.decayed_t) / half_life)
        self.decayed = self.decayed * d + self.queue_usage * (1.0 - d)
        self.decayed_t = t

    def _queues(self) -> tuple[Queue, ...]:
        """The queues with their decayed usage as of now, as the controller writes it in their status."""
        if self.setup.config.usage_half_life <= 0:
            return self.setup.queues
        self._decay_to(self.clock.now)
        out = {q.name: q for q in self.setup.queues}
        for q, i in self.decayed_leaves:
            out[q.name] = replace(q, decayed_usage={GPU: int(self.decayed[i])}, decayed_at=self.clock.now)
        return tuple(out.values())

    def snapshot(self) -> Snapshot:
        """The cluster as the engine sees it now."""
        return Snapshot(
            nodes=self.node_tuple,
            pods=tuple(self.pods.values()),
            priority_classes=self.setup.priority_classes,
            queues=self._queues(),
            pod_groups=tuple(self.groups.values()),
            config=self.config_now(),
        )

    def config_now(self) -> SchedulerConfig:
        """The config at virtual time (docs/semantics.md), with the queues' observed runtimes when
        reservations are on: per queue, the configured percentile (nearest rank) of its completed jobs'
        runtimes."""
        config = self.setup.config
        if config.reservation is None:
            return replace(config, now=self.clock.now)
        if self._observed is None:
            pct = config.reservation.percentile
            self._observed = {q: done[max(0, math.ceil(pct / 100 * len(done)) - 1)]
                              for q, done in sorted(self.completed_runtimes.items())}
        return replace(config, now=self.clock.now,
                       reservation=replace(config.reservation, observed_runtime=self._observed))

    def _cycle(self, t: float) -> None:
        if self.last_cycle != t:
            self.same_instant_cycles = 0
        self.last_cycle = t
        self.cycles += 1
        self.dirty = False
        started = time.perf_counter()
        decisions = self.scheduler(self.snapshot())
        self.engine_seconds += time.perf_counter() - started
        for warning in decisions.warnings:
            key = _FIGURES.sub("#", warning)
            first, count = self.warnings.get(key, (warning, 0))
            self.warnings[key] = (first, count + 1)
        evicted: dict[int, tuple[InterruptKind, tuple[int, int] | None]] = {}
        for e in decisions.evictions:
            j = self.owner[e.pod][0]
            kind = InterruptKind.RECLAIM if e.reason is EvictionReason.RECLAIM else InterruptKind.PREEMPT
            evicted.setdefault(j, (kind, self.owner.get(e.by)))
        for j in sorted(evicted):
            if self.runs[j].status is not JobStatus.RUNNING:
                raise RuntimeError(f"engine evicted {self.jobs[j].name}, which is not running")
            self._interrupt(j, t, *evicted[j])
        if decisions.moves:
            self._move(t, decisions)
        bound: dict[int, dict[int, tuple[int, tuple[int, ...], int | None]]] = {}
        for b in decisions.bindings:
            j, m = self.owner[b.pod]
            bound.setdefault(j, {})[m] = (self.node_index[b.node], b.gpus, b.gpu_blocks)
        for j in sorted(bound):
            members = bound[j]
            job = self.jobs[j]
            if len(members) != len(job.pods) or self.runs[j].status is not JobStatus.QUEUED:
                raise RuntimeError(f"engine bound {len(members)} of the {len(job.pods)} pods of {job.name}")
            self._start(j, t, [members[m] for m in range(len(job.pods))])

    def _move(self, t: float, decisions: Decisions) -> None:
        """Carry out the engine's moves: each moved job stops (keeping its work up to its last
        checkpoint, as any interruption) and starts at once on its planned place; all stop first."""
        moved: dict[int, dict[int, tuple[int, tuple[int, ...], int | None]]] = {}
        for mv in decisions.moves or ():
            j, m = self.owner[mv.pod]
            moved.setdefault(j, {})[m] = (self.node_index[mv.to_node], mv.to_gpus, mv.to_blocks)
        for j in sorted(moved):
            job = self.jobs[j]
            if len(moved[j]) != len(job.pods) or self.runs[j].status is not JobStatus.RUNNING:
                raise RuntimeError(f"engine moved {len(moved[j])} of the {len(job.pods)} pods of {job.name}")
            self._interrupt(j, t, InterruptKind.MOVE)
            self.moved_at.setdefault(j, []).append(t)
            self.moved_pods += len(job.pods)
        for j in sorted(moved):
            self._start(j, t, [moved[j][m] for m in range(len(self.jobs[j].pods))])

    # -- samples and result -----------------------------------------------------------------

    def _sample_until(self, t: float, inclusive: bool = False) -> None:
        """Record the state (constant since the last instant) at every grid time before ``t``."""
        while self.next_sample < t or (inclusive and self.next_sample <= t):
            occ = self.occupancy
            self._samples.append((
                self.next_sample,
                int(self.queue_usage.sum()),
                occ.capacity_milli(),
                occ.stranded_milli(self.typical),
                int(occ.free_milli().sum()),
                len(self.queued),
                self.queued_milli,
                self.running,
            ))
            self._sample_usage.append(self.queue_usage.copy())
            self._sample_queued.append(self.queue_queued.copy())
            self.next_sample += self.sample_step

    def _result(self, end: float) -> SimResult:
        cols = list(zip(*self._samples, strict=True)) if self._samples else [()] * 8
        usage = np.array(self._sample_usage, dtype=np.int64).reshape(len(self._samples), len(self.queue_names))
        samples = Samples(
            time_s=np.array(cols[0], dtype=np.float64),
            allocated_milli=np.array(cols[1], dtype=np.int64),
            capacity_milli=np.array(cols[2], dtype=np.int64),
            stranded_milli=np.array(cols[3], dtype=np.int64),
            free_milli=np.array(cols[4], dtype=np.int64),
            queued_jobs=np.array(cols[5], dtype=np.int64),
            queued_milli=np.array(cols[6], dtype=np.int64),
            running_jobs=np.array(cols[7], dtype=np.int64),
            queue_usage_milli=usage,
            queue_queued_milli=np.array(self._sample_queued, dtype=np.int64).reshape(usage.shape),
        )
        price = self.occupancy.price_per_gpu_s
        open_cost = []
        for job, run in zip(self.jobs, self.runs, strict=True):
            cost = 0.0
            if run.status is JobStatus.RUNNING:
                elapsed = end - run.run_start
                cost = sum(s.gpu_milli / MILLI * price[n] * elapsed for (n, _, _), s in zip(run.placement, job.pods,
                                                                                          strict=True))
            open_cost.append(cost)
        return SimResult(
            setup=self.setup,
            options=self.options,
            runs=tuple(self.runs),
            end_s=end,
            queue_names=self.queue_names,
            usage_log=(np.array(self.u_t, dtype=np.float64), np.array(self.u_q, dtype=np.int64),
                       np.array(self.u_d, dtype=np.int64)),
            capacity_log=(np.array(self.c_t, dtype=np.float64), np.array(self.c_d, dtype=np.int64)),
            interruptions=tuple(self.interruptions),
            samples=samples,
            typical=self.typical,
            cycles=self.cycles,
            instants=self.instants,
            node_outages=dict(self.outage_counts),
            warnings=tuple(first if count == 1 else f"{first} (and in {count - 1} more cycles)"
                           for first, count in self.warnings.values()),
            engine_seconds=self.engine_seconds,
            open_cost=tuple(open_cost),
            allocations=tuple(self.allocations),
            fragmentation_delay_ms=self.frag_ms,
            free_delay_ms=self.free_ms,
            moved_pods=self.moved_pods,
        )


def simulate(
    setup: SimSetup,
    options: SimOptions,
    *,
    scheduler: Scheduler | None = None,
    progress: Progress | None = None,
) -> SimResult:
    """Run one simulation to the end of the trace (or ``options.until_s``). ``scheduler``: what
    decides each cycle (default: a fresh :class:`~gpufleet.engine.IncrementalEngine`, which decides
    as ``schedule`` does)."""
    return Timeline(setup, options, scheduler=scheduler, progress=progress).run()
