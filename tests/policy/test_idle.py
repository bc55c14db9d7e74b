"""A Project's idle policy (docs/semantics-notes.md, "Idle policy"): warnings and stops, pure."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.adapters import InputError, load_snapshot_text
from gpufleet.adapters._k8s_models import project_from_dict
from gpufleet.domain import IdlePolicy, LabelSelector, PodKey, Project
from gpufleet.policy import IdleStep, IdleWatch, ProjectIndex, idle_actions, idle_policy_for

HOUR = 3600.0
MIN = 60.0


def index(policy: IdlePolicy | None, namespaces: tuple[str, ...] = ("ml",)) -> ProjectIndex:
    return ProjectIndex.build([Project("ml-vision", namespace_names=namespaces, idle_policy=policy)], {})


POLICY = IdlePolicy(idle_seconds=int(2 * HOUR), warn_seconds=int(15 * MIN))
NB = PodKey("ml/notebook-0")


def test_a_pod_is_warned_before_it_is_stopped() -> None:
    idx = index(POLICY)
    low = 1000.0
    assert idle_actions(idx, [IdleWatch(NB, low_since=low)], low + 104 * MIN) == []
    (warn,) = idle_actions(idx, [IdleWatch(NB, low_since=low)], low + 105 * MIN)
    assert warn.step is IdleStep.WARN and warn.project == "ml-vision"
    assert warn.stop_at == low + 2 * HOUR
    assert warn.message == ("GPUs idle for 105m: project ml-vision stops pods idle for 120m; this pod is stopped "
                            "in 15m unless it uses its GPUs")
    warned = IdleWatch(NB, low_since=low, warned_at=low + 105 * MIN)
    assert idle_actions(idx, [warned], low + 119 * MIN) == []
    (stop,) = idle_actions(idx, [warned], low + 120 * MIN)
    assert stop.step is IdleStep.STOP
    assert stop.message == "GPUs idle for 120m: stopped by project ml-vision's idle policy (120m)"


def test_a_late_warning_gives_the_full_notice() -> None:
    """A controller that restarted (or was down) warns first and stops warnMinutes later."""
    idx = index(POLICY)
    low = 0.0
    (warn,) = idle_actions(idx, [IdleWatch(NB, low_since=low)], 5 * HOUR)
    assert warn.step is IdleStep.WARN and warn.stop_at == 5 * HOUR + 15 * MIN
    warned = IdleWatch(NB, low_since=low, warned_at=5 * HOUR)
    assert idle_actions(idx, [warned], 5 * HOUR + 14 * MIN) == []
    assert [a.step for a in idle_actions(idx, [warned], 5 * HOUR + 15 * MIN)] == [IdleStep.STOP]


def test_no_warning_with_warn_minutes_zero() -> None:
    idx = index(IdlePolicy(idle_seconds=int(HOUR), warn_seconds=0))
    assert idle_actions(idx, [IdleWatch(NB, low_since=0.0)], HOUR - 1) == []
    assert [a.step for a in idle_actions(idx, [IdleWatch(NB, low_since=0.0)], HOUR)] == [IdleStep.STOP]


def test_pods_outside_the_policy_are_left_alone() -> None:
    assert idle_actions(index(None), [IdleWatch(NB, low_since=0.0)], 100 * HOUR) == []
    assert idle_actions(index(POLICY, ("other",)), [IdleWatch(NB, low_since=0.0)], 100 * HOUR) == []
    assert idle_actions(index(POLICY), [IdleWatch(NB, low_since=None)], 100 * HOUR) == []
    selective = IdlePolicy(idle_seconds=int(HOUR), warn_seconds=0,
                           pod_selector=LabelSelector(match_labels=(("workload", "notebook"),)))
    idx = index(selective)
    assert idle_actions(idx, [IdleWatch(NB, labels={"workload": "training"}, low_since=0.0)], 10 * HOUR) == []
    assert idle_actions(idx, [IdleWatch(NB, labels={"workload": "notebook"}, low_since=0.0)], 10 * HOUR) != []
    assert idle_policy_for(idx, NB, {}) is None


def test_a_namespace_claimed_twice_has_no_idle_policy() -> None:
    idx = ProjectIndex.build([Project("a", namespace_names=("ml",), idle_policy=POLICY),
                              Project("b", namespace_names=("ml",), idle_policy=POLICY)], {})
    assert idle_actions(idx, [IdleWatch(NB, low_since=0.0)], 100 * HOUR) == []


@settings(max_examples=200, deadline=None)
@given(
    idle_min=st.integers(10, 600),
    warn_frac=st.floats(0, 0.99),
    low_since=st.floats(0, 1e6),
    warned_after=st.none() | st.floats(0, 2e4),
    now_after=st.floats(0, 5e4),
)
def test_never_a_stop_before_the_idle_time_or_the_notice(idle_min: int, warn_frac: float, low_since: float,
                                                         warned_after: float | None, now_after: float) -> None:
    warn_min = int(idle_min * warn_frac)
    policy = IdlePolicy(idle_seconds=idle_min * 60, warn_seconds=warn_min * 60)
    warned_at = None if warned_after is None else low_since + warned_after
    now = low_since + now_after
    if warned_at is not None and warned_at > now:
        warned_at = now
    actions = idle_actions(index(policy), [IdleWatch(NB, low_since=low_since, warned_at=warned_at)], now)
    assert len(actions) <= 1
    for action in actions:
        if action.step is IdleStep.STOP:
            assert now >= low_since + policy.idle_seconds
            if policy.warn_seconds:
                assert warned_at is not None and now >= warned_at + policy.warn_seconds
        else:
            assert warned_at is None and policy.warn_seconds > 0
            assert now >= low_since + policy.idle_seconds - policy.warn_seconds
            assert action.stop_at >= now + policy.warn_seconds - 1e-6


def test_the_project_spec_reads_an_idle_policy() -> None:
    project = project_from_dict({"metadata": {"name": "p"}, "spec": {"idlePolicy": {
        "idleMinutes": 120, "warnMinutes": 10, "podSelector": {"matchLabels": {"workload": "notebook"}}}}})
    assert project.idle_policy == IdlePolicy(7200, 600, LabelSelector((("workload", "notebook"),)))
    assert project_from_dict({"metadata": {"name": "p"}, "spec": {}}).idle_policy is None


@pytest.mark.parametrize(("spec", "field"), [
    ({"idleMinutes": 5}, "idleMinutes"),
    ({"idleMinutes": 30, "warnMinutes": 30}, "warnMinutes must be less than idleMinutes"),
    ({"warnMinutes": 3}, "idleMinutes"),
    ({"idleMinutes": 30, "ttl": 3}, "ttl"),
])
def test_a_bad_idle_policy_is_one_line_naming_the_field(spec: dict[str, object], field: str) -> None:
    text = yaml.safe_dump({"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Project", "metadata": {"name": "p"},
                           "spec": {"idlePolicy": spec}})
    with pytest.raises(InputError) as caught:
        load_snapshot_text(text, "s.yaml")
    message = str(caught.value)
    assert "\n" not in message and field in message and "s.yaml" in message
