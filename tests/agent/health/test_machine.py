"""Each health rule and its recovery, one GPU at a time (the time is an argument: no clock, no sleep)."""

from __future__ import annotations

import pytest

from gpufleet.agent.health import (
    TRANSITIONS,
    HealthEvent,
    HealthPolicy,
    HealthState,
    HealthStep,
)

from .steps import POLICY, by_index, reading, run, uuid_of, xid

H, U, K = HealthState.HEALTHY, HealthState.UNHEALTHY, HealthState.UNKNOWN
HOUR = POLICY.clean_period_s


def state(result: HealthStep, index: int = 0) -> HealthState:
    return by_index(result)[index].state


def healthy_at(now: float = 0.0, index: int = 0) -> HealthStep:
    return run({}, now, [reading(index)])


def test_the_table_covers_every_state_and_event_it_needs() -> None:
    """Every state reacts to every per-reading event; the clean period only concerns an unhealthy GPU."""
    for current in HealthState:
        for event in (HealthEvent.BAD_SIGNAL, HealthEvent.READ_FAILED, HealthEvent.READ_CLEAN,
                      HealthEvent.OPERATOR_UNCORDON):
            assert (current, event) in TRANSITIONS
        assert TRANSITIONS[(current, HealthEvent.BAD_SIGNAL)] is U
    assert TRANSITIONS[(U, HealthEvent.CLEAN_PERIOD_ELAPSED)] is H


def test_a_gpu_first_seen_clean_is_healthy_without_a_change() -> None:
    result = healthy_at()
    assert state(result) is H
    assert result.changes == ()


# ------------------------------------------------------------------------------------------ Xids

@pytest.mark.parametrize("number", [48, 62, 64, 74, 79, 95, 119, 120])
def test_a_marking_xid_makes_the_gpu_unhealthy_and_the_clean_period_brings_it_back(number: int) -> None:
    marked = run(healthy_at(), 10.0, [reading()], [xid(number)])
    gpu = by_index(marked)[0]
    assert gpu.state is U
    assert gpu.reason.startswith(f"Xid {number}: ")
    assert gpu.last_bad_at == 10.0
    (change,) = marked.changes
    assert (change.previous, change.current, change.event) == (H, U, HealthEvent.BAD_SIGNAL)
    assert state(run(marked, 10.0 + HOUR - 1, [reading()])) is U
    back = run(marked, 10.0 + HOUR, [reading()])
    assert state(back) is H
    assert back.changes[0].event is HealthEvent.CLEAN_PERIOD_ELAPSED


def test_xid_79_reason_names_the_signal_and_the_action() -> None:
    marked = run(healthy_at(), 1.0, [reading()], [xid(79)])
    assert by_index(marked)[0].reason == "Xid 79: GPU has fallen off the bus; action: reboot the node"


@pytest.mark.parametrize("number", [13, 31, 43, 45, 63, 68, 69, 92, 94, 154, 4242])
def test_an_application_informational_or_unknown_xid_is_a_notice_not_a_mark(number: int) -> None:
    result = run(healthy_at(), 1.0, [reading()], [xid(number)])
    assert state(result) is H
    assert result.changes == ()
    (notice,) = result.notices
    assert notice.message.startswith(f"Xid {number}: ")
    assert "not marked" in notice.message


def test_a_storm_of_application_xids_marks_the_gpu() -> None:
    policy = HealthPolicy(storm_xids=3, storm_window_s=60.0)
    result = run(healthy_at(), 0.0, [reading()], [xid(13)], policy=policy)
    result = run(result, 20.0, [reading()], [xid(31)], policy=policy)
    assert state(result) is H
    result = run(result, 40.0, [reading()], [xid(13)], policy=policy)
    assert state(result) is U
    assert by_index(result)[0].reason.startswith("Xid storm: application Xids at 3 polls within 60 s")


def test_a_burst_of_application_xids_in_one_poll_counts_once() -> None:
    policy = HealthPolicy(storm_xids=3, storm_window_s=60.0)
    result = run(healthy_at(), 1.0, [reading()], [xid(13)] * 20, policy=policy)
    assert state(result) is H
    assert by_index(result)[0].app_xid_times == (1.0,)


def test_application_xids_spread_beyond_the_window_are_no_storm() -> None:
    policy = HealthPolicy(storm_xids=3, storm_window_s=60.0)
    result = healthy_at()
    for now in (0.0, 30.0, 60.0, 90.0, 120.0):  # never three within 60 s
        result = run(result, now, [reading()], [xid(13)], policy=policy)
        assert state(result) is H
    assert len(by_index(result)[0].app_xid_times) == 2


def test_xid_45_never_makes_a_storm() -> None:
    policy = HealthPolicy(storm_xids=2, storm_window_s=60.0)
    result = run(healthy_at(), 1.0, [reading()], [xid(45)] * 5, policy=policy)
    assert state(result) is H


