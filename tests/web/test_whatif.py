"""The What-if page's workload (gpufleet.web.whatif): the form's ``trace`` and ``days``, a trace's jobs
mapped onto the snapshot's queues, the window of days, the cap, and what the result page says."""

from __future__ import annotations

import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from gpufleet.adapters.k8s_yaml import load_snapshot_file
from gpufleet.adapters.traces import load_trace
from gpufleet.adapters.traces.records import TraceJob
from gpufleet.domain import QueueName
from gpufleet.web.source import build_fleet
from gpufleet.web.whatif import (
    DEFAULT_DAYS,
    MAX_JOBS,
    SNAPSHOT_JOB_S,
    Choice,
    Mapped,
    choose_workload,
    map_queues,
    parse_workload,
    trace_workload,
    workload_choices,
)

DEMO = load_snapshot_file(Path(__file__).resolve().parents[2] / "examples" / "demo.yaml")
LEAVES = ["notebooks", "serving", "team-a", "team-b"]  # the demo's leaf queues, by name (research is a parent)
CHOICES = workload_choices(True, ["week.csv"])


def job(name: str, submit: float = 0.0, duration: float | None = 60.0, **attrs: str) -> TraceJob:
    return TraceJob(name, submit, duration, 1, 1000, attrs=attrs)


def test_the_choices_put_the_default_first() -> None:
    assert CHOICES == ["ledger", "snapshot", "openb", "week.csv"]
    assert workload_choices(False, ["openb", "x.csv"]) == ["snapshot", "openb", "x.csv"]


@pytest.mark.parametrize(("form", "expected"), [
    ({}, Choice("ledger", DEFAULT_DAYS)),
    ({"trace": " week.csv ", "days": "3"}, Choice("week.csv", 3)),
    ({"trace": "openb", "days": "90"}, Choice("openb", 90)),
    ({"trace": "snapshot", "days": ""}, Choice("snapshot", DEFAULT_DAYS)),
])
def test_parse_workload(form: dict[str, str], expected: Choice) -> None:
    assert parse_workload(form, CHOICES) == expected


