"""The scheduler controller: informers feed the engine, the engine's decisions go back to the API.

One **cycle** takes a snapshot of the informers' cache (converted as ``gpufleet replay`` converts a
file, see :mod:`gpufleet.kube.controller.convert`; each object once per change, unchanged ones keep
their domain objects between cycles), calls the one engine (:func:`gpufleet.engine.schedule`,
through one :class:`~gpufleet.engine.IncrementalEngine` kept for the controller's life) and carries
its decisions out (:mod:`gpufleet.kube.controller.binder`). Cycles run when something that can
change a decision changed (batched: at most one per ``min_interval``), when a timer is due, and
every ``resync`` seconds. Only the leader (:mod:`gpufleet.kube.controller.leader`) runs them.

Preemption. The engine decides evictions and the bindings they make room for in one call, as a
replay does. The API cannot do that at once: an evicted pod terminates in its own time, or a
PodDisruptionBudget refuses its eviction (429). So the gang that caused evictions, and any gang
placed on a node where a victim still runs, becomes a **plan**: its placement is kept (the next
snapshots show its pods on their nodes and its victims as gone, exactly the replay's view, so
no other cycle gives that room away) and it is bound once its victims are gone. A refused
eviction is asked again every ``eviction_retry`` seconds, and the preemptor's Event says why it
waits. A plan not carried out within ``plan_timeout`` is dropped, and the engine decides afresh.

Restarts. Nothing is kept outside the API server: the informers rebuild the cache; a pod whose
annotations were written but whose Binding never went through is simply pending again (the
engine decides it anew and the annotations are rewritten before its Binding); a Binding whose
answer was lost is recognised by its 409 (already on that node). Plans and refused evictions
are re-derived by the next cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from gpufleet.adapters import DeviceCache, DeviceView, resolve_devices
from gpufleet.domain import (
    ANNOTATION_QUEUED_AT,
    LABEL_GPU_MEMORY,
    LABEL_POD_GROUP,
    MILLI,
    SCHEDULER_NAME,
    AdmissionMode,
    Binding,
    Decisions,
    Eviction,
    EvictionReason,
    PendingPod,
    PodKey,
    ResourceClaim,
    SchedulerConfig,
    Snapshot,
)
from gpufleet.domain.nodes import TooManyGpus
from gpufleet.domain.selectors import namespace_labels
from gpufleet.engine import IncrementalEngine, Screened, screen
from gpufleet.kube.client.port import ApiError, Clock, ClusterApi, Kind
from gpufleet.kube.controller.accounting import (
    Accountant,
    AccountingConfig,
    LedgerBackend,
    bound_time,
    format_time,
    stamp,
)
from gpufleet.kube.controller.binder import Binder, BindOutcome, EvictOutcome, NotLeader
from gpufleet.kube.controller.claim_writes import ClaimContext, release_status
from gpufleet.kube.controller.convert import (
    CONVERTED_KINDS,
    ConversionError,
    Overlay,
    SnapshotView,
    build_snapshot,
    check_snapshot,
    convert_object,
    gang_id,
    label_selector_matches,
    relevant_change,
)
from gpufleet.kube.controller.decayed_usage import DecayedUsage
from gpufleet.kube.controller.drain import DrainInputs, gang_age
from gpufleet.kube.controller.events import EventRecorder, PodEvent, pod_uid
from gpufleet.kube.controller.grouper import GroupStep, PodGrouper
from gpufleet.kube.controller.informers import INFORMED_KINDS, Informer, ObjectCache, collector_paused
from gpufleet.kube.controller.leader import LeaderElector, LeaseConfig
from gpufleet.kube.controller.lifecycle import EVICTION, BindStage, EvictEvent, EvictState
from gpufleet.kube.controller.metrics import ControllerMetrics
from gpufleet.kube.controller.metrics_queues import GpuUsageFacts, completion_seconds, cycle_figures, runtime_seconds
from gpufleet.kube.controller.metrics_usage import TelemetryUsage
from gpufleet.kube.controller.moves import move_evictions, moved_at_writes, target_text
from gpufleet.kube.controller.observed_runtime import ObservedRuntimes
from gpufleet.kube.controller.pod_status import marked_unschedulable, pending_status_patch
from gpufleet.kube.controller.reporting import (
    EndState,
    GroupFacts,
    end_state,
    group_status,
    project_status,
    queue_reports,
    queue_status,
    reservations_by_queue,
    same_status,
)
from gpufleet.kube.controller.status import PodGroupStatus, ProjectStatus, QueueStatus
from gpufleet.policy import DRAIN_REASONS, DrainPlan, GangDrain, IdleStep, IdleWatch, ProjectIndex, idle_actions
from gpufleet.policy.grouping import NotAdmitted, OwnerRef, SuspendedOwner, not_admitted, owners_to_unsuspend
from gpufleet.telemetry import TelemetryPage, TelemetrySource

__all__ = ["Controller", "ControllerConfig", "CycleResult", "Plan", "Victim"]

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]


@dataclass(frozen=True)
class ControllerConfig:
    identity: str
    lease: LeaseConfig | None = None  # None: no leader election (a single replica)
    min_interval: float = 1.0  # at least this long between the starts of two cycles
    resync: float = 60.0  # a cycle at least this often, changes or not
    concurrency: int = 64  # API calls in flight at once
    plan_timeout: float = 120.0
    eviction_retry: float = 10.0
    engine_in_thread: bool = True  # keep the event loop (watches, lease renewals) alive meanwhile
    # patch: annotate each pod, then post its Binding (two calls, the pod is "in flight" between);
    # binding: the Binding carries the annotations, which the API server writes with nodeName (one call).
    annotate_via: str = "patch"
    # pods/status patches (PodScheduled=False, nominatedNodeName) per cycle, after the bindings;
    # pods not yet marked first, the rest in later cycles.
    pod_status_batch: int = 1000
    # A Scheduled Event per bound pod, posted in the background after the cycle's bindings.
    scheduled_events: bool = True
    # The pod-grouper (kube.controller.grouper): PodGroups and pod labels derived from workload owners.
    group_workloads: bool = True

_RETRIED = (EvictState.BLOCKED, EvictState.FAILED)  # evictions asked again after eviction_retry


# Bindings at once from which the cyclic garbage collector waits until they are done.
PAUSE_GC_FROM = 1000


@dataclass
class Victim:
    eviction: Eviction
    node: str
    state: EvictState  # see gpufleet.kube.controller.lifecycle.EVICTION
    message: str = ""
    next_try: float = 0.0
    why: str = ""  # a drain's reason in words, for its Event


@dataclass
class Plan:
    gang: str
    bindings: tuple[Binding, ...]
    victims: frozenset[PodKey]  # the evictions this gang caused
    created: float
    waiting: str = ""  # what it waits for, for its Event


@dataclass(frozen=True)
class CycleResult:
    decisions: Decisions
    bound: tuple[PodKey, ...] = ()
    failed: Mapping[PodKey, str] = field(default_factory=dict)
    evicted: tuple[EvictOutcome, ...] = ()
    planned: tuple[str, ...] = ()
    skipped: str = ""  # why nothing was decided (not leader, invalid snapshot)


def _pod_key(obj: Mapping[str, Any]) -> PodKey:
    meta = obj.get("metadata") or {}
    return PodKey(f"{meta.get('namespace') or 'default'}/{meta.get('name')}")


@dataclass
class _Reservation:
    """The places of an admitted owner's virtual pods, held until its real pods exist."""

    pods: Mapping[PodKey, JsonDict]  # the virtual pods, shown bound at their bindings
    bindings: tuple[Binding, ...]
    gangs: Mapping[str, int]  # gang id (namespace/group) of each of its groups -> its min_member
    created: float
    handed: bool = False  # its real pods exist: the places are theirs, held no more


