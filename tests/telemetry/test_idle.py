"""The idle rule with an injected clock: transitions, the unknown state, settings (no test waits)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.telemetry import IdleSettings, IdleState, IdleTracker, PodKey, PodUsage, TelemetryPage

POD = PodKey("team-vision", "notebook-ana")
MIN = 60.0


def sample(at: float, util: float | None, key: PodKey = POD) -> PodUsage:
    return PodUsage(key=key, at=at, gpus=("GPU-a",), gpu_util_percent=util, sm_active=None, fb_used_mib=100.0)


def test_idle_after_thirty_minutes_under_five_percent() -> None:
    tracker = IdleTracker()
    tracker.allocate(POD, 0.0)
    assert tracker.state(POD, 0.0) is IdleState.UNKNOWN
    assert tracker.evaluate(0.0) == []
    t = 0.0
    for t in range(0, int(31 * MIN) + 1, 30):  # a sample every 30 s, all at 2 %
        tracker.observe(sample(float(t), 2.0))
        if t == 0:
            (change,) = tracker.evaluate(0.0)
            assert (change.before, change.after) == (IdleState.UNKNOWN, IdleState.ACTIVE)
        if t == 30 * MIN - 30:
            assert tracker.state(POD, float(t)) is IdleState.ACTIVE
            assert tracker.evaluate(float(t)) == []
    assert tracker.state(POD, 30 * MIN) is IdleState.IDLE
    (change,) = tracker.evaluate(30 * MIN)
    assert (change.before, change.after, change.low_since) == (IdleState.ACTIVE, IdleState.IDLE, 0.0)
    assert tracker.idle(t) == [POD] and tracker.idle_since(POD, t) == 30 * MIN
    # one busy sample ends the idle run at once
    tracker.observe(sample(t + 30, 60.0))
    (change,) = tracker.evaluate(t + 30)
    assert (change.before, change.after) == (IdleState.IDLE, IdleState.ACTIVE)
    assert tracker.idle_since(POD, t + 30) is None


def test_a_busy_sample_restarts_the_window() -> None:
    tracker = IdleTracker()
    tracker.allocate(POD, 0.0)
    tracker.observe(sample(0.0, 1.0))
    tracker.observe(sample(20 * MIN, 5.0))  # at the threshold: not under it
    tracker.observe(sample(21 * MIN, 0.0))
    tracker.observe(sample(50 * MIN, 0.0))
    assert tracker.state(POD, 50 * MIN) is IdleState.ACTIVE
    tracker.observe(sample(51 * MIN, 0.0))
    assert tracker.state(POD, 51 * MIN) is IdleState.IDLE


def test_no_samples_is_unknown_never_idle() -> None:
    tracker = IdleTracker()
    tracker.allocate(POD, 0.0)
    assert tracker.state(POD, 10 * 3600.0) is IdleState.UNKNOWN
    assert tracker.idle(10 * 3600.0) == []
    tracker.observe(sample(60.0, None))  # memory only, no utilisation: tells nothing
    assert tracker.state(POD, 120.0) is IdleState.UNKNOWN
    assert tracker.state(PodKey("x", "not-allocated"), 0.0) is IdleState.UNKNOWN


def test_stale_samples_make_the_pod_unknown() -> None:
    tracker = IdleTracker(IdleSettings(stale_after_s=5 * MIN))
    tracker.allocate(POD, 0.0)
    for t in range(0, int(30 * MIN) + 1, 60):
        tracker.observe(sample(float(t), 0.0))
    assert tracker.state(POD, 30 * MIN) is IdleState.IDLE
    assert tracker.state(POD, 35 * MIN) is IdleState.IDLE
    assert tracker.state(POD, 35 * MIN + 1) is IdleState.UNKNOWN  # the exporter stopped answering
    tracker.evaluate(30 * MIN)
    (change,) = tracker.evaluate(40 * MIN)
    assert (change.before, change.after) == (IdleState.IDLE, IdleState.UNKNOWN)


def test_thresholds_are_settings() -> None:
    tracker = IdleTracker(IdleSettings(threshold_percent=20.0, window_s=10 * MIN))
    tracker.allocate(POD, 0.0)
    tracker.observe(sample(0.0, 15.0))
    tracker.observe(sample(10 * MIN, 15.0))
    assert tracker.state(POD, 10 * MIN) is IdleState.IDLE


def test_release_forgets_and_pages_feed_allocated_pods_only() -> None:
    tracker = IdleTracker()
    other = PodKey("x", "y")
    tracker.allocate(POD, 0.0)
    page = TelemetryPage(source="t", at=0.0, gpus_seen=2, pods={POD: sample(0.0, 0.0), other: sample(0.0, 0.0, other)})
    assert tracker.observe_page(page) == 1
    assert not tracker.observe(sample(-1.0, 90.0))  # older than the last sample: ignored
    tracker.release(POD)
    assert tracker.state(POD, 0.0) is IdleState.UNKNOWN and tracker.evaluate(0.0) == []


@pytest.mark.parametrize("kwargs", [{"threshold_percent": 0}, {"threshold_percent": 101}, {"window_s": -1},
                                    {"stale_after_s": float("nan")}])
def test_bad_settings_are_one_line(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"^idle settings: \w+: must be"):
        IdleSettings(**kwargs)


@settings(max_examples=100)
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=60), st.floats(min_value=0, max_value=100)),
                min_size=1, max_size=40))
def test_idle_only_after_a_full_window_of_low_samples(steps: list[tuple[int, float]]) -> None:
    """Whatever the samples, the pod is idle exactly when its samples since some low sample at least a
    window ago were all low, and its last sample is fresh."""
    s = IdleSettings(window_s=10 * MIN, stale_after_s=5 * MIN)
    tracker = IdleTracker(s)
    tracker.allocate(POD, 0.0)
    seen: list[tuple[float, float]] = []
    t = 0.0
    for gap, util in steps:
        t += gap * 30.0
        tracker.observe(sample(t, util))
        seen.append((t, util))
        now = t + 60.0
        # the oracle: the current run of low samples, from its first
        run_start = None
        for at, u in seen:
            run_start = (run_start if run_start is not None else at) if u < s.threshold_percent else None
        expected = now - t <= s.stale_after_s and run_start is not None and now - run_start >= s.window_s
        assert (tracker.state(POD, now) is IdleState.IDLE) == expected


def test_low_since_is_the_low_run_start_while_the_evidence_is_fresh() -> None:
    """What a Project's idle policy counts from (gpufleet.policy.idle_actions)."""
    tracker = IdleTracker()
    tracker.allocate(POD, 0.0)
    assert tracker.low_since(POD, 0.0) is None  # nothing known
    tracker.observe(sample(10.0, 50.0))
    assert tracker.low_since(POD, 10.0) is None  # busy
    tracker.observe(sample(20.0, 1.0))
    tracker.observe(sample(40.0, 2.0))
    assert tracker.low_since(POD, 40.0) == 20.0  # low, not yet idle by the window: still counted
    assert tracker.low_since(POD, 40.0 + 301.0) is None  # stale evidence stops nothing
    tracker.observe(sample(60.0, 90.0))
    assert tracker.low_since(POD, 60.0) is None
    assert tracker.low_since(PodKey("team-vision", "other"), 60.0) is None
