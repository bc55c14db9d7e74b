"""The engine's invariants hold with ``placement: defrag`` too (random snapshots, independent checker).

The same strategies and checker as test_properties.py, with the placement switched to defrag:
every binding valid and no node over-committed, gangs whole or not at all, victims eligible,
every pending pod reported once, and decisions independent of input order.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.domain import Placement, Snapshot
from gpufleet.engine import schedule

from .invariants import check_all
from .strategies import gang_snapshots, shuffled_snapshot, snapshots

DEFRAG = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def defrag(snapshot: Snapshot) -> Snapshot:
    return replace(snapshot, config=replace(snapshot.config, placement=Placement.DEFRAG))


@DEFRAG
@given(st.one_of(snapshots(), gang_snapshots()))
def test_invariants_hold_with_defrag(snapshot: Snapshot) -> None:
    snapshot = defrag(snapshot)
    decisions = schedule(snapshot)
    violations = check_all(snapshot, decisions)
    assert not violations, "\n".join(str(v) for v in violations)


@settings(DEFRAG, max_examples=60)
@given(snapshots(), st.integers(0, 2**32 - 1))
def test_defrag_decisions_do_not_depend_on_input_order(snapshot: Snapshot, seed: int) -> None:
    snapshot = defrag(snapshot)
    assert schedule(shuffled_snapshot(snapshot, seed)) == schedule(snapshot)
