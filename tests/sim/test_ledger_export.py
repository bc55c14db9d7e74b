"""A simulated run as usage-ledger intervals (``sim/ledger_export.py``): the ledger's GPU-hours are the
simulator's, end reasons and preemptors are the simulator's own, UIDs and times are deterministic."""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from gpufleet.adapters.errors import InputError
from gpufleet.domain import MILLI
from gpufleet.ledger import EndReason, Interval, open_ledger, to_micros
from gpufleet.sim.cluster import SimCluster
from gpufleet.sim.failures import FailureModel, NodeOutage, OutageKind
from gpufleet.sim.ledger_export import (
    _UID_NAMESPACE,
    DEFAULT_ORIGIN,
    DEFAULT_ORIGIN_S,
    ledger_intervals,
    parse_origin,
    pod_uid,
)
from gpufleet.sim.metrics import check_invariants, compute_metrics, step_integral
from gpufleet.sim.timeline import JobStatus, SimResult

from .helpers import cluster, gpu_queue, job, node, run

ORIGIN = 1_793_491_200.0  # 2026-11-01T00:00:00Z


def _busy_run() -> SimResult:
    """Reclaims between quota'd queues, preemption by priority, gangs, GPU shares, random node failures,
    an explicit spot reclaim, and a job that never ends (open at the end)."""
    trace = [job(f"j{i}", 37.0 * i, 400.0 + 90 * (i % 7), 1 + i % 3, vc="ab"[i % 2], priority=10 * (i % 4),
                 checkpoint=120) for i in range(40)]
    trace += [job(f"s{i}", 50.0 * i, 300.0, 1, milli=250 + 250 * (i % 3), vc="a") for i in range(12)]
    trace += [job(f"g{i}", 300.0 * i, 500.0, 12, vc="b", priority=40) for i in range(4)]
    trace += [job("forever", 10.0, None, 1, vc="a", priority=200)]
    sim_cluster = SimCluster((*cluster(4, 4, 8, 2).nodes, node("spot0", 4, spot=True, model="T4")))
    spot = NodeOutage("spot0", at_s=700, for_s=200, kind=OutageKind.SPOT)
    failures = FailureModel(mtbf_s=4000, repair_s=500, outages=(spot,))
    result = run(sim_cluster, trace, queues=[gpu_queue("a", 9), gpu_queue("b", 13)], by_vc=True, interval=30.0,
                 failures=failures, seed=3)
    assert check_invariants(result) == []
    return result


@pytest.fixture(scope="module")
def busy() -> tuple[SimResult, list[Interval]]:
    result = _busy_run()
    return result, list(ledger_intervals(result, origin_s=ORIGIN, run_key="busy"))


def test_the_ledger_gpu_hours_per_queue_are_the_simulators(busy: tuple[SimResult, list[Interval]]) -> None:
    result, intervals = busy
    until = ORIGIN + result.end_s
    from_ledger: Counter[str] = Counter()
    for interval in intervals:
        from_ledger[interval.start.queue] += interval.gpu_seconds(ORIGIN, until)
    metrics = compute_metrics(result)
    t, q, d = result.usage_log
    for qi, name in enumerate(result.queue_names):
        mask = q == qi
        exact = step_integral(t[mask], np.cumsum(d[mask]), result.end_s) / MILLI
        assert from_ledger[name] == pytest.approx(exact, rel=1e-9, abs=1e-3)
        assert from_ledger[name] / 3600 == pytest.approx(metrics["queues"][name]["gpu_hours"], abs=0.0051)
    assert set(from_ledger) <= set(result.queue_names) and sum(from_ledger.values()) > 0


def test_the_run_has_every_kind_of_interval(busy: tuple[SimResult, list[Interval]]) -> None:
    result, intervals = busy
    reasons = Counter(i.end_reason for i in intervals)
    assert {EndReason.COMPLETED, EndReason.EVICTED_RECLAIM, EndReason.EVICTED_PREEMPTION, EndReason.NODE_FAILURE,
            EndReason.SPOT_RECLAIM, None} <= set(reasons)
    # one interval per pod per start: the runs' interruptions and starts add up
    pods = {j.idx: len(j.pods) for j in result.setup.jobs}
    assert len(intervals) == sum(pods[a.job] for a in result.allocations)
    assert len(result.allocations) == sum(
        r.interruptions + (r.status in (JobStatus.RUNNING, JobStatus.COMPLETED)) for r in result.runs)
    fractional = [i for i in intervals if i.start.gpu_blocks is not None]
    assert fractional and all(i.start.gpus == i.start.gpu_blocks / 100 and len(i.start.gpu_indices) == 1
                              for i in fractional)
    gang = [i for i in intervals if i.start.pod_group is not None]
    assert gang and {i.start.pod_group for i in gang} <= {f"g{k}" for k in range(4)}
    assert all(sum(len(i.start.gpu_indices) for i in gang if i.key.bound_at == g.key.bound_at
                   and i.start.pod_group == g.start.pod_group) == 12 for g in gang)
    *before, forever = [i for i in intervals if i.start.pod_name == "forever"]
    assert forever.ended_at is None and forever.end_reason is None and not forever.start.preemptible
    assert all(i.end_reason in (EndReason.NODE_FAILURE, EndReason.SPOT_RECLAIM) for i in before)
    spot = [i for i in intervals if i.end_reason is EndReason.SPOT_RECLAIM]
    assert {i.start.node for i in spot} == {"spot0"} and {i.start.gpu_model for i in spot} == {"T4"}
    assert all(i.ended_at == ORIGIN + 700 for i in spot)


