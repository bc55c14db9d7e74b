"""Volumes hold whatever the cluster: no pod bound outside its bound PVs' nodes, no PV chosen for
two claims, every chosen PV matching its claim and node, a ReadWriteOncePod claim used by at most
one pod, through preemption and gang placement too (docs/semantics-notes.md, "Volumes")."""

from __future__ import annotations

from hypothesis import given

from gpufleet.domain import Snapshot
from gpufleet.engine import schedule

from .invariants import check_all
from .strategies import volume_snapshots
from .test_properties import PROPERTY


@PROPERTY
@given(volume_snapshots())
def test_volume_rules_hold(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    violations = check_all(snapshot, decisions)  # check_volumes among them
    assert not violations, "\n".join(str(v) for v in violations) + f"\n{decisions}"
