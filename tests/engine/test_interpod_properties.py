"""Required inter-pod rules hold whatever the cluster: no bound pod violates a required
anti-affinity (either way) or a DoNotSchedule spread, through preemption and gang placement too."""

from __future__ import annotations

from hypothesis import given

from gpufleet.domain import Snapshot
from gpufleet.engine import schedule

from .invariants import check_all
from .strategies import inter_pod_snapshots
from .test_properties import PROPERTY


@PROPERTY
@given(inter_pod_snapshots())
def test_no_bound_pod_violates_a_required_inter_pod_rule(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    violations = check_all(snapshot, decisions)  # check_inter_pod among them
    assert not violations, "\n".join(str(v) for v in violations) + f"\n{decisions}"