def _admissions(view: SnapshotView, decisions: Decisions, virtual: frozenset[PodKey],
                suspended: Sequence[SuspendedOwner]) -> tuple[Decisions, tuple[OwnerRef, ...], tuple[NotAdmitted, ...]]:
    """The decisions without the virtual pods (docs/semantics-notes.md, "Admission by suspension"),
    the suspended owners whose every gang was placed, and why each other one stays suspended. Virtual
    pods never preempt: a gang the engine placed only by evicting for it is not placed (its evictions
    are dropped with it)."""
    preempting = {gang_id(view.pods[e.by]) for e in decisions.evictions if e.by in virtual and e.by in view.pods}
    placed = {str(b.pod).partition("/")[2] for b in decisions.bindings
              if b.pod in virtual and b.pod in view.pods and gang_id(view.pods[b.pod]) not in preempting}
    pending = {str(p.pod).partition("/")[2]: p.reason for p in decisions.pending if p.pod in virtual}
    pending.update((str(b.pod).partition("/")[2], _ONLY_BY_PREEMPTING) for b in decisions.bindings
                   if b.pod in virtual and b.pod in view.pods and gang_id(view.pods[b.pod]) in preempting)
    kept = replace(decisions,
                   bindings=tuple(b for b in decisions.bindings if b.pod not in virtual),
                   evictions=tuple(e for e in decisions.evictions if e.by not in virtual and e.pod not in virtual),
                   pending=tuple(p for p in decisions.pending if p.pod not in virtual))
    return kept, owners_to_unsuspend(suspended, placed), not_admitted(suspended, placed, pending)


_ONLY_BY_PREEMPTING = "placeable only by preempting running pods (a suspended owner is admitted without preemption)"


def _without(view: SnapshotView, keys: frozenset[PodKey]) -> SnapshotView:
    """``view`` without the pods ``keys`` (the virtual ones, once the engine has decided)."""
    snapshot = replace(view.snapshot, pods=tuple(p for p in view.snapshot.pods if p.key not in keys))
    return replace(view, snapshot=snapshot, pods={k: p for k, p in view.pods.items() if k not in keys},
                   rejected={k: v for k, v in view.rejected.items() if k not in keys})


def _node_of(obj: Mapping[str, Any] | None) -> str | None:
    if obj is None:
        return None
    node = (obj.get("spec") or {}).get("nodeName")
    return str(node) if node else None