def test_fields_come_from_the_job_and_the_placement(busy: tuple[SimResult, list[Interval]]) -> None:
    result, intervals = busy
    jobs = {j.name: j for j in result.setup.jobs}
    for interval in intervals:
        s = interval.start
        sim_job = jobs[s.pod_group or s.pod_name]
        assert s.queue == sim_job.queue and s.project == sim_job.attrs["vc"] == s.namespace
        assert s.created_at == ORIGIN + sim_job.submit_s <= s.bound_at
        assert interval.ended_at is None or interval.ended_at >= s.bound_at
        assert s.preemptible == (sim_job.priority < 100)


def test_preemptions_name_the_preemptor() -> None:
    trace = [job("low", 0, 1000, 1, priority=10, checkpoint=100), job("high", 150, 100, 1, priority=50)]
    result = run(cluster(1), trace)
    intervals = list(ledger_intervals(result, origin_s=0.0, run_key="k"))
    assert [(i.start.pod_name, i.start.bound_at, i.ended_at, i.end_reason, i.preemptor) for i in intervals] == [
        ("low", 0.0, 150.0, EndReason.EVICTED_PREEMPTION, "default/high"),
        ("high", 150.0, 250.0, EndReason.COMPLETED, None),
        ("low", 250.0, 250.0 + 900, EndReason.COMPLETED, None),
    ]
    # the restarted job's second interval has a UID of its own
    assert intervals[0].start.pod_uid == pod_uid("k", "low", 1) != intervals[2].start.pod_uid == pod_uid("k", "low", 2)


def test_reclaims_name_the_pod_they_made_room_for() -> None:
    trace = [job("a1", 0, 1000, 2, vc="a", checkpoint=100), job("b1", 250, 100, 1, vc="b")]
    result = run(cluster(2), trace, queues=[gpu_queue("a", 1), gpu_queue("b", 1)], by_vc=True)
    first = next(ledger_intervals(result, origin_s=0.0, run_key="k"))
    assert (first.start.pod_name, first.end_reason, first.preemptor) == ("a1", EndReason.EVICTED_RECLAIM, "b/b1")


def test_uids_and_times_are_deterministic(busy: tuple[SimResult, list[Interval]]) -> None:
    _, intervals = busy
    again = list(ledger_intervals(_busy_run(), origin_s=ORIGIN, run_key="busy"))
    assert again == intervals
    assert len({i.key for i in intervals}) == len({i.start.pod_uid for i in intervals}) == len(intervals)
    other = next(ledger_intervals(_busy_run(), origin_s=ORIGIN, run_key="another command"))
    assert other.start.pod_uid != intervals[0].start.pod_uid


def test_written_and_read_back_whole_and_writing_again_adds_nothing(busy: tuple[SimResult, list[Interval]],
                                                                  tmp_path: Path) -> None:
    _, intervals = busy
    with open_ledger(str(tmp_path / "ledger.db")) as store:
        store.write(intervals)
        stored = store.intervals()
        store.write(intervals)
        assert store.intervals() == stored
    assert len(stored) == len(intervals)

    def seen(i: Interval) -> tuple[object, ...]:  # the store keeps times in whole microseconds
        micros = None if i.ended_at is None else to_micros(i.ended_at)
        return (i.start.pod_uid, to_micros(i.start.bound_at), micros, i.end_reason, i.preemptor,
                dataclasses.replace(i.start, bound_at=0.0, created_at=None))

    assert sorted(map(seen, stored)) == sorted(map(seen, intervals))


@pytest.mark.parametrize(("key", "name", "start"), [("k", "low", 1), ("a\x1fb", "c", 12), ("{}", "j-0", 3)])
def test_pod_uids_are_uuid5_of_the_run_key_the_name_and_the_start(key: str, name: str, start: int) -> None:
    expected = uuid.uuid5(_UID_NAMESPACE, f"{key}\x1f{name}\x1f{start}")
    assert pod_uid(key, name, start) == str(expected) and expected.version == 5


def test_origin_parsing() -> None:
    assert parse_origin("2026-11-01T00:00:00Z") == ORIGIN
    assert parse_origin("2026-11-01T01:00:00+01:00") == ORIGIN
    assert parse_origin("2026-11-01") == ORIGIN  # no offset: UTC
    assert parse_origin(DEFAULT_ORIGIN) == DEFAULT_ORIGIN_S
    for bad in ("yesterday", "2026-13-01", "1960-01-01"):
        with pytest.raises(InputError, match=r"^--ledger-origin: "):
            parse_origin(bad)
