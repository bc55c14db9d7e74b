"""Invariants of the health rules over arbitrary histories (hypothesis)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.agent.gpus import GpuHealthReading, XidEvent
from gpufleet.agent.health import (
    XID_CATALOG,
    HealthPolicy,
    HealthState,
    HealthStep,
    dump_health,
    load_health,
    node_condition,
    step,
    unhealthy_indices,
    xid_rule,
)

from .steps import by_index, uuid_of

POLICY = HealthPolicy(clean_period_s=600.0, retired_pages_threshold=60, storm_xids=3, storm_window_s=120.0)
INDICES = st.integers(0, 3)


@st.composite
def readings(draw: st.DrawFn, index: int) -> GpuHealthReading:
    kind = draw(st.sampled_from(["clean", "counters", "error", "lost"]))
    if kind == "clean":
        return GpuHealthReading(index, uuid_of(index))
    if kind == "error":
        return GpuHealthReading(index, uuid_of(index), error="nvmlDeviceGetTotalEccErrors: Unknown Error")
    if kind == "lost":
        return GpuHealthReading(index, uuid_of(index), lost=True)
    return GpuHealthReading(
        index, uuid_of(index),
        ecc_dbe_volatile=draw(st.none() | st.integers(0, 5)),
        retired_pages_sbe=draw(st.none() | st.integers(0, 40)),
        retired_pages_dbe=draw(st.none() | st.integers(0, 40)),
        retired_pages_pending=draw(st.none() | st.booleans()),
        row_remap_failure=draw(st.none() | st.booleans()),
        row_remap_pending=draw(st.none() | st.booleans()),
    )


@dataclass(frozen=True)
class Poll:
    dt: float
    readings: tuple[GpuHealthReading, ...]
    events: tuple[XidEvent, ...]
    uncordoned: frozenset[int]


XIDS = st.sampled_from(sorted(XID_CATALOG)) | st.integers(0, 300)


@st.composite
def polls(draw: st.DrawFn) -> Poll:
    present = draw(st.frozensets(INDICES))
    return Poll(
        dt=draw(st.sampled_from([0.0, 1.0, 30.0, 120.0, 600.0, 1000.0])),
        readings=tuple(draw(readings(i)) for i in sorted(present)),
        events=tuple(XidEvent(i, uuid_of(i), x) for i, x in draw(st.lists(st.tuples(INDICES, XIDS), max_size=4))),
        uncordoned=draw(st.frozensets(INDICES, max_size=2)),
    )


def replay(history: list[Poll]) -> tuple[HealthStep, float]:
    result, now = HealthStep((), (), ()), 0.0
    for poll in history:
        now += poll.dt
        result = step(by_index(result), poll.readings, poll.events, poll.uncordoned, now, POLICY)
    return result, now


def _marks(poll: Poll, index: int) -> bool:
    if any(e.index == index and xid_rule(e.xid).marks_unhealthy for e in poll.events):
        return True
    for r in poll.readings:
        if r.index == index:
            retired = (r.retired_pages_sbe or 0) + (r.retired_pages_dbe or 0)
            return r.lost or bool(r.row_remap_failure) or retired >= POLICY.retired_pages_threshold
    return False


HISTORIES = st.lists(polls(), max_size=8)


@settings(max_examples=150, deadline=None)
@given(HISTORIES, polls())
def test_a_bad_signal_always_makes_the_gpu_unhealthy_at_that_step(history: list[Poll], poll: Poll) -> None:
    before, now = replay(history)
    after = step(by_index(before), poll.readings, poll.events, poll.uncordoned, now + poll.dt, POLICY)
    for gpu in after.gpus:
        if _marks(poll, gpu.index):
            assert gpu.state is HealthState.UNHEALTHY, gpu


@settings(max_examples=150, deadline=None)
@given(HISTORIES, polls())
def test_the_step_is_deterministic_and_idempotent_without_new_input(history: list[Poll], poll: Poll) -> None:
    before, now = replay(history)
    now += poll.dt
    first = step(by_index(before), poll.readings, poll.events, poll.uncordoned, now, POLICY)
    assert step(by_index(before), poll.readings, poll.events, poll.uncordoned, now, POLICY) == first
    again = step(by_index(first), poll.readings, (), frozenset(), now, POLICY)
    assert again.gpus == first.gpus
    assert again.changes == () and again.notices == ()


@settings(max_examples=150, deadline=None)
@given(HISTORIES)
def test_a_gpu_with_no_bad_signal_for_the_clean_period_is_healthy(history: list[Poll]) -> None:
    before, now = replay(history)
    clean = tuple(GpuHealthReading(gpu.index, gpu.uuid) for gpu in before.gpus)
    started = step(by_index(before), clean, (), frozenset(), now + 1.0, POLICY)
    assert all(gpu.state is not HealthState.UNKNOWN for gpu in started.gpus)
    later = step(by_index(started), clean, (), frozenset(), now + 1.0 + POLICY.clean_period_s, POLICY)
    assert all(gpu.state is HealthState.HEALTHY for gpu in later.gpus)


@settings(max_examples=150, deadline=None)
@given(HISTORIES)
def test_the_state_round_trips_through_the_annotation(history: list[Poll]) -> None:
    result, _ = replay(history)
    loaded = load_health(dump_health(result.gpus))
    assert loaded.error is None
    assert tuple(loaded.gpus.values()) == result.gpus


@settings(max_examples=100, deadline=None)
@given(HISTORIES)
def test_the_node_summaries_agree_with_the_states(history: list[Poll]) -> None:
    result, _ = replay(history)
    unhealthy = unhealthy_indices(result.gpus)
    assert unhealthy == {gpu.index for gpu in result.gpus if gpu.state is HealthState.UNHEALTHY}
    condition = node_condition(result.gpus)
    if unhealthy:
        assert condition.status == "False"
    elif result.gpus and all(gpu.state is HealthState.HEALTHY for gpu in result.gpus):
        assert condition.status == "True"
    else:
        assert condition.status == "Unknown"