def test_a_new_marking_xid_on_an_unhealthy_gpu_is_a_change_and_restarts_the_clean_period() -> None:
    marked = run(healthy_at(), 0.0, [reading()], [xid(119)])
    again = run(marked, 1800.0, [reading()], [xid(120)])
    (change,) = again.changes
    assert (change.previous, change.current) == (U, U)
    assert by_index(again)[0].reason.startswith("Xid 120")
    assert state(run(again, HOUR, [reading()])) is U
    assert state(run(again, 1800.0 + HOUR, [reading()])) is H


# ---------------------------------------------------------------------------------- ECC counters

def test_a_rise_of_the_double_bit_count_marks_but_a_persisting_count_does_not() -> None:
    start = run({}, 0.0, [reading(ecc_dbe_volatile=0)])
    risen = run(start, 1.0, [reading(ecc_dbe_volatile=2)])
    assert state(risen) is U
    assert "rose from 0 to 2" in by_index(risen)[0].reason
    back = run(risen, 1.0 + HOUR, [reading(ecc_dbe_volatile=2)])  # the count persists: no new error
    assert state(back) is H
    assert state(run(back, 2.0 + HOUR, [reading(ecc_dbe_volatile=3)])) is U


def test_a_smaller_double_bit_count_is_a_driver_reload_not_an_error() -> None:
    start = run({}, 0.0, [reading(ecc_dbe_volatile=5)])  # first reading: 5 since the driver loaded
    assert state(start) is U
    reloaded = run(start, 10.0, [reading(ecc_dbe_volatile=0)])
    assert by_index(reloaded)[0].ecc_dbe_baseline == 0
    assert reloaded.changes == ()


def test_a_first_reading_with_double_bit_errors_marks_the_gpu() -> None:
    result = run({}, 0.0, [reading(ecc_dbe_volatile=1)])
    assert state(result) is U
    assert "no earlier reading" in by_index(result)[0].reason


# --------------------------------------------------------------------- level signals of the reading

@pytest.mark.parametrize(("counters", "words"), [
    ({"lost": True}, "fallen off the bus"),
    ({"row_remap_failure": True}, "row remapping failed"),
    ({"retired_pages_sbe": 40, "retired_pages_dbe": 20}, "60 retired pages"),
])
def test_a_persistent_condition_holds_the_gpu_until_it_clears_then_the_clean_period(
        counters: dict[str, object], words: str) -> None:
    marked = run(healthy_at(), 0.0, [reading(**counters)])
    assert state(marked) is U
    assert words in by_index(marked)[0].reason
    held = run(marked, 2 * HOUR, [reading(**counters)])  # still reported: still unhealthy, no new change
    assert state(held) is U and held.changes == ()
    assert by_index(held)[0].clean_since is None
    cleared = run(held, 3 * HOUR, [reading()])  # the first clean reading starts the clean period
    assert state(cleared) is U
    assert by_index(cleared)[0].clean_since == 3 * HOUR
    assert state(run(cleared, 4 * HOUR - 1, [reading()])) is U
    assert state(run(cleared, 4 * HOUR, [reading()])) is H


def test_retired_pages_below_the_threshold_do_not_mark() -> None:
    result = run(healthy_at(), 1.0, [reading(retired_pages_sbe=30, retired_pages_dbe=29)])
    assert state(result) is H


def test_a_lost_gpu_is_unhealthy_even_when_the_reading_also_failed() -> None:
    result = run(healthy_at(), 1.0, [reading(lost=True, error="nvmlDeviceGetHandleByIndex: GPU is lost")])
    assert state(result) is U


def test_a_pending_remap_is_a_notice_once_and_marks_only_by_policy() -> None:
    noticed = run(healthy_at(), 1.0, [reading(row_remap_pending=True)])
    assert state(noticed) is H
    assert [n.message for n in noticed.notices] == [
        "a page retirement or row remap waits for a GPU reset (reset it when idle)"]
    assert run(noticed, 2.0, [reading(row_remap_pending=True)]).notices == ()
    strict = HealthPolicy(pending_marks_unhealthy=True)
    assert state(run(healthy_at(), 1.0, [reading(retired_pages_pending=True)], policy=strict)) is U


# -------------------------------------------------------------------------------- read errors

def test_a_read_error_makes_a_healthy_gpu_unknown_and_a_clean_reading_brings_it_back() -> None:
    unknown = run(healthy_at(), 1.0, [reading(error="nvmlDeviceGetTotalEccErrors: Unknown Error")])
    gpu = by_index(unknown)[0]
    assert gpu.state is K
    assert gpu.reason == "cannot read the GPU: nvmlDeviceGetTotalEccErrors: Unknown Error"
    assert unknown.changes[0].event is HealthEvent.READ_FAILED
    back = run(unknown, 2.0, [reading()])
    assert state(back) is H
    assert (back.changes[0].previous, back.changes[0].current) == (K, H)


