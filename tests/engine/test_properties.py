"""Property-based tests of the engine's invariants.

Hypothesis draws random snapshots (``strategies.py``); ``gpufleet.engine.schedule`` decides; the
independent checker (``invariants.py``) recomputes the outcome with plain Python and lists every
violated rule of ``semantics.md``. Every test is deterministic (``derandomize=True``).
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.domain import Decisions, Snapshot
from gpufleet.engine import schedule

from .invariants import (
    Violation,
    check_evictions,
    check_gangs,
    check_lending,
    check_limits,
    check_nodes,
    check_report,
    check_single_gang,
    minimality_counterexamples,
)
from .strategies import gang_snapshots, lending_snapshots, shuffled_snapshot, single_gang_snapshots, snapshots

PROPERTY = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def explain(violations: list[Violation], decisions: Decisions) -> str:
    lines = [str(v) for v in violations]
    lines.append(f"bindings: {[(b.pod, b.node, b.gpus, b.gpu_blocks) for b in decisions.bindings]}")
    lines.append(f"evictions: {[(e.pod, e.reason.value, e.by) for e in decisions.evictions]}")
    lines.append(f"pending: {[(p.pod, p.reason) for p in decisions.pending]}")
    return "\n".join(lines)


def assert_holds(violations: list[Violation], decisions: Decisions) -> None:
    assert not violations, explain(violations, decisions)


# 1. -----------------------------------------------------------------------------------------


@PROPERTY
@given(snapshots())
def test_no_node_is_overcommitted_and_every_binding_is_valid(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    assert_holds(check_nodes(snapshot, decisions), decisions)


# 2. -----------------------------------------------------------------------------------------


@PROPERTY
@given(snapshots())
def test_no_queue_ends_above_its_limit(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    assert_holds(check_limits(snapshot, decisions), decisions)


# 3. -----------------------------------------------------------------------------------------


@PROPERTY
@given(lending_snapshots())
def test_unused_quota_above_the_lending_limit_stays_free(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    assert_holds(check_lending(snapshot, decisions), decisions)


# 4. -----------------------------------------------------------------------------------------


@PROPERTY
@given(st.one_of(gang_snapshots(), snapshots()))
def test_gangs_bind_whole_or_not_at_all(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    assert_holds(check_gangs(snapshot, decisions), decisions)


# 5. and 6. ----------------------------------------------------------------------------------


@PROPERTY
@given(st.one_of(snapshots(), gang_snapshots()))
def test_every_victim_is_eligible_and_its_whole_gang_goes(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    assert_holds(check_evictions(snapshot, decisions), decisions)


@settings(PROPERTY, max_examples=400)
@given(single_gang_snapshots())
def test_victims_of_a_single_gang_are_eligible(snapshot: Snapshot) -> None:
    """Non-preemptible work never evicted, reclaim only from queues above quota, a
    non-preemptible gang bound only in quota, and nothing evicted by a gang that stays pending."""
    decisions = schedule(snapshot)
    assert_holds(check_evictions(snapshot, decisions) + check_single_gang(snapshot, decisions), decisions)


# 7. -----------------------------------------------------------------------------------------


@settings(PROPERTY, max_examples=400)
@given(single_gang_snapshots())
def test_victim_sets_are_minimal(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    assert_holds(minimality_counterexamples(snapshot, decisions, schedule), decisions)


# 8. -----------------------------------------------------------------------------------------


@settings(PROPERTY, max_examples=150)
@given(snapshots(), st.integers(0, 2**32 - 1))
def test_decisions_are_deterministic_and_independent_of_input_order(snapshot: Snapshot, seed: int) -> None:
    first = dataclasses.asdict(schedule(snapshot))
    assert dataclasses.asdict(schedule(snapshot)) == first, "a second run decided differently"
    shuffled = dataclasses.asdict(schedule(shuffled_snapshot(snapshot, seed)))
    for key in ("bindings", "evictions", "pending"):
        assert shuffled[key] == first[key], f"{key} depend on the order of the input"
    assert shuffled == first, "warnings or cycles depend on the order of the input"


# 9. -----------------------------------------------------------------------------------------


@PROPERTY
@given(st.one_of(snapshots(), gang_snapshots()))
def test_every_pending_pod_is_reported_exactly_once(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    assert_holds(check_report(snapshot, decisions), decisions)