class Controller:
    def __init__(
        self,
        api: ClusterApi,
        clock: Clock,
        config: ControllerConfig,
        metrics: ControllerMetrics | None = None,
        engine: Callable[[Snapshot], Decisions] | None = None,
        ledger: LedgerBackend | None = None,
        accounting: AccountingConfig | None = None,
        telemetry: TelemetrySource | None = None,
    ) -> None:
        self.api = api
        # The engine: called like schedule(snapshot), once per cycle, with this cluster's successive
        # snapshots (an IncrementalEngine keeps what it can between them).
        self.engine: Callable[[Snapshot], Decisions] = engine if engine is not None else IncrementalEngine()
        self.clock = clock
        self.decayed_usage = DecayedUsage()  # the Queues' decayed usage (kube/controller/decayed_usage.py)
        self.observed_runtime = ObservedRuntimes()  # the queues' runtimes (kube/controller/observed_runtime.py)
        self.config = config
        self.metrics = metrics if metrics is not None else ControllerMetrics()
        self.cache = ObjectCache(INFORMED_KINDS)
        self.cache.hooks.append(self._on_change)
        self.elector = (
            LeaderElector(api, clock, config.lease, self._on_leadership, self.metrics) if config.lease else None
        )
        if self.elector is None:
            self.metrics.leader.set(1)
        self.binder = Binder(api, clock, self.is_leader, self.metrics, config.concurrency,
                             annotate_via=config.annotate_via, gpu_memory_of=self._gpu_memory_of,
                             cached=self.cache.get)
        self.events = EventRecorder(api, clock, config.identity, self.metrics)
        self.plans: dict[str, Plan] = {}
        self.victims: dict[PodKey, Victim] = {}
        self.reserved: dict[str, _Reservation] = {}  # by owner uid: places held for admitted owners
        # Suspended owners left suspended, by uid, and the pending reasons of their PodGroups (by
        # namespace/name); the note of the GangNotAdmitted Event last written for each.
        self.not_admitted: dict[str, NotAdmitted] = {}
        self.suspended_reasons: dict[str, str] = {}
        self._told_not_admitted: dict[str, str] = {}
        # Draining nodes and failed GPUs (docs/semantics-notes.md): the rule's input kept between cycles,
        # and this cycle's plan.
        self._drain_inputs = DrainInputs()
        self._drain = DrainPlan()
        # The DRA objects' reading kept between cycles, for the unchanged objects the cache keeps
        # (adapters/devices.py, DeviceCache).
        self._device_cache = DeviceCache()
        self.cycles = 0
        self.last: CycleResult | None = None
        self._event_tasks: set[asyncio.Task[None]] = set()  # Scheduled Events being posted
        self._dirty = asyncio.Event()
        self._last_cycle = float("-inf")
        # Telemetry for the used and idle GPU metrics, called with the time and the pods holding GPUs
        # (e.g. TelemetryUsage.facts of kube.controller.metrics_usage); None: those series absent.
        self.gpu_usage: Callable[[float, Collection[str]], GpuUsageFacts | None] | None = None
        self._queue_of: Mapping[PodKey, str] = {}  # the last cycle's, for completed pods' queues
        # The Projects' idle policies (docs/semantics-notes.md, "Idle policy"): the telemetry they read
        # (set while a poller runs) and the warnings given, by pod and start of its low run.
        self._idle_usage: TelemetryUsage | None = None
        self._idle_warned: dict[tuple[PodKey, float], float] = {}
        # The usage ledger (gpufleet.kube.controller.accounting): None while it is off.
        self.accountant = self._accountant(ledger, accounting or AccountingConfig())
        self._reconcile_due = self.accountant is not None  # the ledger reconciled at each start of a term
        self.telemetry = telemetry if self.accountant is not None else None
        self.grouper = PodGrouper(api, clock, self.cache, self.binder._call, self.events, self.metrics,
                                  on_change=self._dirty.set) if config.group_workloads else None
        if self.grouper is not None:  # a pod bound in the cycle that labels it: one patch for both
            self.binder.labels_of = self.grouper.take_label

    def _accountant(self, ledger: LedgerBackend | None, config: AccountingConfig) -> Accountant | None:
        if ledger is None:
            return None
        from gpufleet.ledger import BufferedWriter

        status: list[Accountant] = []  # the writer reports drops (and flushes) to the accountant's metrics
        writer = BufferedWriter(ledger, capacity=config.buffer_capacity, batch_size=config.batch_size,
                                clock=self.clock.now, on_status=lambda st: status[0].on_status(st))
        accountant = Accountant(ledger, writer, self.clock, config, self.metrics, self.cache.get,
                                partial(self.events.emit, force=True), is_leader=self.is_leader,
                                pods=partial(self.cache.objects, Kind.POD))
        status.append(accountant)
        self.cache.hooks.append(accountant.on_change)
        self.binder.stamp = stamp
        self.binder.stamped = bound_time
        return accountant

    # --------------------------------------------------------------------------- lifecycle

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    @property
    def ready(self) -> bool:
        """Informers have listed every kind (leader or follower)."""
        return self.cache.synced

    async def run(self) -> None:
        """Informers, leader election and the cycle loop, until cancelled."""
        tasks = [asyncio.create_task(Informer(self.api, kind, self.cache, self.clock, self.metrics).run(),
                                     name=f"informer-{kind.plural}") for kind in INFORMED_KINDS]
        if self.elector is not None:
            tasks.append(asyncio.create_task(self.elector.run(), name="leader-election"))
        if self.grouper is not None:
            tasks.append(asyncio.create_task(self.grouper.run(), name="pod-grouper"))
        tasks.append(asyncio.create_task(self._loop(), name="cycles"))
        stop_writer = asyncio.Event()
        writer = None
        if self.accountant is not None:
            writer = asyncio.create_task(self.accountant.run(stop_writer), name="ledger-writer")
            if self.telemetry is not None:
                tasks.append(asyncio.create_task(self._poll_telemetry(self.accountant, self.telemetry),
                                                 name="telemetry"))
        try:
            await asyncio.gather(*tasks, *([writer] if writer is not None else []))
        finally:
            for task in [*tasks, *self._event_tasks]:
                task.cancel()
            await asyncio.gather(*tasks, *self._event_tasks, return_exceptions=True)
            if writer is not None:  # the buffered ledger events get one more try
                stop_writer.set()
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(writer), 20)
            if self.elector is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.elector.release())

    def _on_leadership(self, leading: bool) -> None:
        # A new term starts from what the API server says, not from a previous term's plans.
        self.plans.clear()
        self.victims.clear()
        self.reserved.clear()
        self.binder.forget()
        if leading:
            self._reconcile_due = self.accountant is not None
            self._dirty.set()
        else:  # a follower shows no queue gauges: sums over replicas count the leader's alone
            self.metrics.queues.clear()
            self._queue_of = {}

    def _on_change(self, kind: Kind, old: JsonDict | None, new: JsonDict | None) -> None:
        if kind is Kind.POD:
            key = _pod_key(new if new is not None else old or {})
            flight = self.binder.inflight.get(key)
            if flight is not None:
                if new is None:
                    self.binder.inflight.pop(key, None)
                elif _node_of(new) is not None and flight.stage == BindStage.BOUND:
                    self.binder.inflight.pop(key, None)
                    return
                else:
                    return  # our own annotation patch or binding coming back
            if new is None:
                self.victims.pop(key, None)
            if (seconds := completion_seconds(old, new)) is not None and key in self._queue_of:
                self.metrics.queues.completed(self._queue_of[key], seconds)
            if (run := runtime_seconds(old, new)) is not None and key in self._queue_of:
                self.observed_runtime.record(self._queue_of[key], run)  # docs/semantics.md, reservations
        if relevant_change(kind, old, new):
            self._dirty.set()

    async def _poll_telemetry(self, accountant: Accountant, source: TelemetrySource) -> None:
        from gpufleet.telemetry import TelemetryPoller

        # One read feeds the ledger's samples, the used/idle GPU metrics (docs/metrics.md) and the
        # Projects' idle policies.
        usage = TelemetryUsage()
        self.gpu_usage = usage.facts
        self._idle_usage = usage

        def take(page: TelemetryPage) -> None:
            accountant.on_page(page)
            usage.observe(page)

        poller = TelemetryPoller(source, take, now=self.clock.now, sleep=self.clock.sleep,
                                 interval_s=accountant.config.telemetry_interval)
        try:
            await poller.run()
        finally:
            self.gpu_usage = None
            self._idle_usage = None

    async def _reconcile_ledger(self, accountant: Accountant) -> None:
        """Before the first cycle: the ledger against the informers' pods. Waits at most
        ``reconcile_wait`` seconds; a ledger that cannot be read then is reconciled in the background."""
        task = asyncio.create_task(accountant.reconcile(self.snapshot, lambda: self.cache.objects(Kind.POD)),
                                   name="ledger-reconcile")
        self._event_tasks.add(task)  # cancelled with the controller
        task.add_done_callback(self._event_tasks.discard)
        await asyncio.wait({task}, timeout=accountant.config.reconcile_wait)

    async def _loop(self) -> None:
        await self.cache.all_synced.wait()
        if self.grouper is not None:  # no cycle binds a workload's pods before they can be grouped
            await self.grouper.all_synced.wait()
        self._dirty.set()
        while True:
            await self._wait_for_work()
            if not self.is_leader():
                self._last_cycle = self.clock.now()  # a follower only paces its wake-ups
                continue
            if self._reconcile_due and self.accountant is not None:
                self._reconcile_due = False
                await self._reconcile_ledger(self.accountant)
            try:
                await self.cycle()
            except Exception:  # a bug or an unexpected answer must not stop scheduling for good
                log.exception("cycle failed; trying again after %.1fs", self.config.min_interval)
                self.metrics.api_error("cycle", -1)
                self._dirty.set()
                await self.clock.sleep(max(self.config.min_interval, 1.0))

    def _next_timer(self) -> float:
        timers = [self._last_cycle + self.config.resync]
        timers.extend(v.next_try for v in self.victims.values() if v.state in _RETRIED)
        timers.extend(p.created + self.config.plan_timeout for p in self.plans.values())
        timers.extend(r.created + self.config.plan_timeout for r in self.reserved.values())
        return min(timers)

    async def _wait_for_work(self) -> None:
        while True:
            now = self.clock.now()
            if self._dirty.is_set():
                gap = self._last_cycle + self.config.min_interval - now
                if gap <= 0:
                    break
                await self.clock.sleep(gap)
                continue
            timer = self._next_timer()
            if timer <= now:
                break
            waiter = asyncio.ensure_future(self._dirty.wait())
            sleeper = asyncio.ensure_future(self.clock.sleep(timer - now))
            _, pending = await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
        self._dirty.clear()

    # ------------------------------------------------------------------------------- cycle

    def snapshot(self, grouped: GroupStep | None = None, virtual: Sequence[JsonDict] = (),
                 reserved: Mapping[PodKey, Binding] | None = None) -> SnapshotView:
        """The engine's input now: the cache, with in-flight and planned pods on their nodes and
        evicted pods gone (and, ``grouped``, the pod-grouper's labels and PodGroups on their way;
        ``virtual``, the virtual pods of suspended owners, pending)."""
        objects, problems = self._converted()
        for raw in virtual:
            try:
                objects[Kind.POD] = [*objects[Kind.POD], convert_object(Kind.POD, raw)]
            except ConversionError as err:
                problems.append(f"virtual {err}")
        if grouped is not None and grouped.groups:
            written = {str(group.key): group for group in map(partial(convert_object, Kind.POD_GROUP), grouped.groups)}
            objects[Kind.POD_GROUP] = [*(g for g in objects[Kind.POD_GROUP] if str(g.key) not in written),
                                       *written.values()]
        placed: dict[PodKey, Binding] = {k: f.binding for k, f in self.binder.inflight.items()}
        for plan in self.plans.values():
            placed.update((b.pod, b) for b in plan.bindings)
        placed.update(reserved or {})
        overlay = Overlay(placed=placed, gone=frozenset(self.victims),
                          grouped=grouped.grouped if grouped is not None else {})
        return self.observed_runtime.fill(build_snapshot(objects, overlay, problems, now=self.clock.now()))

    def _converted(self) -> tuple[dict[Kind, list[Any]], list[str]]:
        """The informers' objects as domain objects (converted again only where changed), and the
        objects that could not be read, one line each."""
        objects: dict[Kind, list[Any]] = {}
        problems: list[str] = []
        for kind in CONVERTED_KINDS:
            values, bad = self.cache.converted(kind)
            objects[kind] = values
            problems.extend(bad)
        return objects, problems

    def _reserve(self, admitted: Sequence[OwnerRef], suspended: Sequence[SuspendedOwner],
                 raw: Mapping[PodKey, JsonDict], placements: Mapping[PodKey, Binding], now: float) -> None:
        """Hold the places of each admitted owner's virtual pods until its real pods exist: until then
        the capacity would look free, and a second suspended owner would be admitted onto it."""
        uids = {ref.uid for ref in admitted}
        for owner in suspended:
            if owner.ref.uid not in uids:
                continue
            keys = [PodKey(f"{owner.ref.namespace}/{name}") for gang in owner.gangs for name in gang.pods]
            self.reserved[owner.ref.uid] = _Reservation(
                {k: raw[k] for k in keys if k in raw and k in placements},
                tuple(placements[k] for k in keys if k in placements),
                {f"{owner.ref.namespace}/{gang.plan.name}": gang.plan.min_member for gang in owner.gangs}, now)

    def _keep_suspended(self, waiting: Sequence[NotAdmitted]) -> None:
        """Remember why each suspended owner stays so (docs/semantics-notes.md, "Admission by
        suspension"): its PodGroup's pending reason, and the owner's Event when the reason changes."""
        self.not_admitted = {w.ref.uid: w for w in waiting}
        self.suspended_reasons = {f"{w.ref.namespace}/{w.group}": w.reason for w in waiting}

    async def _not_admitted_events(self) -> None:
        """A ``GangNotAdmitted`` Event on each suspended owner whose reason is new or changed (one
        per change, not one per cycle; the rate limit of pods' Events is not theirs)."""
        told = {uid: note for uid, note in self._told_not_admitted.items() if uid in self.not_admitted}
        events: list[PodEvent] = []
        for uid, why in self.not_admitted.items():
            ref = why.ref
            note = f"{ref.kind} {ref.namespace}/{ref.name} stays suspended: pod group {why.group}: {why.reason}"
            if told.get(uid) != note:
                told[uid] = note
                events.append(PodEvent(ref.namespace, ref.name, ref.uid, "GangNotAdmitted", note, "Normal",
                                       "Admission", kind=ref.kind, api_version=ref.api_version))
        self._told_not_admitted = told
        await asyncio.gather(*(self.events.emit(event, force=True) for event in events))

    def _release_reservations(self, view: SnapshotView, now: float) -> None:
        """Hand over the places held for admitted owners whose real pods all exist, labelled (``view``:
        the cache's; a gang waits for its every member anyway): from then on the places are the real
        pods', and no other owner is admitted until they are bound (``handed``). Forget a reservation
        once they are, or after ``plan_timeout``."""
        if not self.reserved:
            return
        present = Counter(gang_id(pod) for pod in view.pods.values())
        bound = Counter(gang_id(pod) for pod in view.pods.values() if pod.node_name is not None)
        for uid, reservation in list(self.reserved.items()):
            if (all(bound[gang] >= need for gang, need in reservation.gangs.items())
                    or now >= reservation.created + self.config.plan_timeout):
                del self.reserved[uid]
            elif all(present[gang] >= need for gang, need in reservation.gangs.items()):
                reservation.handed = True

    def _reconcile(self, now: float) -> None:
        """Forget what the API server has caught up with, and plans that waited too long."""
        for key in list(self.binder.inflight):
            namespace, _, name = key.partition("/")
            pod = self.cache.get(Kind.POD, namespace, name)
            if pod is None or _node_of(pod) is not None:
                del self.binder.inflight[key]
        for key in list(self.victims):
            namespace, _, name = key.partition("/")
            if self.cache.get(Kind.POD, namespace, name) is None:
                del self.victims[key]
        for gang, plan in list(self.plans.items()):
            if now >= plan.created + self.config.plan_timeout:
                log.warning("gang %s: gave up waiting for %s; deciding again", gang, plan.waiting or "its victims")
                for victim in plan.victims:
                    self.victims.pop(victim, None)
                del self.plans[gang]

    async def _decide(self, view: SnapshotView) -> Decisions:
        pending = any(p.ours and p.node_name is None for p in view.pods.values())
        if not pending:
            return Decisions()
        started = time.perf_counter()
        if self.config.engine_in_thread:
            decisions = await asyncio.to_thread(self.engine, view.snapshot)
        else:
            decisions = self.engine(view.snapshot)
        self.metrics.engine_duration.observe(time.perf_counter() - started)
        return decisions

    async def _resolve_devices(self, view: SnapshotView) -> DeviceView:
        """The snapshot with its DRA objects read for the engine (docs/semantics-notes.md, "Dynamic
        Resource Allocation"), as replay reads them; off the event loop like the engine."""
        snapshot = view.snapshot
        if self.config.engine_in_thread and (snapshot.resource_slices or snapshot.resource_claims):
            return await asyncio.to_thread(resolve_devices, snapshot, self._device_cache)
        return resolve_devices(snapshot, self._device_cache)

    async def _release_stale(self, stale: Sequence[ResourceClaim], decisions: Decisions) -> None:
        """Clear the allocation and reservedFor of each claim no pod holds (DeviceView.stale), except
        those this cycle's bindings or waiting plans allocate anew (they overwrite it)."""
        if not stale:
            return
        bindings = [*decisions.bindings, *(b for plan in self.plans.values() for b in plan.bindings)]
        taken = {(str(b.pod).partition("/")[0], c.claim) for b in bindings for c in b.devices}

        async def release(claim: ResourceClaim) -> None:
            try:
                await self.binder._call("patch resourceclaims/status", lambda: self.api.patch_status(
                    Kind.RESOURCE_CLAIM, claim.namespace, claim.name, release_status()))
                log.info("resourceclaim %s: allocation released (no pod holds it)", claim.key)
            except ApiError as err:
                log.warning("resourceclaim %s: allocation not released: %s", claim.key, err)

        await asyncio.gather(*(release(c) for c in stale
                               if (c.namespace, c.name) not in taken and not self._reserved_elsewhere(c)))

    def _reserved_elsewhere(self, claim: ResourceClaim) -> bool:
        """Whether the claim's reservedFor names a consumer the snapshot does not show: a live pod of
        another scheduler not bound yet (kube-scheduler between its PreBind and its Binding), or
        something other than a pod. Such an allocation is not gpufleet's to release."""
        raw = self.cache.get(Kind.RESOURCE_CLAIM, claim.namespace, claim.name) or {}
        for entry in (raw.get("status") or {}).get("reservedFor") or ():
            if not isinstance(entry, dict) or entry.get("resource") != "pods" or entry.get("apiGroup"):
                return True
            pod = self.cache.get(Kind.POD, claim.namespace, str(entry.get("name") or ""))
            if pod is not None and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and (
                    pod.get("spec") or {}).get("schedulerName") != SCHEDULER_NAME:
                return True
        return False

    async def cycle(self) -> CycleResult:
        """One cycle (see the module docstring); returns what it did."""
        started = time.perf_counter()
        now = self.clock.now()
        self._last_cycle = now
        self.cycles += 1
        self._reconcile(now)
        suspended: tuple[SuspendedOwner, ...] = ()
        virtual: frozenset[PodKey] = frozenset()
        raw_virtual: dict[PodKey, JsonDict] = {}
        if self.grouper is None:
            view = self.snapshot()
        else:  # before the engine: gangs of workloads, never singletons
            # Grouping reads the converted objects, not a snapshot: the one snapshot of the cycle is
            # built after the step, with its labels (10,000 pods arriving at once: a build saved).
            converted = self._converted()[0]
            configs = converted[Kind.SCHEDULER_CONFIG]
            admission = configs[0].admission if configs else SchedulerConfig().admission
            grouped = await self.grouper.step(PodGrouper.facts(converted), enabled=self.is_leader())
            if self.reserved:
                self._release_reservations(self.snapshot(), now)
            holding = [r for r in self.reserved.values() if not r.handed]
            handing = len(holding) < len(self.reserved)  # no admission while admitted pods take their places
            if admission is AdmissionMode.SUSPEND and grouped.virtual and not handing:
                suspended = grouped.suspended
                raw_virtual = {_pod_key(raw): raw for raw in grouped.virtual}
            for reservation in holding:
                raw_virtual.update(reservation.pods)
            virtual = frozenset(raw_virtual)
            reserved = {b.pod: b for r in holding for b in r.bindings}
            view = self.snapshot(grouped, tuple(raw_virtual.values()), reserved)
            view = self.grouper.hold(view, grouped.held, grouped.quiet)
        for problem in view.problems:
            log.warning("left out: %s", problem)
        await self._write_project_statuses(view, now)
        invalid = check_snapshot(view)
        if invalid is not None:
            log.error("no cycle: %s", invalid)
            self.last = CycleResult(Decisions(), skipped=invalid)
            return self.last
        devices = await self._resolve_devices(view)
        view = replace(view, snapshot=devices.snapshot, pods={p.key: p for p in devices.snapshot.pods})
        self._drain = self._drain_inputs.plan(view.snapshot, view.pods)
        if self._drain.closed:  # nothing new lands on a draining node
            view = replace(view, snapshot=self._drain_inputs.closed(view.snapshot, self._drain.closed))
        self.binder.claim_context = ClaimContext.of(devices.snapshot)
        decisions = move_evictions(view, devices.attach(await self._decide(view)))  # moves are evictions here
        gate: Callable[[str], Awaitable[str | None]] | None = None
        if self.grouper is not None:
            if decisions.evictions or virtual or self._drain.drains:
                # Evictions and admissions are for gangs the engine saw whole: only once every
                # PodGroup it was shown is made (a cycle that saw one not made acts on nothing).
                if not await self.grouper.settle():
                    self._dirty.set()
                    self.last = CycleResult(Decisions(), skipped="a PodGroup was not written; deciding again")
                    return self.last
            else:  # bindings only: each gang binds once its own PodGroup is made
                gate = self.grouper.gate
        admitted: tuple[OwnerRef, ...] = ()
        if virtual:  # never bound, evicted for, reported, accounted: they are not in the API server
            placements = {b.pod: b for b in decisions.bindings if b.pod in virtual}
            decisions, admitted, waiting = _admissions(view, decisions, virtual, suspended)
            view = _without(view, virtual)
            if suspended:
                self._keep_suspended(waiting)
            if self.is_leader():
                self._reserve(admitted, suspended, raw_virtual, placements, now)
        for warning in (*devices.warnings, *decisions.warnings):
            log.warning("%s", warning)
        self.metrics.decisions.labels("binding").inc(len(decisions.bindings))
        self.metrics.decisions.labels("eviction").inc(len(decisions.evictions))
        self.metrics.decisions.labels("pending").inc(len(decisions.pending))
        self.metrics.reserved_gpus.set(sum(r.gpus for r in decisions.reservations))
        if not self.is_leader():
            self.last = CycleResult(decisions, skipped="not the leader")
            return self.last
        try:
            await self._release_stale(devices.stale, decisions)
            result = await self._act(view, decisions, now, gate)
            if self.grouper is not None:
                if not await self.grouper.settle():  # the gangs whose PodGroup failed are decided again
                    self._dirty.set()
                await self.grouper.write_labels()
                if admitted:
                    await self.grouper.unsuspend(admitted)
                await self._not_admitted_events()
            await self._report(view, result, now)
        except NotLeader:
            result = CycleResult(decisions, skipped="lost the leader lease during the cycle")
        self.metrics.cycle_duration.observe(time.perf_counter() - started)
        self._log_cycle(result, time.perf_counter() - started)
        self.last = result
        return result

    def _log_cycle(self, result: CycleResult, seconds: float) -> None:
        """The controller's own info lines: one per binding, per eviction, and one per cycle that
        bound, evicted or failed something (other cycles log their line at debug)."""
        for key in result.bound:
            flight = self.binder.inflight.get(key)
            where = f" to node {flight.binding.node}" if flight is not None else ""
            gpus = flight.binding.gpus if flight is not None else ()
            log.info("bound pod %s%s%s", key, where, f" (GPUs {','.join(map(str, gpus))})" if gpus else "",
                     extra={"pod": key, "node": flight.binding.node if flight is not None else None,
                            "gpus": list(gpus)})
        why = {e.pod: e for e in result.decisions.evictions}
        for outcome in result.evicted:
            if outcome.result == "evicted":
                eviction = why.get(outcome.pod)
                reason = f" ({eviction.reason.value}, for {eviction.by})" if eviction is not None else ""
                log.info("evicted pod %s%s", outcome.pod, reason, extra={"pod": outcome.pod})
        decisions = result.decisions
        evicted = sum(1 for outcome in result.evicted if outcome.result == "evicted")  # not blocked, failed, gone
        counts = {"bound": len(result.bound), "failed": len(result.failed), "evicted": evicted,
                  "pending": len(decisions.pending), "waiting": len(result.planned)}
        acted = counts["bound"] or counts["failed"] or counts["evicted"] or result.skipped
        level = logging.INFO if acted else logging.DEBUG
        log.log(level, "cycle %d: %d bound, %d failed, %d evicted, %d pending, %d gangs waiting%s (%.3fs)",
                self.cycles, *counts.values(), f"; skipped: {result.skipped}" if result.skipped else "", seconds,
                extra={"cycle": self.cycles, **counts, "seconds": round(seconds, 6)})

    # ------------------------------------------------------------------------------- acting

    async def _act(self, view: SnapshotView, decisions: Decisions, now: float,
                   gate: Callable[[str], Awaitable[str | None]] | None = None) -> CycleResult:
        gangs: dict[str, list[Binding]] = {}
        for binding in decisions.bindings:
            pod = view.pods[binding.pod]
            gangs.setdefault(gang_id(pod), []).append(binding)
        caused: dict[str, set[PodKey]] = {}
        moved: list[PodKey] = []
        for eviction in decisions.evictions:
            by = view.pods.get(eviction.by)
            caused.setdefault(gang_id(by) if by else eviction.by, set()).add(eviction.pod)
            if eviction.pod not in self.victims:
                node = view.pods[eviction.pod].node_name if eviction.pod in view.pods else None
                self.victims[eviction.pod] = Victim(eviction, str(node or ""), EvictState.REQUESTED,
                                                    why=target_text(decisions, eviction.pod))
                if eviction.reason is EvictionReason.CONSOLIDATION:
                    moved.append(eviction.pod)
        if moved:
            await self._stamp_moves(view, moved, now)
        drained = await self._drain_gangs(view, now)
        busy = self._busy_nodes()
        ready: list[tuple[str, Sequence[Binding]]] = []
        for gang, bindings in gangs.items():
            if caused.get(gang) or any(b.node in busy for b in bindings):
                self.plans[gang] = Plan(gang, tuple(bindings), frozenset(caused.get(gang, ())), now)
            else:
                ready.append((gang, bindings))

        due = [v.eviction for v in self.victims.values()
               if v.state == EvictState.REQUESTED or (v.state in _RETRIED and v.next_try <= now)]
        evicted = await self._evict(due, now) if due else []
        for evict_outcome in evicted:
            self._after_eviction(evict_outcome, now)
        evicted = drained + evicted
        await self._victim_events(evicted)
        await self._idle_policies(view, now)

        ready.extend(self._ready_plans())
        with collector_paused(len(ready) >= PAUSE_GC_FROM):
            outcomes = await self.binder.bind_gangs(ready, self._pod_object, gate) if ready else []
        bound: list[PodKey] = []
        failed: dict[PodKey, str] = {}
        for outcome in outcomes:
            bound.extend(outcome.bound)
            failed.update(outcome.failed)
        if failed:
            self._dirty.set()  # the engine decides the failed ones again
        if self.accountant is not None:
            self._account_bindings(view, ready, bound)
        await self._binding_failure_events(outcomes)
        await self._requeued(view, outcomes)
        self._scheduled_events(bound)
        return CycleResult(decisions, tuple(bound), failed, tuple(evicted), tuple(self.plans))

    async def _evict(self, evictions: Sequence[Eviction], now: float) -> list[EvictOutcome]:
        """The evictions asked of the API server, their ledger intervals ended for their reasons."""
        if self.accountant is None:
            return await self.binder.evict(evictions)
        self.accountant.evicting(evictions)
        try:
            outcomes = await self.binder.evict(evictions)
        except BaseException:  # NotLeader, cancellation: none of them is known to be evicted
            for eviction in evictions:
                self.accountant.not_evicted(eviction)
            raise
        for eviction, outcome in zip(evictions, outcomes, strict=True):
            if outcome.result == "evicted":
                self.accountant.evicted(eviction, now)
            else:
                self.accountant.not_evicted(eviction)
        return outcomes

    async def _drain_gangs(self, view: SnapshotView, now: float) -> list[EvictOutcome]:
        """Carry out this cycle's drain plan (``gpufleet.policy.drain_plan``): report the pods on failed
        GPUs; for each gang newly drained, keep its age on its PodGroup, then evict its pods (gangs side
        by side, each its age first: its pods must not come back before its age is written). A refused
        eviction is retried as the others are; the ledger intervals end for the drain's reason."""
        plan = self._drain
        self.metrics.failed_gpu_pods.set(len(plan.failed))
        events = [(self._event(f.pod, "GPUFailed", f.message, "Warning", "Health"), False) for f in plan.failed]
        new = [d for d in plan.drains if any(p not in self.victims for p in d.pods)]
        for drain in new:
            for key in drain.pods:
                if key not in self.victims:
                    pod = view.pods.get(key)
                    node = str(pod.node_name) if pod is not None and pod.node_name else drain.node
                    self.victims[key] = Victim(Eviction(key, drain.reason, key), node, EvictState.REQUESTED,
                                               why=drain.message)
            log.info("draining gang %s (%s): %s", drain.gang, drain.reason.value, drain.message,
                     extra={"gang": drain.gang, "reason": drain.reason.value, "pods": len(drain.pods)})

        async def drain_one(drain: GangDrain) -> list[EvictOutcome]:
            await self._keep_age(view, drain)
            asked = [self.victims[k].eviction for k in drain.pods
                     if k in self.victims and self.victims[k].state == EvictState.REQUESTED]
            return await self._evict(asked, now) if asked else []

        outcomes = [o for done in await asyncio.gather(*(drain_one(d) for d in new)) for o in done]
        for outcome in outcomes:
            self._after_eviction(outcome, now)
        await self._emit_all(events)
        return outcomes

    async def _keep_age(self, view: SnapshotView, drain: GangDrain) -> None:
        """Write the gang's age on its PodGroup (``gpufleet.dev/queued-at``) before its pods go, so that
        the pods its owner makes again queue at its original position. A gang with no PodGroup has
        nothing that outlives it. A failed write is logged: the node goes either way."""
        gang = drain.gang
        group = view.groups.get(gang)
        if group is None:
            return
        age = gang_age((p for p in map(view.pods.get, drain.pods) if p is not None), group.queued_at)
        if age is None or (group.queued_at is not None and group.queued_at <= age):
            return
        patch = {"metadata": {"annotations": {ANNOTATION_QUEUED_AT: format_time(age)}}}
        try:
            await self.binder._call("patch podgroups", lambda: self.api.patch(Kind.POD_GROUP, group.namespace,
                                                                               group.name, patch))
        except ApiError as err:
            log.warning("podgroup %s: queued-at not written (it requeues as new): %s", gang, err)

    async def _stamp_moves(self, view: SnapshotView, moved: Sequence[PodKey], now: float) -> None:
        """``gpufleet.dev/moved-at`` on the moved pods and their PodGroups before they are evicted
        (docs/semantics.md, "Consolidation"). A failed write is logged: the move goes on."""
        async def write(kind: Kind, namespace: str, name: str, patch: JsonDict) -> None:
            try:
                await self.binder._call(f"patch {kind.plural}", lambda: self.api.patch(kind, namespace, name, patch))
            except ApiError as err:
                log.warning("%s %s/%s: moved-at not written: %s", kind.kind, namespace, name, err)

        await asyncio.gather(*(write(w.kind, w.namespace, w.name, w.patch) for w in moved_at_writes(view, moved, now)))

    async def _requeued(self, view: SnapshotView, outcomes: Sequence[BindOutcome]) -> None:
        """A drained gang bound again has had its requeue: its group's ``queued-at`` is removed, so that a
        later gang of the same PodGroup queues by its own age (a tenant reusing a group keeps no old place)."""
        done = [view.groups[o.gang] for o in outcomes
                if o.bound and not o.failed and o.gang in view.groups and view.groups[o.gang].queued_at is not None]
        patch: JsonDict = {"metadata": {"annotations": {ANNOTATION_QUEUED_AT: None}}}

        async def clear(namespace: str, name: str) -> None:
            try:
                await self.binder._call("patch podgroups", lambda: self.api.patch(Kind.POD_GROUP, namespace, name,
                                                                                   patch))
            except ApiError as err:
                log.warning("podgroup %s/%s: queued-at not removed: %s", namespace, name, err)

        await asyncio.gather(*(clear(g.namespace, g.name) for g in done))

    async def _idle_policies(self, view: SnapshotView, now: float) -> None:
        """Warn, then stop, the pods whose GPUs stay idle in Projects that opted in
        (``gpufleet.policy.idle_actions``): a Warning Event first; the stop is an eviction whose
        ledger interval ends with reason ``idle``. Needs telemetry; a refused eviction is tried again
        next cycle."""
        usage = self._idle_usage
        if usage is None or not any(p.idle_policy is not None for p in view.snapshot.projects):
            self._idle_warned.clear()
            return
        from gpufleet.telemetry import PodKey as TelemetryPod

        index = ProjectIndex.build(view.snapshot.projects, namespace_labels(view.snapshot.namespaces),
                                   {pod.namespace for pod in view.pods.values()})
        watches: list[IdleWatch] = []
        runs: dict[PodKey, float] = {}
        for key, pod in view.pods.items():
            if pod.node_name is None or pod.scheduler_name != SCHEDULER_NAME:
                continue
            low = usage.tracker.low_since(TelemetryPod(pod.namespace, pod.name), now)
            if low is not None:
                runs[key] = low
                watches.append(IdleWatch(key, pod.labels, low, self._idle_warned.get((key, low))))
        # warnings of low runs that ended (the pod used its GPUs again, or is gone) are forgotten
        self._idle_warned = {k: at for k, at in self._idle_warned.items() if runs.get(k[0]) == k[1]}
        actions = idle_actions(index, watches, now)
        stops = [Eviction(a.pod, EvictionReason.IDLE, a.pod) for a in actions if a.step is IdleStep.STOP]
        outcomes = dict(zip((e.pod for e in stops), await self._evict(stops, now), strict=True)) if stops else {}
        for action in actions:
            if action.step is IdleStep.WARN:
                await self.events.emit(self._event(action.pod, "IdleWarning", action.message, "Warning", "Idle"),
                                       force=True)
                self._idle_warned[(action.pod, runs[action.pod])] = now
                continue
            outcome = outcomes[action.pod]
            if outcome.result == "evicted":
                await self.events.emit(self._event(action.pod, "IdleStopped", action.message, "Normal", "Idle"),
                                       force=True)
            elif outcome.result in ("blocked", "failed"):
                note = f"{action.message}; the eviction was refused: {outcome.message}"
                await self.events.emit(self._event(action.pod, "IdleStopBlocked", note, "Warning", "Idle"))

    def _account_bindings(self, view: SnapshotView, ready: Sequence[tuple[str, Sequence[Binding]]],
                          bound: Sequence[PodKey]) -> None:
        """Open the intervals of the pods bound this cycle, at the times their annotations carry."""
        assert self.accountant is not None
        stamps = self.binder.stamps
        done = set(bound)
        by_pod = {b.pod: b for _, bindings in ready for b in bindings if b.pod in done}
        self.accountant.bound(view, [(key, by_pod[key].node, by_pod[key].gpus, stamps[key])
                                     for key in bound if key in by_pod and key in stamps])
        for _, bindings in ready:
            for b in bindings:
                stamps.pop(b.pod, None)

    def _scheduled_events(self, bound: Sequence[PodKey]) -> None:
        """A ``Scheduled`` Event per bound pod (kube-scheduler's reason and note), posted in the
        background once the cycle's bindings are done: off the binding path, so that they do not
        slow it (BENCHMARKS.md, "controller"). :meth:`drain_events` waits for them."""
        if not bound or not self.config.scheduled_events:
            return
        events: list[tuple[PodEvent, bool]] = []
        for key in bound:
            flight = self.binder.inflight.get(key)
            if flight is not None:
                note = f"Successfully assigned {key} to {flight.binding.node}"
                events.append((self._event(key, "Scheduled", note, "Normal", "Binding"), True))
        task = asyncio.create_task(self._post_in_background(events), name="scheduled-events")
        self._event_tasks.add(task)
        task.add_done_callback(self._event_tasks.discard)

    async def _post_in_background(self, events: list[tuple[PodEvent, bool]], workers: int = 8) -> None:
        """Post ``events`` with a few calls in flight at a time (not one task per Event: ten thousand
        of them at once would take the event loop from the watches that confirm the bindings)."""
        queue = iter(events)

        async def worker() -> None:
            for event, force in queue:
                if self.is_leader():
                    await self.events.emit(event, force=force)

        await asyncio.gather(*(worker() for _ in range(min(workers, len(events)))))

    async def drain_events(self) -> None:
        """Wait until the Scheduled Events of past cycles are posted (or failed)."""
        while self._event_tasks:
            await asyncio.gather(*list(self._event_tasks), return_exceptions=True)

    def _gpu_memory_of(self, node: str) -> int | None:
        """MiB per GPU of ``node`` from its ``nvidia.com/gpu.memory`` label (None: unknown)."""
        obj = self.cache.get(Kind.NODE, "", node) or {}
        text = ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_GPU_MEMORY)
        return int(text) if isinstance(text, str) and text.isdigit() and int(text) > 0 else None

    def _pod_object(self, key: PodKey) -> JsonDict | None:
        namespace, _, name = key.partition("/")
        return self.cache.get(Kind.POD, namespace, name)

    def _busy_nodes(self) -> set[str]:
        """Nodes where a pod we evicted still holds its place."""
        return {v.node for key, v in self.victims.items() if v.node and self._pod_object(key) is not None}

    def _after_eviction(self, outcome: EvictOutcome, now: float) -> None:
        victim = self.victims.get(outcome.pod)
        if victim is None:
            return
        if outcome.result == "gone":
            del self.victims[outcome.pod]
            return
        victim.state, victim.message = EVICTION.next(victim.state, EvictEvent(outcome.result)), outcome.message
        if victim.state in _RETRIED:
            victim.next_try = now + self.config.eviction_retry

    def _ready_plans(self) -> list[tuple[str, Sequence[Binding]]]:
        busy = self._busy_nodes()
        ready: list[tuple[str, Sequence[Binding]]] = []
        for gang, plan in list(self.plans.items()):
            waiting_for = sorted(v for v in plan.victims if v in self.victims)
            on_busy = sorted({b.node for b in plan.bindings if b.node in busy})
            if waiting_for or on_busy:
                blocked = [self.victims[v] for v in waiting_for if self.victims[v].state in _RETRIED]
                if blocked:
                    plan.waiting = "; ".join(self._blocked_text(v) for v in blocked)
                else:
                    what: list[str] = [str(v) for v in waiting_for] or [f"pods on node {n}" for n in on_busy]
                    plan.waiting = f"waiting for {len(what)} evicted pods to terminate: {', '.join(what[:5])}"
                continue
            del self.plans[gang]
            if all(self._still_pending(b.pod) for b in plan.bindings):
                ready.append((gang, plan.bindings))
            else:
                self._dirty.set()  # a pod of the plan went away or was bound elsewhere: decide again
        return ready

    def _still_pending(self, key: PodKey) -> bool:
        pod = self._pod_object(key)
        return pod is not None and _node_of(pod) is None and not (pod.get("metadata") or {}).get("deletionTimestamp")

    def _blocked_text(self, victim: Victim) -> str:
        pod = self._pod_object(victim.eviction.pod)
        labels = ((pod or {}).get("metadata") or {}).get("labels") or {}
        namespace = victim.eviction.pod.partition("/")[0]
        budgets = sorted(
            str((pdb.get("metadata") or {}).get("name"))
            for pdb in self.cache.objects(Kind.PDB)
            if (pdb.get("metadata") or {}).get("namespace") == namespace
            and label_selector_matches((pdb.get("spec") or {}).get("selector"), labels)
        )
        if victim.state == EvictState.BLOCKED:
            which = f" ({', '.join(budgets)})" if budgets else ""
            return (f"eviction of {victim.eviction.pod} is blocked by a PodDisruptionBudget{which}: "
                    f"{victim.message}; retrying")
        return f"eviction of {victim.eviction.pod} failed: {victim.message}; retrying"

    # ---------------------------------------------------------------------------- reporting

    async def _emit_all(self, events: Iterable[tuple[PodEvent, bool]]) -> None:
        async def one(event: PodEvent, force: bool) -> None:
            if self.is_leader():
                await self.events.emit(event, force=force)

        await asyncio.gather(*(one(e, f) for e, f in events))

    def _event(
        self, key: PodKey, reason: str, note: str, kind: str = "Warning", action: str = "Scheduling"
    ) -> PodEvent:
        namespace, _, name = key.partition("/")
        return PodEvent(namespace, name, pod_uid(self._pod_object(key)), reason, note, kind, action)

    async def _victim_events(self, outcomes: Sequence[EvictOutcome]) -> None:
        events: list[tuple[PodEvent, bool]] = []
        for outcome in outcomes:
            victim = self.victims.get(outcome.pod)
            if victim is None:
                continue
            e = victim.eviction
            if e.reason in DRAIN_REASONS:
                if outcome.result == "evicted":
                    events.append((self._event(e.pod, "Drained", f"Evicted by gpufleet ({e.reason.value}): "
                                               f"{victim.why}", "Normal", "Draining"), True))
                elif outcome.result in ("blocked", "failed"):
                    events.append((self._event(e.pod, "DrainBlocked", f"{self._blocked_text(victim)}",
                                               "Warning", "Draining"), False))
                continue
            if outcome.result == "evicted" and e.reason is EvictionReason.CONSOLIDATION:
                note = (f"Moved by gpufleet (consolidation) to make room for {e.by}; {victim.why}; "
                        "its owner recreates it")
                events.append((self._event(e.pod, "Moved", note, "Normal", "Consolidating"), True))
            elif outcome.result == "evicted":
                note = f"Evicted by gpufleet ({e.reason.value}) to make room for {e.by}"
                events.append((self._event(e.pod, "Preempted", note, "Normal", "Preempting"), True))
            elif outcome.result in ("blocked", "failed"):
                events.append((self._event(e.by, "EvictionBlocked", f"waiting: {self._blocked_text(victim)}",
                                           "Warning", "Preempting"), False))
        await self._emit_all(events)

    async def _binding_failure_events(self, outcomes: Sequence[BindOutcome]) -> None:
        await self._emit_all(
            (self._event(pod, "BindingFailed", f"binding failed: {why}"), False)
            for outcome in outcomes for pod, why in sorted(outcome.failed.items())
        )

    async def _report(self, view: SnapshotView, result: CycleResult, now: float) -> None:
        decisions = result.decisions
        if result.failed:
            kept = tuple(b for b in decisions.bindings if b.pod not in result.failed)
            more = tuple(PendingPod(k, f"binding failed: {why}") for k, why in result.failed.items())
            decisions = replace(decisions, bindings=kept, pending=decisions.pending + more)
        waiting: dict[PodKey, str] = {}
        for plan in self.plans.values():
            for b in plan.bindings:
                waiting[b.pod] = plan.waiting
        screened = screen(view.snapshot)
        state = end_state(view, decisions, waiting, ignored={p.key for p in screened.strays})
        await self._pending_events(view, state, waiting)
        await self._node_events(screened)
        await self._write_statuses(view, state, now, result)
        await self._write_pod_statuses(state, now)

    async def _pending_events(self, view: SnapshotView, state: EndState, waiting: Mapping[PodKey, str]) -> None:
        events: list[tuple[PodEvent, bool]] = [
            (self._event(key, "FailedScheduling", reason), False) for key, reason in sorted(state.pending.items())
        ]
        for plan in self.plans.values():
            if plan.waiting and plan.bindings:
                first = min(b.pod for b in plan.bindings)
                blocked = "blocked" in plan.waiting or "failed" in plan.waiting
                events.append((self._event(first, "EvictionBlocked" if blocked else "WaitingForVictims",
                                           plan.waiting, "Warning" if blocked else "Normal", "Preempting"), False))
        self.events.forget_older_than(2 * self.events.repeat_after)
        await self._emit_all(events)

    async def _node_events(self, screened: Screened) -> None:
        """A Warning Event on each Node whose GPU count the engine does not take as it is (left out
        over the bound, or rounded down), rate-limited like the pods' Events."""
        events: list[tuple[PodEvent, bool]] = []
        for problem in screened.nodes:
            meta = (self.cache.get(Kind.NODE, "", problem.node) or {}).get("metadata") or {}
            action = "LeftOut" if isinstance(problem, TooManyGpus) else "RoundedDown"
            events.append((PodEvent("", problem.node, str(meta.get("uid") or ""), "InvalidGpuCount", problem.text,
                                    "Warning", action, kind="Node"), False))
        await self._emit_all(events)

    async def _write_statuses(self, view: SnapshotView, state: EndState, now: float,
                              result: CycleResult | None = None) -> None:
        queues = list(view.snapshot.queues)
        reports = queue_reports(queues, view, state)
        if result is not None:
            self._queue_of = view.queue_of
            usage = self.gpu_usage(now, state.bound.keys()) if self.gpu_usage is not None else None
            self.metrics.queues.update(cycle_figures(view, state, reports, now=now, bound=result.bound,
                                                     evictions=result.decisions.evictions, usage=usage))
        self.metrics.set_queues(
            pending={q: r.pending for q, r in reports.items()},
            admitted={q: r.admitted for q, r in reports.items()},
            usage={q: {res: v / MILLI for res, v in r.usage.items()} for q, r in reports.items()},
            quota={q: {res: v / MILLI for res, v in r.quota.items()} for q, r in reports.items()},
        )
        writes: list[tuple[Kind, str, str, JsonDict]] = []
        decayed = self.decayed_usage.update(  # docs/semantics.md, "Fairness over time"
            queues, {q: r.usage for q, r in reports.items()},
            lambda name: (self.cache.get(Kind.QUEUE, "", name) or {}).get("status"),
            view.snapshot.config.usage_half_life, now)
        self.metrics.set_decayed_usage({q: {r: v / MILLI for r, v in d.usage.items()} for q, d in decayed.items()})
        held = reservations_by_queue(view, result.decisions.reservations if result is not None else ())
        for name, report in sorted(reports.items()):
            current = (self.cache.get(Kind.QUEUE, "", name) or {}).get("status")
            wanted = queue_status(report, current, now, decayed.get(name), held.get(name, ()))
            if not same_status(QueueStatus, current, wanted):
                writes.append((Kind.QUEUE, "", name, wanted))
        for facts in self._group_facts(view, state):
            group = facts.group
            current = (self.cache.get(Kind.POD_GROUP, group.namespace, group.name) or {}).get("status")
            wanted = group_status(facts, current, now)
            if not same_status(PodGroupStatus, current, wanted):
                writes.append((Kind.POD_GROUP, group.namespace, group.name, wanted))

        async def write(kind: Kind, namespace: str, name: str, status: JsonDict) -> None:
            try:
                await self.binder._call(f"patch {kind.plural}/status",
                                        lambda: self.api.patch_status(kind, namespace, name, status))
            except ApiError as err:
                log.warning("status of %s %s not written: %s", kind.kind, name, err)

        await asyncio.gather(*(write(*w) for w in writes))

    async def _write_project_statuses(self, view: SnapshotView, now: float) -> None:
        """Each Project's status (NamespaceConflict, namespaces governed), only where it changed;
        before the cycle's checks, so that a conflict is reported even in a cycle that decides nothing."""
        projects = view.snapshot.projects
        if not projects:
            return
        pod_namespaces = {pod.namespace for pod in view.pods.values()}
        index = ProjectIndex.build(projects, namespace_labels(view.snapshot.namespaces), pod_namespaces)
        writes: list[tuple[str, JsonDict]] = []
        for project in projects:
            current = (self.cache.get(Kind.PROJECT, "", project.name) or {}).get("status")
            wanted = project_status(project.name, index, current, now)
            if not same_status(ProjectStatus, current, wanted):
                writes.append((project.name, wanted))

        async def write(name: str, status: JsonDict) -> None:
            try:
                await self.binder._call("patch projects/status",
                                        lambda: self.api.patch_status(Kind.PROJECT, "", name, status))
            except ApiError as err:
                log.warning("status of Project %s not written: %s", name, err)

        with contextlib.suppress(NotLeader):
            await asyncio.gather(*(write(name, status) for name, status in writes))

    async def _write_pod_statuses(self, state: EndState, now: float) -> None:
        """PodScheduled=False with the pending reason, and nominatedNodeName while a plan waits
        for its victims (see :mod:`gpufleet.kube.controller.pod_status`); only what changed."""
        wanted: dict[PodKey, tuple[str, str | None]] = {k: (reason, None) for k, reason in state.pending.items()}
        for plan in self.plans.values():
            for b in plan.bindings:
                wanted[b.pod] = (plan.waiting or "waiting for evicted pods to terminate", str(b.node))
        writes: list[tuple[bool, PodKey, JsonDict]] = []
        for key, (message, nominated) in wanted.items():
            pod = self._pod_object(key)
            patch = None if pod is None else pending_status_patch(pod, message, nominated, now)
            if pod is not None and patch is not None:
                writes.append((marked_unschedulable(pod), key, patch))
        writes.sort()  # pods not marked yet first, then by name

        async def write(key: PodKey, patch: JsonDict) -> None:
            namespace, _, name = key.partition("/")
            try:
                await self.binder._call("patch pods/status",
                                        lambda: self.api.patch_status(Kind.POD, namespace, name, patch))
            except ApiError as err:
                log.info("status of pod %s not written: %s", key, err)

        await asyncio.gather(*(write(key, patch) for _, key, patch in writes[: self.config.pod_status_batch]))

    def _group_facts(self, view: SnapshotView, state: EndState) -> list[GroupFacts]:
        members: dict[str, list[JsonDict]] = {}
        for pod in self.cache.objects(Kind.POD):
            meta = pod.get("metadata") or {}
            label = (meta.get("labels") or {}).get(LABEL_POD_GROUP)
            if label:
                members.setdefault(f"{meta.get('namespace') or 'default'}/{label}", []).append(pod)
        facts: list[GroupFacts] = []
        for key, group in sorted(view.groups.items()):
            pods = members.get(key, [])
            phases = [(p.get("status") or {}).get("phase") for p in pods]
            keys = sorted(_pod_key(p) for p in pods)
            reason = next((state.pending[k] for k in keys if k in state.pending), "")
            reason = reason or ("" if pods else self.suspended_reasons.get(key, ""))
            facts.append(GroupFacts(
                group=group,
                bound=sum(1 for k in keys if k in state.bound),
                running=sum(1 for p, ph in zip(pods, phases, strict=True) if ph == "Running" and _node_of(p)),
                failed=sum(1 for ph in phases if ph == "Failed"),
                alive=sum(1 for ph in phases if ph not in ("Succeeded", "Failed")),
                reason=reason,
            ))
        return facts
