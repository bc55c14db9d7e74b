"""The controller's usage ledger: it records each binding as an allocation interval, and its end.

An **interval** opens when a Binding succeeds. Its bound time is the injected clock's time at which
the controller bound the pod, written on the pod itself in the annotation ``gpufleet.dev/bound-at``
with the binding's other annotations: so after a restart (or a kill) the controller knows the
interval's identity (pod UID, bound time) from the API server alone, and replays nothing twice.
It **closes** when the informers show the pod Succeeded (``completed``) or Failed (``failed``), when
the controller evicts it (``evicted-reclaim`` / ``evicted-preemption``, with the preemptor), when an
operator's ``gpufleet admin`` command evicted it (``operator``: the pod's ``gpufleet.dev/evicted-by``), when its
node disappears (``node-failure``, or ``spot-reclaim`` for a spot node, see
:func:`gpufleet.ledger.is_spot_node`) or when it is deleted (``deleted``; ``node-failure`` when its
node is gone or NotReady then). Utilisation samples come from a telemetry source, when one is given.

Everything goes through the ledger's :class:`~gpufleet.ledger.BufferedWriter`: the scheduling loop
only appends to its buffer, a worker thread writes (``run``). Before the first cycle the accountant
reconciles the ledger's open intervals with the pods the informers show
(:func:`gpufleet.ledger.reconcile`); while the database cannot be read it tries again in the
background, and the cycles go on. The rules: docs/semantics-notes.md, "Usage ledger (accounting)".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Protocol

from gpufleet.domain import (
    ANNOTATION_BOUND_AT,
    ANNOTATION_GPU_INDEX,
    GPU,
    LABEL_GPU_PRODUCT,
    MILLI,
    SCHEDULER_NAME,
    Eviction,
    EvictionReason,
    Pod,
    PodKey,
    QueueName,
)
from gpufleet.domain.queues import resolve_queue
from gpufleet.domain.selectors import namespace_labels
from gpufleet.kube.client.port import Clock, Kind
from gpufleet.kube.controller.convert import ConversionError, SnapshotView, convert_object
from gpufleet.kube.controller.events import PodEvent
from gpufleet.kube.controller.metrics import ControllerMetrics
from gpufleet.ledger import (
    ANNOTATION_EVICTED_BY,
    BufferedWriter,
    EndReason,
    IntervalEnd,
    IntervalStart,
    LedgerEvent,
    LedgerSink,
    ObservedPod,
    UtilisationSample,
    WriterStatus,
    gpu_amount,
    is_spot_node,
    reconcile,
    to_micros,
)
from gpufleet.policy import ProjectIndex
from gpufleet.telemetry import TelemetryPage


class LedgerBackend(LedgerSink, Protocol):
    """What the accountant needs of the ledger (:class:`~gpufleet.ledger.LedgerStore` is one): batches
    written, and the open intervals read back for reconciliation."""

    def open_intervals(self) -> list[IntervalStart]: ...

__all__ = ["ANNOTATION_BOUND_AT", "Accountant", "AccountingConfig", "LedgerBackend", "bound_time", "format_time",
           "parse_time", "stamp"]

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)
_MIB = 1024 * 1024
_ENDED = {"Succeeded": EndReason.COMPLETED, "Failed": EndReason.FAILED}
_EVICTED = {EvictionReason.RECLAIM: EndReason.EVICTED_RECLAIM, EvictionReason.PREEMPT: EndReason.EVICTED_PREEMPTION,
            EvictionReason.RESERVATION: EndReason.EVICTED_PREEMPTION,
            EvictionReason.IDLE: EndReason.IDLE, EvictionReason.SPOT: EndReason.SPOT_RECLAIM,
            EvictionReason.MAINTENANCE: EndReason.MAINTENANCE, EvictionReason.GPU_FAILURE: EndReason.GPU_FAILURE,
            EvictionReason.CONSOLIDATION: EndReason.MOVED}
# Evictions no pod caused: the policy's own (idle, drains); their interval has no preemptor.
_NO_PREEMPTOR = frozenset({EvictionReason.IDLE, EvictionReason.SPOT, EvictionReason.MAINTENANCE,
                           EvictionReason.GPU_FAILURE})


def _preemptor(eviction: Eviction) -> str | None:
    """The pod an eviction made room for (an idle stop made room for nobody)."""
    return None if eviction.reason in _NO_PREEMPTOR else str(eviction.by)


def format_time(seconds: float) -> str:
    """Epoch seconds as RFC 3339 UTC with microseconds (exactly the ledger's resolution)."""
    return (_EPOCH + to_micros(seconds) * _MICRO).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def stamp(seconds: float) -> dict[str, str]:
    """The annotation that stamps a binding with its bound time (the binder's ``stamp``)."""
    return {ANNOTATION_BOUND_AT: format_time(seconds)}


def parse_time(text: object) -> float | None:
    """An RFC 3339 time as epoch seconds (None: not a time, or before the epoch)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    micros = (moment - _EPOCH) // _MICRO
    return micros / 1_000_000 if micros >= 0 else None


def bound_time(pod: Mapping[str, Any]) -> float | None:
    """A bound pod's bound time: its ``gpufleet.dev/bound-at`` annotation, else its PodScheduled=True
    condition's time, else its start time (None: not known)."""
    meta = pod.get("metadata") or {}
    stamped = parse_time((meta.get("annotations") or {}).get(ANNOTATION_BOUND_AT))
    if stamped is not None:
        return stamped
    status = pod.get("status") or {}
    for condition in status.get("conditions") or ():
        scheduled = isinstance(condition, dict) and condition.get("type") == "PodScheduled"
        if scheduled and condition.get("status") == "True":
            at = parse_time(condition.get("lastTransitionTime"))
            if at is not None:
                return at
    return parse_time(status.get("startTime"))


def _finished_at(pod: Mapping[str, Any]) -> float | None:
    """The latest ``finishedAt`` of the pod's terminated containers (None: none)."""
    times = [parse_time(((s.get("state") or {}).get("terminated") or {}).get("finishedAt"))
             for s in (pod.get("status") or {}).get("containerStatuses") or () if isinstance(s, dict)]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _uid(pod: Mapping[str, Any] | None) -> str:
    return str(((pod or {}).get("metadata") or {}).get("uid") or "")


def _node(pod: Mapping[str, Any] | None) -> str | None:
    node = ((pod or {}).get("spec") or {}).get("nodeName")
    return str(node) if node else None


def _ours(pod: Mapping[str, Any]) -> bool:
    return (pod.get("spec") or {}).get("schedulerName") == SCHEDULER_NAME


def _phase(pod: Mapping[str, Any] | None) -> str:
    return str(((pod or {}).get("status") or {}).get("phase") or "")


def _indices(text: object) -> tuple[int, ...]:
    if not isinstance(text, str):
        return ()
    parts = [p.strip() for p in text.split(",") if p.strip()]
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()


def _converted(raw: Mapping[str, Any]) -> Pod | None:
    """A pod the snapshot leaves out (a finished one) read as the snapshot reads pods (None: unreadable)."""
    try:
        pod = convert_object(Kind.POD, raw)
    except ConversionError:
        return None
    return pod if isinstance(pod, Pod) else None


def _queue(view: SnapshotView, pod: Pod) -> str:
    """The queue of a pod the snapshot gives none (finished): its label's, else its PodGroup's."""
    group = view.groups.get(f"{pod.namespace}/{pod.group_label}") if pod.group_label else None
    return resolve_queue(pod, group, QueueName(""))


def _node_ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return True


@dataclass(frozen=True)
class AccountingConfig:
    """What the controller's ledger records and how it writes (``gpufleet controller --database``)."""

    cost_centre_labels: tuple[str, ...] = ()  # pod label keys copied onto each interval
    flush_interval: float = 1.0  # seconds between the writer's flushes
    buffer_capacity: int = 200_000  # ledger events held in memory while the database is away
    batch_size: int = 5_000  # events per write (one transaction)
    reconcile_wait: float = 10.0  # seconds the first cycle waits for the reconciliation after a start
    telemetry_interval: float = 30.0  # seconds between telemetry reads
    event_pod: tuple[str, str] | None = None  # (namespace, name) of the controller's pod: its Warning Events


class Accountant:
    """Turns the controller's bindings, evictions and the informers' pod and node changes into
    ledger events (see the module's docstring). Runs on the controller's event loop; the writer's
    flushes run in a worker thread."""

    def __init__(
        self,
        store: LedgerBackend,
        writer: BufferedWriter,
        clock: Clock,
        config: AccountingConfig,
        metrics: ControllerMetrics,
        cached: Callable[[Kind, str, str], JsonDict | None],
        emit: Callable[[PodEvent], Awaitable[object]] | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        pods: Callable[[], Iterable[JsonDict]] = lambda: (),
    ) -> None:
        self.store = store
        self.writer = writer
        self.clock = clock
        self.config = config
        self.metrics = metrics
        self.cached = cached
        self.emit = emit
        self.pods = pods  # every cached pod (a node lost closes its pods' intervals)
        self.is_leader = is_leader  # a follower records nothing (the leader reconciles when its term starts)
        self.reconciled = asyncio.Event()
        self._outage = False  # a Warning Event was posted for the current run of failed writes
        self._last_dropped = 0
        self._projects: ProjectIndex | None = None
        # Evictions asked for and not yet answered: a pod deleted meanwhile (the API server may
        # delete it before the eviction call returns) ends for the eviction's reason, not "deleted".
        self._evicting: dict[str, Eviction] = {}
        self._project_view: object = None

    # ------------------------------------------------------------------ building records

    def _project_of(self, view: SnapshotView, namespace: str) -> str | None:
        snapshot = view.snapshot
        if not snapshot.projects:
            return None
        if self._project_view is not snapshot.projects or self._projects is None:
            index = ProjectIndex.build(snapshot.projects, namespace_labels(snapshot.namespaces),
                                       {p.namespace for p in view.pods.values()})
            self._projects, self._project_view = index, snapshot.projects
        project = self._projects.project_of(namespace)
        return project.name if project is not None else None

    def start_of(self, view: SnapshotView, pod: Pod, raw: Mapping[str, Any], node: str, bound_at: float,
                 gpus: Sequence[int] = ()) -> IntervalStart:
        """The interval a binding of ``pod`` (its domain object and its API object) to ``node`` opens."""
        meta = raw.get("metadata") or {}
        node_labels = ((self.cached(Kind.NODE, "", node) or {}).get("metadata") or {}).get("labels") or {}
        indices = tuple(gpus) or _indices((meta.get("annotations") or {}).get(ANNOTATION_GPU_INDEX))
        whole = pod.requests.get(GPU, 0) // MILLI
        labels = pod.labels
        model = node_labels.get(LABEL_GPU_PRODUCT)
        return IntervalStart(
            pod_uid=_uid(raw), bound_at=bound_at, namespace=pod.namespace, pod_name=pod.name,
            queue=view.queue_of.get(pod.key) or _queue(view, pod), node=node,
            gpus=gpu_amount(whole, pod.gpu_blocks), project=self._project_of(view, pod.namespace),
            submitter=pod.submitted_by, pod_group=pod.group_label, priority_class=pod.priority_class_name,
            preemptible=bool(pod.preemptible_label), gpu_model=str(model) if model else None,
            gpu_indices=indices, gpu_blocks=pod.gpu_blocks,
            cpu_milli=int(pod.requests.get("cpu", 0)), memory_bytes=int(pod.requests.get("memory", 0)) // MILLI,
            created_at=pod.creation_time or None,
            labels={k: labels[k] for k in self.config.cost_centre_labels if k in labels},
        )

    # ------------------------------------------------------------------ the controller's hooks

    def bound(self, view: SnapshotView, bound: Iterable[tuple[PodKey, str, Sequence[int], float]]) -> None:
        """Pods the controller bound this cycle: (pod, node, GPU indices, bound time) each."""
        starts: list[LedgerEvent] = []
        for key, node, gpus, at in bound:
            pod = view.pods.get(key)
            namespace, _, name = key.partition("/")
            raw = self.cached(Kind.POD, namespace, name)
            if pod is None or raw is None or not _uid(raw):
                continue
            starts.append(self.start_of(view, pod, raw, node, at, gpus))
        if starts:
            self.writer.submit_many(starts)

    def evicting(self, evictions: Iterable[Eviction]) -> None:
        """The controller is about to ask for these evictions (:meth:`evicted` or :meth:`not_evicted`
        follows each)."""
        for eviction in evictions:
            self._evicting[str(eviction.pod)] = eviction

    def not_evicted(self, eviction: Eviction) -> None:
        self._evicting.pop(str(eviction.pod), None)

    def evicted(self, eviction: Eviction, now: float) -> None:
        """The controller evicted ``eviction.pod``: its interval ends now, for the preemptor (a second
        end of the same interval, from its deletion, changes nothing)."""
        self._evicting.pop(str(eviction.pod), None)
        namespace, _, name = eviction.pod.partition("/")
        raw = self.cached(Kind.POD, namespace, name)
        at = bound_time(raw) if raw is not None else None
        if raw is None or at is None or not _uid(raw):
            return
        self.writer.submit(IntervalEnd(_uid(raw), at, max(now, at), _EVICTED[eviction.reason], _preemptor(eviction)))

    def on_change(self, kind: Kind, old: JsonDict | None, new: JsonDict | None) -> None:
        """The informers' hook: a pod that ended or went away, a node that went away."""
        if old is None:
            return  # a new object (or the first list): nothing of it was open
        if kind is Kind.POD:
            if self.is_leader():
                self._pod_changed(old, new)
        elif kind is Kind.NODE and new is None and self.is_leader():
            self._node_gone(old)

    def _pod_changed(self, old: JsonDict | None, new: JsonDict | None) -> None:
        pod = new if new is not None else old
        if pod is None or old is None or _node(old) is None or not _ours(pod):
            return  # not bound before this change: nothing is open
        if _phase(old) in _ENDED:
            return  # already closed when it ended
        if new is not None:
            reason = _ENDED.get(_phase(new))
            if reason is None:
                return
            at = self.clock.now()
            finished = _finished_at(new)
            self._end(new, reason, at if finished is None else min(finished, at))
            return
        meta = old.get("metadata") or {}
        eviction = self._evicting.pop(f"{meta.get('namespace') or 'default'}/{meta.get('name')}", None)
        if eviction is not None:
            self._end(old, _EVICTED[eviction.reason], self.clock.now(), _preemptor(eviction))
            return
        if (meta.get("annotations") or {}).get(ANNOTATION_EVICTED_BY) == EndReason.OPERATOR.value:
            self._end(old, EndReason.OPERATOR, self.clock.now())  # `gpufleet admin` evicted it
            return
        node = _node(old)
        node_obj = self.cached(Kind.NODE, "", node) if node else None
        if node_obj is None or not _node_ready(node_obj):
            labels = ((node_obj or {}).get("metadata") or {}).get("labels") or {}
            spot = node_obj is not None and is_spot_node(labels)
            self._end(old, EndReason.SPOT_RECLAIM if spot else EndReason.NODE_FAILURE, self.clock.now())
        else:
            self._end(old, EndReason.DELETED, self.clock.now())

    def _node_gone(self, node: JsonDict) -> None:
        name = str((node.get("metadata") or {}).get("name") or "")
        labels = (node.get("metadata") or {}).get("labels") or {}
        reason = EndReason.SPOT_RECLAIM if is_spot_node(labels) else EndReason.NODE_FAILURE
        now = self.clock.now()
        for pod in self.pods():  # once per node lost: a walk over the cached pods
            if _node(pod) == name and _phase(pod) not in _ENDED and _ours(pod):
                self._end(pod, reason, now)

    def _end(self, pod: Mapping[str, Any], reason: EndReason, at: float, preemptor: str | None = None) -> None:
        bound_at = bound_time(pod)
        uid = _uid(pod)
        if bound_at is None or not uid:
            return
        self.writer.submit(IntervalEnd(uid, bound_at, max(at, bound_at), reason, preemptor))

    # ------------------------------------------------------------------ reconciliation

    def observed(self, view: SnapshotView, pods: Iterable[JsonDict]) -> list[ObservedPod]:
        """The bound pods of ours the informers show, as :func:`gpufleet.ledger.reconcile` takes them."""
        seen: list[ObservedPod] = []
        for raw in pods:
            node = _node(raw)
            at = bound_time(raw)
            if node is None or at is None or not _uid(raw) or not _ours(raw):
                continue
            meta = raw.get("metadata") or {}
            key = PodKey(f"{meta.get('namespace') or 'default'}/{meta.get('name')}")
            pod = view.pods.get(key) or _converted(raw)
            if pod is None:
                continue
            ended = _ENDED.get(_phase(raw))
            seen.append(ObservedPod(self.start_of(view, pod, raw, node, at), ended,
                                    _finished_at(raw) if ended is not None else None))
        return seen

    async def reconcile(self, view: Callable[[], SnapshotView], pods: Callable[[], list[JsonDict]],
                        retry: float = 5.0) -> None:
        """Reconcile the ledger with the informers' pods, trying again every ``retry`` seconds while
        the ledger cannot be read; sets :attr:`reconciled` when done."""
        while True:
            try:
                open_intervals = await asyncio.to_thread(self.store.open_intervals)
            except Exception as err:  # the database is away: the cycles go on, the buffer keeps events
                log.warning("ledger: cannot reconcile yet (%s); trying again in %gs", " ".join(str(err).split()),
                            retry)
                self.metrics.ledger_reconcile_failures.inc()
                await self.clock.sleep(retry)
                continue
            done = reconcile(open_intervals, self.observed(view(), pods()), self.clock.now())
            self.writer.submit_many([*done.starts, *done.ends])
            log.info("ledger: reconciled %d open intervals: %d opened, %d closed", len(open_intervals),
                     len(done.starts), len(done.ends))
            self.reconciled.set()
            return

    # ------------------------------------------------------------------ telemetry

    def on_page(self, page: TelemetryPage) -> None:
        """Utilisation samples of the pods with open intervals (mapped through the informers' cache)."""
        samples: list[LedgerEvent] = []
        if not self.is_leader():
            return
        for usage in page.pods.values():
            raw = self.cached(Kind.POD, usage.key.namespace, usage.key.pod)
            if raw is None or _node(raw) is None or _phase(raw) in _ENDED or not _ours(raw):
                continue
            uid = _uid(raw)
            at = bound_time(raw)
            if at is None or not uid or (usage.pod_uid and usage.pod_uid != uid) or page.at < at:
                continue
            fb = usage.fb_used_mib * _MIB if usage.fb_used_mib is not None else None
            samples.append(UtilisationSample(uid, at, page.at, usage.gpu_util_percent, usage.sm_active, fb))
        if samples:
            self.writer.submit_many(samples)

    # ------------------------------------------------------------------ the writer

    def on_status(self, status: WriterStatus) -> None:
        """The writer's status (from its thread): the metrics."""
        m = self.metrics
        m.ledger_buffered.set(status.buffered)
        m.ledger_failures.set(status.failures)
        if status.dropped > self._last_dropped:
            m.ledger_dropped.inc(status.dropped - self._last_dropped)
            self._last_dropped = status.dropped
        m.ledger_written.set(status.written)

    async def _offload(self, flush: Callable[[], bool]) -> bool:
        done = await asyncio.to_thread(flush)
        await self._after_flush()
        return done

    async def _after_flush(self) -> None:
        status = self.writer.status
        self.on_status(status)
        if status.failures and not self._outage:
            self._outage = True
            log.warning("ledger: writes failing (%s); %d events buffered, retrying", status.last_error,
                        status.buffered)
            if self.emit is not None and self.config.event_pod is not None:
                namespace, name = self.config.event_pod
                note = (f"usage ledger writes failing: {status.last_error}; {status.buffered} events buffered "
                        f"(up to {self.writer.capacity}), retrying")
                await self.emit(PodEvent(namespace, name, "", "LedgerWriteFailing", note, "Warning", "Accounting"))
        elif not status.failures and self._outage:
            self._outage = False
            log.warning("ledger: writes succeed again; %d events written in all", status.written)

    async def run(self, stop: asyncio.Event) -> None:
        """Flush the writer until ``stop`` is set (then once more)."""
        await self.writer.run(stop, interval=self.config.flush_interval, offload=self._offload,
                              sleep=partial(_sleep_or_stop, self.clock, stop))


async def _sleep_or_stop(clock: Clock, stop: asyncio.Event, seconds: float) -> None:
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    waiter = asyncio.ensure_future(stop.wait())
    _, pending = await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