@pytest.mark.parametrize(("form", "message"), [
    ({"trace": "philly"}, "trace: no workload named 'philly' (one of ledger, snapshot, openb, week.csv)"),
    ({"trace": "../etc/passwd"}, "trace: no workload named '../etc/passwd'"),
    ({"days": "0"}, "days: 0 is outside 1..90"),
    ({"days": "91"}, "days: 91 is outside 1..90"),
    ({"days": "1.5"}, "days: '1.5' is not a whole number"),
    ({"days": "x" * 500}, "days: '" + "x" * 40 + "' is not a whole number"),
])
def test_bad_workload_fields_name_the_field(form: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_workload(form, CHOICES)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_jobs_go_to_the_queue_an_attribute_names_else_a_leaf_by_hash() -> None:
    jobs = [
        job("a", queue="team-b"),                        # by name: queue
        job("b", queue="nowhere", vc="serving"),         # by name: the first attribute that is a leaf
        job("c", user="research"),                       # research is a parent: not a leaf, hashed
        job("d", group="ml", user="team-a"),             # team-a named by user: by name
        job("e"),                                        # no attribute: its name hashed
        job("f", vc="vc-7"),
        job("g", vc="vc-7", user="zoe"),                 # the same first attribute as f: the same queue
    ]
    mapped, counts = map_queues(jobs, DEMO)
    queues = [j.attrs["queue"] for j in mapped]
    assert queues[:2] == ["team-b", "serving"] and queues[3] == "team-a"
    assert queues[2] == LEAVES[zlib.crc32(b"research") % 4]
    assert queues[4] == LEAVES[zlib.crc32(b"e") % 4]
    assert queues[5] == queues[6] == LEAVES[zlib.crc32(b"vc-7") % 4]
    assert counts == Mapped(by_name=3, assigned=4)
    assert mapped[1].attrs["vc"] == "serving" and jobs[0].attrs == {"queue": "team-b"}  # the input is untouched
    assert map_queues(jobs, DEMO) == (mapped, counts)  # same input, same mapping


def test_a_snapshot_without_queues_sends_every_job_to_the_default_queue() -> None:
    bare = replace(DEMO, queues=())
    mapped, counts = map_queues([job("a", queue="team-a"), job("b")], bare)
    assert [j.attrs["queue"] for j in mapped] == [str(DEMO.config.default_queue)] * 2
    assert counts == Mapped(defaulted=2)


def test_a_trace_is_cut_to_its_last_days_from_which_time_counts() -> None:
    day = 86400.0
    jobs = [job("late", 3 * day), job("b", 2 * day + 5, None), job("a", 0.0), job("edge", 2 * day)]
    work = trace_workload("week.csv", jobs, DEMO, 1)
    assert [(j.name, j.submit_s) for j in work.jobs] == [("edge", 0.0), ("b", 5.0), ("late", day)]
    assert work.jobs[1].duration_s == SNAPSHOT_JOB_S  # no duration: an hour
    assert work.jobs[0].duration_s == 60.0
    whole = trace_workload("week.csv", jobs, DEMO, 3)  # the trace's whole span: its times as they are
    assert [(j.name, j.submit_s) for j in whole.jobs] == [("a", 0.0), ("edge", 2 * day), ("b", 2 * day + 5),
                                                          ("late", 3 * day)]
    assert trace_workload("week.csv", jobs, DEMO, 90).jobs == whole.jobs
    many = [job(f"j{i}", float(i)) for i in range(MAX_JOBS + 5)]
    capped = trace_workload("big", many, DEMO, 1)
    assert len(capped.jobs) == MAX_JOBS and capped.dropped == 5 and capped.jobs[0].name == "j5"
    assert "the newest 20,000; 5 older left out" in capped.describe()


def test_the_result_page_says_which_workload_ran() -> None:
    jobs = [job("a", queue="team-a"), job("b", 10.0)]
    assert trace_workload("week.csv", jobs, DEMO, 2).describe() == (
        "trace week.csv, its last 2 day(s): 2 jobs; queues: 1 by name, 1 assigned to a leaf queue by hash")


def test_choose_workload_reads_the_bundled_trace_as_simulate_run_does() -> None:
    fleet = build_fleet(DEMO)
    work = choose_workload(Choice("openb", 1), fleet)
    bundled = load_trace("openb")[0]
    end = max(j.submit_s for j in bundled)
    last_day = [j for j in bundled if j.submit_s >= end - 86400]
    assert len(work.jobs) == len(last_day) > 100 and work.source == "openb" and work.days == 1
    assert sorted(j.name for j in work.jobs) == sorted(j.name for j in last_day)
    assert min(j.submit_s for j in work.jobs) >= 0 and max(j.submit_s for j in work.jobs) == 86400
    assert {j.attrs["queue"] for j in work.jobs} == set(LEAVES)  # spread over every leaf
    assert work.mapped is not None and work.mapped.assigned == len(last_day)  # openb names no queue


def test_choose_workload_snapshot_and_ledger() -> None:
    fleet = build_fleet(DEMO)
    snap = choose_workload(Choice("snapshot", 3), fleet)
    assert snap.days is None and snap.jobs and all(j.duration_s == SNAPSHOT_JOB_S for j in snap.jobs)
    assert snap.describe().startswith("the snapshot's jobs (each running one hour): ")
    # "ledger" without a ledger is the snapshot's jobs (the form never offers it then)
    assert choose_workload(Choice("ledger", 3), fleet).source == "snapshot"
    traces = {"week.csv": [job("a", queue="team-a")]}
    assert choose_workload(Choice("week.csv", 1), fleet, traces=traces).jobs[0].attrs["queue"] == QueueName("team-a")
    with pytest.raises(ValueError, match="trace: no workload named 'nope'"):
        choose_workload(Choice("nope", 1), fleet)


def test_choose_workload_replays_the_ledgers_last_days(tmp_path: Path) -> None:
    from gpufleet.ledger import EndReason, IntervalEnd, IntervalStart, open_ledger

    now = 1_772_400_000.0
    ledger = open_ledger(str(tmp_path / "l.db"))
    starts = [IntervalStart(pod_uid=f"u{d}", bound_at=now - d * 86400 - 3600, namespace="ml", pod_name=f"p{d}",
                            queue="team-a", node="gpu-a1", gpus=1, created_at=now - d * 86400 - 3700)
              for d in (0, 2, 5)]
    ledger.write(starts)  # each ran half an hour, ending d days and half an hour ago
    ledger.record_ends([IntervalEnd(s.pod_uid, s.bound_at, s.bound_at + 1800, EndReason.COMPLETED) for s in starts])
    fleet = build_fleet(DEMO)
    for days, expected in ((1, ["p0"]), (3, ["p2", "p0"]), (7, ["p5", "p2", "p0"])):
        work = choose_workload(Choice("ledger", days), fleet, ledger=ledger, now=now)
        assert [j.name.split("/")[1] for j in work.jobs] == expected, days
        assert work.describe() == f"the usage ledger's last {days} day(s): {len(expected)} jobs"
    ledger.close()