def test_a_gpu_missing_from_the_readings_is_unknown() -> None:
    result = run(healthy_at(), 1.0, [])
    assert state(result) is K
    assert "no reading" in by_index(result)[0].reason


def test_a_read_error_keeps_an_unhealthy_gpu_unhealthy_and_restarts_its_clean_period() -> None:
    marked = run(healthy_at(), 0.0, [reading()], [xid(79)])
    unreadable = run(marked, 100.0, [reading(error="boom")])
    assert state(unreadable) is U and unreadable.changes == ()
    readable = run(unreadable, 200.0, [reading()])
    assert state(run(readable, HOUR + 100.0, [reading()])) is U  # counted from the reading at 200, not the Xid
    assert state(run(readable, HOUR + 200.0, [reading()])) is H


# -------------------------------------------------------------------------- clean period boundary

def test_the_clean_period_ends_exactly_at_its_boundary() -> None:
    policy = HealthPolicy(clean_period_s=100.0)
    marked = run(healthy_at(), 50.0, [reading()], [xid(48)], policy=policy)
    assert state(run(marked, 149.999, [reading()], policy=policy)) is U
    assert state(run(marked, 150.0, [reading()], policy=policy)) is H


# ----------------------------------------------------------------------------------- uncordon

def test_uncordon_brings_an_unhealthy_gpu_back_at_once() -> None:
    marked = run(healthy_at(), 0.0, [reading()], [xid(119)])
    back = run(marked, 5.0, [reading()], uncordoned=[0])
    assert state(back) is H
    (change,) = back.changes
    assert change.event is HealthEvent.OPERATOR_UNCORDON
    assert by_index(back)[0].reason == "uncordoned by the operator"


def test_uncordon_of_a_gpu_that_is_still_lost_marks_it_again_with_a_second_change() -> None:
    marked = run(healthy_at(), 0.0, [reading(lost=True)])
    result = run(marked, 5.0, [reading(lost=True)], uncordoned=[0])
    assert state(result) is U
    assert [(c.previous, c.current, c.event) for c in result.changes] == [
        (U, H, HealthEvent.OPERATOR_UNCORDON), (H, U, HealthEvent.BAD_SIGNAL)]


def test_uncordon_does_not_re_trigger_on_the_ecc_count_that_marked_the_gpu() -> None:
    start = run({}, 0.0, [reading(ecc_dbe_volatile=0)])
    marked = run(start, 1.0, [reading(ecc_dbe_volatile=1)])
    back = run(marked, 2.0, [reading(ecc_dbe_volatile=1)], uncordoned=[0])
    assert state(back) is H


def test_uncordon_of_a_healthy_or_missing_gpu_is_a_notice() -> None:
    result = run(healthy_at(), 1.0, [reading()], uncordoned=[0, 7])
    assert state(result) is H and result.changes == ()
    assert sorted(n.message for n in result.notices) == [
        "uncordon ignored: no such GPU", "uncordon ignored: the GPU is healthy, not unhealthy"]
    assert 7 not in by_index(result)


# ---------------------------------------------------------------------------- several GPUs

def test_only_the_bad_gpu_of_eight_is_marked() -> None:
    eight = [reading(i) for i in range(8)]
    start = run({}, 0.0, eight)
    result = run(start, 1.0, eight, [xid(79, index=3)])
    assert [gpu.index for gpu in result.gpus if gpu.state is U] == [3]
    assert [gpu.index for gpu in result.gpus] == list(range(8))


def test_a_new_uuid_at_an_index_starts_a_fresh_history() -> None:
    marked = run(healthy_at(), 0.0, [reading()], [xid(79)])
    replaced = run(marked, 10.0, [reading(0).__class__(index=0, uuid="GPU-replacement")])
    gpu = by_index(replaced)[0]
    assert gpu.state is H and gpu.uuid == "GPU-replacement"
    assert any(f"was {uuid_of(0)}" in n.message for n in replaced.notices)


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="clean_period_s"):
        HealthPolicy(clean_period_s=0)
    with pytest.raises(ValueError, match="storm_xids"):
        HealthPolicy(storm_xids=0)


def test_a_new_level_condition_on_an_already_unhealthy_gpu_is_a_change_once() -> None:
    marked = run(healthy_at(), 0.0, [reading(row_remap_failure=True)])
    both = run(marked, 1.0, [reading(row_remap_failure=True, retired_pages_dbe=60)])
    (change,) = both.changes
    assert "row remapping failed" in change.reason and "60 retired pages" in change.reason
    assert run(both, 2.0, [reading(row_remap_failure=True, retired_pages_dbe=60)]).changes == ()


def test_the_same_xid_twice_in_one_poll_is_named_once() -> None:
    marked = run(healthy_at(), 1.0, [reading()], [xid(79), xid(79)])
    assert by_index(marked)[0].reason == "Xid 79: GPU has fallen off the bus; action: reboot the node"
