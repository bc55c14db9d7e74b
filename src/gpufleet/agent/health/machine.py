"""Each GPU's health as a state machine: the signals that mark a GPU, and the ways it comes back.

Pure: the agent reads NVML, then calls :func:`step` with the readings, the Xid events since the
last poll, the operator's uncordon requests and the time; :func:`step` returns every GPU's new
health, the changes (each becomes a Node Event) and the notices (signals that are told but mark
nothing). Nothing here reads a clock or does I/O, so the same inputs give the same answer.

States and events (the table :data:`TRANSITIONS`):

- ``BAD_SIGNAL``: a marking Xid (:mod:`.xids`), an Xid storm, double-bit ECC errors above the
  previous reading, a failed row remap, retired pages at or over the threshold, a GPU fallen off
  the bus. Always makes the GPU ``UNHEALTHY``, whatever it was.
- ``READ_FAILED``: the GPU could not be read (or gave no reading). A healthy GPU becomes
  ``UNKNOWN``; an unhealthy one stays ``UNHEALTHY`` (not being able to read it is no evidence it
  recovered) and its clean period starts again once it can be read.
- ``READ_CLEAN``: a reading with no bad signal. An ``UNKNOWN`` GPU becomes ``HEALTHY`` (it only
  became unknown from healthy, or had no history); an ``UNHEALTHY`` one starts its clean period.
- ``CLEAN_PERIOD_ELAPSED``: clean readings for ``HealthPolicy.clean_period_s`` since the last bad
  signal: ``UNHEALTHY`` becomes ``HEALTHY``.
- ``OPERATOR_UNCORDON``: ``gpufleet gpu uncordon NODE/INDEX``: ``UNHEALTHY`` becomes ``HEALTHY``
  at once. The same step then judges the reading: a condition that is still there (the GPU is
  lost, a row remap failed, too many retired pages) marks it unhealthy again, with a second change
  saying so; an operator cannot uncordon a GPU out of a condition the hardware still reports.

Signals are of two kinds. Edge signals (an Xid, an ECC count that rose, a storm) happen once: the
clean period counts from that step. Level signals (lost, remap failure, retired pages over the
threshold) hold while the hardware reports them: the clean period starts at the first reading
without them. A level signal that persists is not a new change at every poll, so the agent does
not rewrite the Node each second.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType

from gpufleet.agent.gpus import GpuHealthReading, XidEvent
from gpufleet.agent.health.xids import xid_rule

__all__ = [
    "TRANSITIONS",
    "GpuHealth",
    "GpuNotice",
    "HealthChange",
    "HealthEvent",
    "HealthPolicy",
    "HealthState",
    "HealthStep",
    "step",
]

MAX_REASON_CHARS = 512  # a reason is one line of an Event; several signals at once are cut, not dropped


class HealthState(Enum):
    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"  # listed in gpufleet.dev/unhealthy-gpus: nothing new is placed on it
    UNKNOWN = "Unknown"  # cannot be read; not listed (an agent that cannot read NVML must not drain a fleet)


class HealthEvent(Enum):
    BAD_SIGNAL = "BadSignal"
    READ_FAILED = "ReadFailed"
    READ_CLEAN = "ReadClean"
    CLEAN_PERIOD_ELAPSED = "CleanPeriodElapsed"
    OPERATOR_UNCORDON = "OperatorUncordon"


_H, _U, _K = HealthState.HEALTHY, HealthState.UNHEALTHY, HealthState.UNKNOWN
_E = HealthEvent

TRANSITIONS: Mapping[tuple[HealthState, HealthEvent], HealthState] = MappingProxyType({
    (_H, _E.BAD_SIGNAL): _U,
    (_U, _E.BAD_SIGNAL): _U,
    (_K, _E.BAD_SIGNAL): _U,
    (_H, _E.READ_FAILED): _K,
    (_U, _E.READ_FAILED): _U,  # unreadable is no evidence of recovery
    (_K, _E.READ_FAILED): _K,
    (_H, _E.READ_CLEAN): _H,
    (_U, _E.READ_CLEAN): _U,  # clean, but not yet for the clean period
    (_K, _E.READ_CLEAN): _H,
    (_U, _E.CLEAN_PERIOD_ELAPSED): _H,
    (_H, _E.OPERATOR_UNCORDON): _H,
    (_U, _E.OPERATOR_UNCORDON): _H,
    (_K, _E.OPERATOR_UNCORDON): _K,  # uncordon clears a mark, it does not make an unreadable GPU readable
})


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    """The thresholds of the health rules (the agent's configuration)."""

    # How long a GPU must show no bad signal before it is used again. An hour outlasts the usual
    # flapping (a GSP that times out every few minutes) without keeping a GPU out for a day.
    clean_period_s: float = 3600.0
    # Retired pages (single- plus double-bit) at which the GPU is taken out: 60 is the limit DCGM's
    # health check and diagnostics have used (DCGM_LIMIT_MAX_RETIRED_PAGES, later 63 to match NVIDIA's
    # field diagnostic), the point where NVIDIA considers a pre-Ampere board for RMA.
    retired_pages_threshold: int = 60
    # The storm rule: application Xids at this many polls within the window mark the GPU (a poll's burst
    # counts once). A single crash-looping pod restarts at most about six times in ten minutes (the
    # kubelet's back-off doubles from 10 s to 5 min), so ten in ten minutes means several programs fail.
    storm_xids: int = 10
    storm_window_s: float = 600.0
    # A page retirement or row remap waiting for a GPU reset: DCGM reports it as a warning (the GPU
    # keeps working; the DBE that caused it is itself a bad signal), so by default it is a notice.
    pending_marks_unhealthy: bool = False

    def __post_init__(self) -> None:
        if not self.clean_period_s > 0:
            raise ValueError(f"clean_period_s must be positive, got {self.clean_period_s}")
        if self.retired_pages_threshold < 1:
            raise ValueError(f"retired_pages_threshold must be at least 1, got {self.retired_pages_threshold}")
        if self.storm_xids < 1:
            raise ValueError(f"storm_xids must be at least 1, got {self.storm_xids}")
        if not self.storm_window_s > 0:
            raise ValueError(f"storm_window_s must be positive, got {self.storm_window_s}")


@dataclass(frozen=True, slots=True)
class GpuHealth:
    """One GPU's health and what the rules remember about it (kept on the Node across restarts)."""

    index: int
    uuid: str
    state: HealthState
    reason: str  # one line naming the signal, e.g. "Xid 79: GPU has fallen off the bus; action: reboot the node"
    since: float  # when it entered this state
    last_bad_at: float | None = None  # the last bad signal (a level signal: when it appeared)
    clean_since: float | None = None  # start of the current run of clean readings; None while a signal holds
    ecc_dbe_baseline: int | None = None  # the double-bit ECC count of the last reading: only a rise is bad
    pending: bool = False  # the last reading had a page retirement or row remap waiting for a reset
    app_xid_times: tuple[float, ...] = field(default=())  # polls with storm-counted Xids in the window, oldest first


@dataclass(frozen=True, slots=True)
class HealthChange:
    """A GPU's state changed (or an unhealthy GPU got a new bad signal): the agent's Node Event."""

    index: int
    uuid: str
    previous: HealthState
    current: HealthState
    event: HealthEvent
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class GpuNotice:
    """A signal told but marking nothing: an application Xid, an unknown Xid, a pending remap..."""

    index: int
    uuid: str
    message: str
    at: float


@dataclass(frozen=True, slots=True)
class HealthStep:
    gpus: tuple[GpuHealth, ...]  # in index order
    changes: tuple[HealthChange, ...]
    notices: tuple[GpuNotice, ...]


def _cut(text: str) -> str:
    return text if len(text) <= MAX_REASON_CHARS else text[: MAX_REASON_CHARS - 1] + "…"


def _seconds(value: float) -> str:
    return f"{value:g} s"


@dataclass(slots=True)
class _Judgement:
    """What one step's inputs say about one GPU."""

    edge: list[str] = field(default_factory=list)  # signals that happened at this step
    level: list[str] = field(default_factory=list)  # conditions the reading still reports
    read_failed: str | None = None
    notices: list[str] = field(default_factory=list)
    baseline: int | None = None
    pending: bool = False
    app_xid_times: tuple[float, ...] = ()


def _judge_xids(gpu: GpuHealth, events: Iterable[XidEvent], now: float, policy: HealthPolicy,
                out: _Judgement) -> None:
    times = [t for t in gpu.app_xid_times if now - t < policy.storm_window_s]
    counted = False
    for event in events:
        rule = xid_rule(event.xid)
        if rule.marks_unhealthy:
            out.edge.append(rule.reason())
        else:
            out.notices.append(f"{rule.reason()} (reported; the GPU is not marked)")
        counted = counted or rule.counts_toward_storm
    if counted:
        # One count per poll, not per event: one fault of one program can log a burst of Xid 13s (one
        # per SM), which must not pass for a storm.
        times.append(now)
        if len(times) >= policy.storm_xids:
            out.edge.append(f"Xid storm: application Xids at {len(times)} polls within "
                            f"{_seconds(policy.storm_window_s)} (threshold {policy.storm_xids}): several programs "
                            "fail on this GPU; action: reset the GPU")
    out.app_xid_times = tuple(times[-policy.storm_xids:])  # all the rule needs: bounded on the Node


def _judge_reading(gpu: GpuHealth, reading: GpuHealthReading | None, policy: HealthPolicy,
                   out: _Judgement) -> None:
    out.baseline, out.pending = gpu.ecc_dbe_baseline, gpu.pending
    if reading is None:
        out.read_failed = "no reading (NVML did not list it)"
        return
    if reading.lost:
        out.level.append("GPU has fallen off the bus (NVML: GPU is lost); action: reboot the node")
        return
    if reading.error is not None:
        out.read_failed = reading.error
        return
    if reading.row_remap_failure:
        out.level.append("row remapping failed: memory cannot be repaired; action: reset the GPU, replace if it stays")
    counts = [c for c in (reading.retired_pages_sbe, reading.retired_pages_dbe) if c is not None]
    if counts and sum(counts) >= policy.retired_pages_threshold:
        out.level.append(f"{sum(counts)} retired pages (threshold {policy.retired_pages_threshold}); "
                         "action: replace the GPU")
    pending = bool(reading.retired_pages_pending) or bool(reading.row_remap_pending)
    if pending and policy.pending_marks_unhealthy:
        out.level.append("a page retirement or row remap waits for a GPU reset; action: reset the GPU")
    elif pending and not gpu.pending:
        out.notices.append("a page retirement or row remap waits for a GPU reset (reset it when idle)")
    out.pending = pending
    dbe = reading.ecc_dbe_volatile
    if dbe is None:
        return
    if gpu.ecc_dbe_baseline is None:
        if dbe > 0:  # no earlier reading: a DBE since the driver loaded and no reset since
            out.edge.append(f"{dbe} double-bit ECC errors since the driver loaded (no earlier reading); "
                            "action: reset the GPU")
    elif dbe > gpu.ecc_dbe_baseline:
        out.edge.append(f"double-bit ECC errors rose from {gpu.ecc_dbe_baseline} to {dbe}; action: reset the GPU")
    out.baseline = dbe  # a count that only persists is not a new error; a smaller one means the driver reloaded


def _event(gpu: GpuHealth, judged: _Judgement, now: float, policy: HealthPolicy) -> HealthEvent:
    if judged.edge or judged.level:
        return HealthEvent.BAD_SIGNAL
    if judged.read_failed is not None:
        return HealthEvent.READ_FAILED
    if (gpu.state is HealthState.UNHEALTHY and gpu.clean_since is not None
            and now - gpu.clean_since >= policy.clean_period_s):
        return HealthEvent.CLEAN_PERIOD_ELAPSED
    return HealthEvent.READ_CLEAN


def _apply(gpu: GpuHealth, event: HealthEvent, judged: _Judgement, now: float, policy: HealthPolicy,
           first_sight: bool) -> tuple[GpuHealth, HealthChange | None]:
    state = TRANSITIONS[(gpu.state, event)]
    kept = replace(gpu, ecc_dbe_baseline=judged.baseline, pending=judged.pending,
                   app_xid_times=judged.app_xid_times)
    if event is HealthEvent.BAD_SIGNAL:
        # A new change when something happened now: a state change, an edge signal, or a level signal
        # that the previous reading did not have (clean_since was running, or its words are new).
        new_bad = (gpu.state is not state or bool(judged.edge) or gpu.clean_since is not None
                   or any(message not in gpu.reason for message in judged.level))
        if not new_bad:
            return replace(kept, clean_since=None), None
        reason = _cut("; ".join(dict.fromkeys(judged.level + judged.edge)))  # lasting ones first: never cut
        after = replace(kept, state=state, reason=reason, since=now if gpu.state is not state else gpu.since,
                        last_bad_at=now,
                        clean_since=None if judged.level or judged.read_failed is not None else now)
    elif event is HealthEvent.READ_FAILED:
        if state is gpu.state and not first_sight:  # unknown stays unknown, unhealthy stays unhealthy
            clean_since = None if state is HealthState.UNHEALTHY else kept.clean_since
            return replace(kept, clean_since=clean_since), None
        reason = _cut(f"cannot read the GPU: {judged.read_failed}")
        after = replace(kept, state=state, reason=reason, since=now if state is not gpu.state else gpu.since,
                        clean_since=None)
    elif event is HealthEvent.CLEAN_PERIOD_ELAPSED:
        reason = f"no bad signal for {_seconds(policy.clean_period_s)}"
        after = replace(kept, state=state, reason=reason, since=now, clean_since=None)
    else:  # READ_CLEAN
        if state is gpu.state:
            if state is HealthState.UNHEALTHY and gpu.clean_since is None:
                return replace(kept, clean_since=now), None  # the clean period starts
            return kept, None
        reason = "no bad signal" if first_sight else "readable again, no bad signal"
        after = replace(kept, state=state, reason=reason, since=now, clean_since=None)
        if first_sight:
            return after, None  # a GPU first seen healthy is no event: an agent rollout is not news
    return after, HealthChange(gpu.index, gpu.uuid, gpu.state, state, event, after.reason, now)


def _uncordon(gpu: GpuHealth, now: float) -> tuple[GpuHealth, HealthChange | None, str | None]:
    state = TRANSITIONS[(gpu.state, HealthEvent.OPERATOR_UNCORDON)]
    if gpu.state is not HealthState.UNHEALTHY:
        return gpu, None, f"uncordon ignored: the GPU is {gpu.state.value.lower()}, not unhealthy"
    # The operator vouches for the GPU: its storm count starts afresh; the ECC baseline stays, so the
    # count that marked it does not mark it again.
    after = replace(gpu, state=state, reason="uncordoned by the operator", since=now, clean_since=None,
                    app_xid_times=())
    change = HealthChange(gpu.index, gpu.uuid, gpu.state, state, HealthEvent.OPERATOR_UNCORDON, after.reason, now)
    return after, change, None


def step(previous: Mapping[int, GpuHealth], readings: Iterable[GpuHealthReading], events: Iterable[XidEvent],
         uncordoned: Collection[int], now: float, policy: HealthPolicy) -> HealthStep:
    """Every GPU's health after one poll at ``now`` (see the module docstring for the rules).

    ``previous`` is the last step's GPUs by index (empty on the first poll or with unknown history);
    ``readings`` this poll's counters; ``events`` the Xids since the last poll, oldest first;
    ``uncordoned`` the indices the operator asked to put back in service. GPUs are matched by index;
    an index whose UUID changed (the GPU was replaced) starts a fresh history, with a notice.
    """
    by_index = {reading.index: reading for reading in readings}
    xids_by_index: dict[int, list[XidEvent]] = {}
    for event in events:
        xids_by_index.setdefault(event.index, []).append(event)
    gpus: list[GpuHealth] = []
    changes: list[HealthChange] = []
    notices: list[GpuNotice] = []
    for index in sorted(set(previous) | set(by_index) | set(xids_by_index) | set(uncordoned)):
        reading = by_index.get(index)
        xids = xids_by_index.get(index, [])
        before = previous.get(index)
        uuid = (reading.uuid if reading is not None and reading.uuid else "") or next(
            (x.uuid for x in xids if x.uuid), before.uuid if before is not None else "")
        if before is None and reading is None and not xids:
            notices.append(GpuNotice(index, uuid, "uncordon ignored: no such GPU", now))
            continue
        if before is not None and before.uuid and uuid and before.uuid != uuid:
            notices.append(GpuNotice(index, uuid, f"now {uuid} (was {before.uuid}): its history starts afresh", now))
            before = None
        first_sight = before is None
        gpu = before or GpuHealth(index, uuid, HealthState.UNKNOWN, "no reading yet", since=now)
        gpu = replace(gpu, uuid=uuid or gpu.uuid)
        if index in uncordoned:
            gpu, change, ignored = _uncordon(gpu, now)
            if change is not None:
                changes.append(change)
            if ignored is not None:
                notices.append(GpuNotice(index, gpu.uuid, ignored, now))
        judged = _Judgement()
        _judge_xids(gpu, xids, now, policy, judged)
        _judge_reading(gpu, reading, policy, judged)
        gpu, change = _apply(gpu, _event(gpu, judged, now, policy), judged, now, policy, first_sight)
        if change is not None:
            changes.append(change)
        notices.extend(GpuNotice(index, gpu.uuid, message, now) for message in judged.notices)
        gpus.append(gpu)
    return HealthStep(tuple(gpus), tuple(changes), tuple(notices))
