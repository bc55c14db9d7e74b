"""The timeline on hand-built cases: evictions, checkpoints, node failures, cycle batching."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.engine import IncrementalEngine, schedule
from gpufleet.sim.failures import FailureModel, NodeOutage, OutageKind
from gpufleet.sim.metrics import check_invariants
from gpufleet.sim.timeline import CycleMode, InterruptKind, JobStatus, SimOptions, SimSetup, Timeline

from .helpers import cluster, gpu_queue, job, run, runs_by_name


def test_reclaimed_job_loses_the_work_since_its_last_checkpoint() -> None:
    # One 2-GPU node; queue a (quota 1) borrows the second GPU until b (quota 1) wants its own back.
    trace = [job("a1", 0, 1000, 2, vc="a", checkpoint=100), job("b1", 250, 100, 1, vc="b")]
    result = run(cluster(2), trace, queues=[gpu_queue("a", 1), gpu_queue("b", 1)], by_vc=True)
    runs = runs_by_name(result)
    a1, b1 = runs["a1"], runs["b1"]
    assert [(i.time_s, i.kind, i.lost_s) for i in result.interruptions] == [(250, InterruptKind.RECLAIM, 50)]
    assert b1.first_start == 250 and b1.end_s == 350
    # a1 kept 200 s of work (two checkpoints), waits for both GPUs, restarts at 350 with 800 s to go
    assert a1.status is JobStatus.COMPLETED
    assert a1.end_s == 1150
    assert a1.run_s == 250 + 800 and a1.lost_s == 50 and a1.interruptions == 1
    assert a1.queued_s == 100
    assert check_invariants(result) == []


def test_without_checkpoints_an_eviction_loses_everything() -> None:
    trace = [job("a1", 0, 1000, 2, vc="a", checkpoint=0), job("b1", 250, 100, 1, vc="b")]
    result = run(cluster(2), trace, queues=[gpu_queue("a", 1), gpu_queue("b", 1)], by_vc=True, checkpoint=500)
    a1 = runs_by_name(result)["a1"]
    assert a1.lost_s == 250
    assert a1.end_s == 350 + 1000


def test_default_checkpoint_applies_when_the_job_sets_none() -> None:
    trace = [job("a1", 0, 1000, 2, vc="a"), job("b1", 250, 100, 1, vc="b")]
    result = run(cluster(2), trace, queues=[gpu_queue("a", 1), gpu_queue("b", 1)], by_vc=True, checkpoint=120)
    a1 = runs_by_name(result)["a1"]
    assert a1.lost_s == 250 - 240
    assert a1.end_s == 350 + 1000 - 240


def test_node_failure_requeues_its_jobs_which_restart_elsewhere() -> None:
    outage = NodeOutage("n0", at_s=500, for_s=100, kind=OutageKind.FAILURE)
    result = run(cluster(1, 1), [job("j1", 0, 1000, 1, checkpoint=300)], failures=FailureModel(outages=(outage,)))
    j1 = runs_by_name(result)["j1"]
    assert [(i.time_s, i.kind, i.lost_s) for i in result.interruptions] == [(500, InterruptKind.FAILURE, 200)]
    assert j1.end_s == 500 + 700
    assert result.node_outages["failure"] == 1
    assert check_invariants(result) == []
    # capacity log: 2 GPUs, one lost at 500, back at 600
    times, deltas = result.capacity_log
    assert times.tolist() == [0, 500, 600] and deltas.tolist() == [2000, -1000, 1000]


def test_job_waits_for_a_failed_node_to_return() -> None:
    outage = NodeOutage("n0", at_s=10, for_s=90, kind=OutageKind.SPOT)
    result = run(cluster(2), [job("j1", 0, 50, 2)], failures=FailureModel(outages=(outage,)))
    j1 = runs_by_name(result)["j1"]
    assert result.interruptions[0].kind is InterruptKind.SPOT
    assert j1.end_s == 100 + 50  # back at 100, no checkpoint: all 50 s again
    assert result.node_outages["spot"] == 1


def test_a_second_outage_of_a_down_node_extends_it() -> None:
    outages = (NodeOutage("n0", 10, 100), NodeOutage("n0", 50, 200))
    result = run(cluster(1), [job("j1", 0, 20, 1)], failures=FailureModel(outages=outages))
    assert runs_by_name(result)["j1"].end_s == 250 + 20


def test_random_failures_are_deterministic_for_a_seed() -> None:
    trace = [job(f"j{i}", i * 50.0, 400, 1 + i % 2) for i in range(30)]
    model = FailureModel(mtbf_s=2000, repair_s=300)
    first = run(cluster(2, 2, 4), trace, failures=model, checkpoint=60, seed=7)
    again = run(cluster(2, 2, 4), trace, failures=model, checkpoint=60, seed=7)
    other = run(cluster(2, 2, 4), trace, failures=model, checkpoint=60, seed=8)
    key = [(i.time_s, i.job, i.kind) for i in first.interruptions]
    assert key and key == [(i.time_s, i.job, i.kind) for i in again.interruptions]
    assert key != [(i.time_s, i.job, i.kind) for i in other.interruptions]
    assert check_invariants(first) == []


def test_min_interval_batches_arrivals_into_one_cycle() -> None:
    trace = [job("j0", 0, 1000), job("j1", 10, 1000), job("j2", 20, 1000), job("j3", 100, 1000)]
    result = run(cluster(8), trace, interval=60)
    starts = {n: r.first_start for n, r in runs_by_name(result).items()}
    assert starts == {"j0": 0, "j1": 60, "j2": 60, "j3": 120}
    assert result.cycles == 3


def test_fixed_cycles_run_on_the_grid_only_when_something_is_pending() -> None:
    trace = [job("j0", 10, 100), job("j1", 130, 100)]
    result = run(cluster(8), trace, interval=60, mode=CycleMode.FIXED)
    starts = {n: r.first_start for n, r in runs_by_name(result).items()}
    assert starts == {"j0": 60, "j1": 180}
    assert result.cycles == 2


def test_every_event_instant_gets_a_cycle_with_no_interval() -> None:
    trace = [job("j0", 0, 100), job("j1", 10, 100), job("j2", 10, 100)]
    result = run(cluster(8), trace)
    assert [runs_by_name(result)[n].first_start for n in ("j0", "j1", "j2")] == [0, 10, 10]
    assert result.cycles == 2  # completions with nothing pending need no cycle


def test_gang_larger_than_a_node_starts_all_or_nothing() -> None:
    result = run(cluster(4, 4, 4), [job("small", 0, 100, 4), job("big", 0, 50, 12)])
    jobs = {j.name: j for j in result.setup.jobs}
    assert [p.whole for p in jobs["big"].pods] == [4, 4, 4]
    runs = runs_by_name(result)
    # same submit time and priority: the queue takes them in name order, "big" first
    assert runs["big"].first_start == 0 and runs["small"].first_start == 50
    assert check_invariants(result) == []


def test_uneven_gang_gets_a_smaller_last_pod() -> None:
    result = run(cluster(8, 8), [job("odd", 0, 10, 12)])
    assert [p.whole for p in result.setup.jobs[0].pods] == [8, 4]
    assert runs_by_name(result)["odd"].status is JobStatus.COMPLETED


def test_job_that_can_never_fit_is_rejected_not_retried() -> None:
    result = run(cluster(2, 2), [job("huge", 0, 10, 8), job("ok", 0, 10, 1)])
    runs = runs_by_name(result)
    assert runs["huge"].status is JobStatus.REJECTED and runs["ok"].status is JobStatus.COMPLETED
    assert "8 GPUs asked" in result.setup.jobs[0].rejected


def test_fractional_jobs_share_a_gpu() -> None:
    result = run(cluster(1), [job("f1", 0, 100, 1, milli=500), job("f2", 0, 100, 1, milli=450)])
    runs = runs_by_name(result)
    assert runs["f1"].first_start == 0 and runs["f2"].first_start == 0
    assert result.setup.jobs[0].pods[0].blocks == 50 and result.setup.jobs[1].pods[0].blocks == 45


def test_until_stops_the_clock_and_drops_nothing_that_arrived() -> None:
    trace = [job("j0", 0, 1000), job("j1", 10, None)]
    result = run(cluster(1), trace, until=500)
    runs = runs_by_name(result)
    assert result.end_s == 500
    assert runs["j0"].status is JobStatus.RUNNING and runs["j1"].status is JobStatus.QUEUED
    assert check_invariants(result) == []


def test_jobs_that_never_end_stop_the_run_when_nothing_else_can_happen() -> None:
    result = run(cluster(1), [job("forever", 0, None), job("after", 5, 10)])
    runs = runs_by_name(result)
    assert runs["forever"].status is JobStatus.RUNNING and runs["after"].status is JobStatus.QUEUED
    assert result.end_s == 5


@pytest.mark.parametrize("interval", [0.0, 30.0])
def test_within_queue_preemption_by_priority(interval: float) -> None:
    trace = [job("low", 0, 1000, 1, priority=10, checkpoint=100), job("high", 150, 100, 1, priority=50)]
    result = run(cluster(1), trace, interval=interval)
    runs = runs_by_name(result)
    assert [i.kind for i in result.interruptions] == [InterruptKind.PREEMPT]
    start = runs["high"].first_start
    assert start is not None and 150 <= start <= 180
    assert runs["low"].lost_s == start - 100


def test_the_default_engine_keeps_its_state_and_decides_as_schedule() -> None:
    """An IncrementalEngine (the runs' default) and a fresh schedule() per cycle give the same
    run: reclaims between quota'd queues, preemption, gangs, GPU shares, random node failures."""
    trace = [job(f"j{i}", 37.0 * i, 400.0 + 90 * (i % 7), 1 + i % 3, vc="ab"[i % 2], priority=10 * (i % 4),
                 checkpoint=120) for i in range(40)]
    trace += [job(f"s{i}", 50.0 * i, 300.0, 1, milli=250 + 250 * (i % 3), vc="a") for i in range(12)]
    queues = [gpu_queue("a", 6), gpu_queue("b", 6)]
    failures = FailureModel(mtbf_s=4000, repair_s=500)
    engine = IncrementalEngine()
    kept = run(cluster(4, 4, 8, 2), trace, queues=queues, by_vc=True, interval=30.0, failures=failures, seed=3,
               scheduler=engine)
    fresh = run(cluster(4, 4, 8, 2), trace, queues=queues, by_vc=True, interval=30.0, failures=failures, seed=3,
                scheduler=schedule)
    assert kept.runs == fresh.runs and kept.interruptions == fresh.interruptions
    assert kept.cycles == fresh.cycles and kept.warnings == fresh.warnings and kept.end_s == fresh.end_s
    assert all(np.array_equal(a, b) for a, b in zip(kept.usage_log, fresh.usage_log, strict=True))
    assert {i.kind for i in kept.interruptions} >= {InterruptKind.RECLAIM, InterruptKind.FAILURE}
    assert engine.fresh_calls == 0  # every cycle was decided from the kept state


def test_a_run_without_a_scheduler_gets_an_incremental_engine_of_its_own() -> None:
    setup = SimSetup(cluster(1), ())
    first, second = Timeline(setup, SimOptions()), Timeline(setup, SimOptions())
    assert isinstance(first.scheduler, IncrementalEngine) and first.scheduler is not second.scheduler
