"""Spot reclaims with a notice: the simulator drains through the controller's rule (gpufleet.policy.drain_plan)."""

from __future__ import annotations

from gpufleet.sim.failures import FailureModel, NodeOutage, OutageKind, parse_failures
from gpufleet.sim.metrics import check_invariants
from gpufleet.sim.timeline import InterruptKind

from .helpers import cluster, job, run, runs_by_name

NOTICE = NodeOutage("n0", at_s=500, for_s=100, kind=OutageKind.SPOT)


def test_settings() -> None:
    model = parse_failures(["spot-rate=0.5,spot-notice=2m,grace=45s"])
    assert (model.spot_notice_s, model.grace_s) == (120.0, 45.0)
    assert parse_failures([]).spot_notice_s == 0.0 and parse_failures([]).grace_s == 30.0


def test_a_notice_drains_the_whole_gang_which_keeps_its_work() -> None:
    model = FailureModel(outages=(NOTICE,), spot_notice_s=120.0)
    result = run(cluster(1, 1, 1, 1), [job("g", 0, 1000, 2, checkpoint=300)], failures=model)
    g = runs_by_name(result)["g"]
    # one interruption for the gang (both pods), at the notice, nothing lost: it checkpointed in its grace
    assert [(i.time_s, i.kind, i.lost_s) for i in result.interruptions] == [(500, InterruptKind.SPOT, 0.0)]
    assert g.interruptions == 1 and g.end_s == 1000 + 0  # restarted at once on the other nodes: 500 + 500
    times, deltas = result.capacity_log  # the node is closed from the notice to its return
    assert times.tolist() == [0, 500, 720] and deltas.tolist() == [4000, -1000, 1000]
    assert check_invariants(result) == []


def test_a_notice_shorter_than_the_grace_saves_only_the_periodic_checkpoints() -> None:
    model = FailureModel(outages=(NOTICE,), spot_notice_s=20.0, grace_s=30.0)
    result = run(cluster(1, 1, 1, 1), [job("g", 0, 1000, 2, checkpoint=300)], failures=model)
    assert [(i.time_s, i.lost_s) for i in result.interruptions] == [(500, 200.0)]


def test_without_a_notice_nothing_changes() -> None:
    before = run(cluster(1, 1, 1, 1), [job("g", 0, 1000, 2, checkpoint=300)],
                 failures=FailureModel(outages=(NOTICE,)))
    assert [(i.time_s, i.lost_s) for i in before.interruptions] == [(500, 200.0)]
    assert before.capacity_log[0].tolist() == [0, 500, 600]
