"""``gpufleet report usage|idle`` figures, in SQL on SQLite and PostgreSQL, against hand-computed ones
(the ledger and its figures: tests/ledger/report_ledger.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.adapters.errors import InputError
from gpufleet.ledger import EndReason, IntervalEnd, IntervalStart, LedgerStore, UtilisationSample, reports
from gpufleet.ledger.reports import (
    UsageRow,
    idle_report,
    parse_group_by,
    parse_when,
    usage_report,
    usage_series,
    wait_cdfs,
)

from .helpers import T0
from .report_ledger import PRICES, SINCE, UNTIL, H, fill

LATER = UNTIL + 100 * H  # "now", long after the window


@pytest.fixture
def filled(store: LedgerStore) -> LedgerStore:
    fill(store)
    return store


def figures(row: UsageRow) -> dict[str, Any]:
    return {
        "intervals": row.intervals, "gpu_hours": pytest.approx(row.gpu_hours),
        "measured": pytest.approx(row.measured_gpu_hours), "used": pytest.approx(row.used_gpu_hours),
        "unmeasured": pytest.approx(row.unmeasured_gpu_hours), "preempted": pytest.approx(row.preempted_gpu_hours),
        "cost": None if row.cost is None else pytest.approx(row.cost),
        "gpu_cost": None if row.gpu_cost is None else pytest.approx(row.gpu_cost),
        "preempted_cost": None if row.preempted_cost is None else pytest.approx(row.preempted_cost),
        "waits": (row.waits, row.wait_p50_s, row.wait_p95_s, row.wait_p99_s),
    }


def test_the_total_of_the_small_ledger(filled: LedgerStore) -> None:
    report = usage_report(filled, since=SINCE, until=UNTIL, now=LATER, prices=PRICES)
    assert (report.since, report.until, report.currency) == (SINCE, UNTIL, "EUR")
    assert figures(report.total) == {
        "intervals": 4, "gpu_hours": 9.7, "measured": 7.0, "used": 1.42, "unmeasured": 2.7, "preempted": 4.0,
        "cost": 23.31, "gpu_cost": 8 + 4.05 + 6 + 4, "preempted_cost": 6.0, "waits": (3, 100.0, 300.0, 300.0),
    }
    assert report.total.efficiency == pytest.approx(1.42 / 7)


@pytest.mark.parametrize("way", ["values", "count-windows"])
def test_grouped_by_project(filled: LedgerStore, way: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if way == "count-windows":  # the fallback when the ranks' VALUES list would be too long
        monkeypatch.setattr(reports, "MAX_PICK_PARAMETERS", 0)
    report = usage_report(filled, since=SINCE, until=UNTIL, now=LATER, group_by=("project",), prices=PRICES)
    rows = {row.group: figures(row) for row in report.rows}
    assert [row.group for row in report.rows] == [("nlp",), ("vision",)]  # largest allocation first
    assert rows[("vision",)] == {
        "intervals": 2, "gpu_hours": 4.7, "measured": 2.0, "used": 1.0, "unmeasured": 2.7, "preempted": 0.0,
        "cost": 13.31, "gpu_cost": 12.05, "preempted_cost": 0.0, "waits": (1, 100.0, 100.0, 100.0),
    }
    assert rows[("nlp",)] == {
        "intervals": 2, "gpu_hours": 5.0, "measured": 5.0, "used": 0.42, "unmeasured": 0.0, "preempted": 4.0,
        "cost": 10.0, "gpu_cost": 10.0, "preempted_cost": 6.0, "waits": (2, 20.0, 300.0, 300.0),
    }


def test_labels_capacity_types_and_users_as_group_keys(filled: LedgerStore) -> None:
    report = usage_report(filled, since=SINCE, until=UNTIL, now=LATER,
                          group_by=("label:cost-center", "capacity-type", "user"), prices=PRICES)
    hours = {row.group: (pytest.approx(row.gpu_hours), pytest.approx(row.cost)) for row in report.rows}
    assert hours == {
        ("cc2", "reserved", "bob"): (4.0, 6.0),
        (None, "on-demand", None): (2.0, 8.0),
        ("cc1", "spot", "ann"): (2.7, 5.31),
        (None, "on-demand", "bob"): (1.0, 4.0),
    }


def test_without_prices_there_is_no_cost(filled: LedgerStore) -> None:
    report = usage_report(filled, since=SINCE, until=UNTIL, now=LATER, group_by=("gpu-model",))
    assert report.currency is None
    assert {row.group: (row.gpu_hours, row.cost) for row in report.rows} == {
        ("H100",): (pytest.approx(5.7), None), ("A100",): (pytest.approx(4.0), None)}


def test_an_open_interval_counts_up_to_now_and_until_never_passes_it(filled: LedgerStore) -> None:
    now = T0 + 5 * H
    report = usage_report(filled, since=SINCE, until=None, now=now, group_by=("project",))
    assert report.until == now
    # a: 2 h; b: 4 h x 0.3; c (bound T0+4h): 1 h x 2 up to now; d is bound after now.
    assert {row.group: pytest.approx(row.gpu_hours) for row in report.rows} == {("vision",): 3.2, ("nlp",): 2.0}
    assert usage_report(filled, since=SINCE, until=UNTIL, now=now).until == now


def test_clipping_to_the_window(filled: LedgerStore) -> None:
    report = usage_report(filled, since=T0 + 1.5 * H, until=T0 + 4.5 * H, now=LATER, prices=PRICES)
    # a: 0.5 h; b: 3 h x 0.3; c: 0.5 h x 2.
    assert report.total.gpu_hours == pytest.approx(0.5 + 0.9 + 1.0)
    assert report.total.preempted_gpu_hours == pytest.approx(1.0)
    assert report.total.waits == 1 and report.total.wait_p50_s == 300.0  # only c was bound in the window


def test_an_empty_window(filled: LedgerStore) -> None:
    report = usage_report(filled, since=T0 - 60 * H, until=T0 - 50 * H, now=LATER, group_by=("project",))
    assert report.rows == ()
    assert (report.total.intervals, report.total.gpu_hours, report.total.efficiency) == (0, 0.0, None)


def test_idle_allocations_worst_first(filled: LedgerStore) -> None:
    report = idle_report(filled, since=SINCE, until=UNTIL, now=LATER, threshold=20.0, min_hours=0.5)
    assert [(r.pod_uid, r.project, r.submitter, r.queue) for r in report.rows] == [
        ("c", "nlp", "bob", "team-b"), ("d", "nlp", "bob", "team-b")]
    assert [(pytest.approx(r.gpu_hours), pytest.approx(r.gpu_util_mean), pytest.approx(r.idle_gpu_hours))
            for r in report.rows] == [(4.0, 10.0, 3.6), (1.0, 2.0, 0.98)]
    assert [r.pod_uid for r in idle_report(filled, since=None, until=None, now=LATER).rows] == ["d"]  # under 5%
    assert idle_report(filled, since=None, until=None, now=LATER, min_hours=3.5).rows == ()
    assert [r.pod_uid for r in idle_report(filled, since=None, until=None, now=LATER, threshold=90,
                                           limit=1).rows] == ["c"]


def test_the_html_series(filled: LedgerStore) -> None:
    series = usage_series(filled, since=SINCE, until=UNTIL, now=LATER, prices=PRICES)
    assert series.width_s == H and len(series.starts) == 10
    assert sum(series.allocated_gpus) == pytest.approx(9.7)  # hour buckets: mean GPUs = GPU-hours
    assert sum(series.used_gpus) == pytest.approx(1.42)
    assert {p: pytest.approx(sum(v)) for p, v in series.per_project.items()} == {"vision": 13.31, "nlp": 10.0}
    assert series.allocated_gpus[0] == pytest.approx(1.0) and series.allocated_gpus[4] == pytest.approx(2.3)
    expected = [sum(i.gpu_seconds(T0 + b * H, T0 + (b + 1) * H) for i in filled.intervals()) / H for b in range(10)]
    assert list(series.allocated_gpus) == pytest.approx(expected)
    (nlp, vision) = wait_cdfs(filled, since=SINCE, until=UNTIL, now=LATER, key="project")
    assert (nlp.group, nlp.count, nlp.points) == ("nlp", 2, ((0.5, 20.0), (1.0, 300.0)))
    assert (vision.group, vision.points) == ("vision", ((1.0, 100.0),))


@pytest.mark.parametrize(("text", "keys"), [
    ("project", ("project",)), ("project, gpu-model,label:cost-center", ("project", "gpu-model", "label:cost-center")),
    ("", ()), ("label:example.com/team", ("label:example.com/team",)),
])
def test_group_by_keys(text: str, keys: tuple[str, ...]) -> None:
    assert parse_group_by(text) == keys


@pytest.mark.parametrize(("text", "message"), [
    ("project,team", '--group-by: unknown key "team"; use project, queue, user'),
    ("label:", '--group-by: "label:": not a label key'),
    ("label:a b", '--group-by: "label:a b": not a label key'),
    ("queue,queue", '--group-by: "queue" given twice'),
])
def test_bad_group_by_keys(text: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        parse_group_by(text)
    assert str(err.value).startswith(message)


def test_dates() -> None:
    assert parse_when("2026-11-01", "--since") == 1_793_491_200.0
    assert parse_when("2026-11-01T01:00:00Z", "--since") == 1_793_491_200.0 + 3600
    assert parse_when("2026-11-01T02:00+01:00", "--since") == 1_793_491_200.0 + 3600
    for bad in ("2026-13-01", "yesterday", "1e9", ""):
        with pytest.raises(InputError, match=r"^--until: .*not a date"):
            parse_when(bad, "--until")


_starts = st.lists(st.tuples(
    st.sampled_from(["p1", "p2", None]), st.sampled_from(["H100", "A100", None]),
    st.sampled_from([None, "spot", "reserved"]), st.sampled_from([None, "x", "y"]),
    st.integers(0, 20), st.integers(1, 20), st.booleans(), st.sampled_from([0.3, 1.0, 2.0]),
    st.sampled_from([None, 4.0, 60.0]), st.sampled_from(list(EndReason)),
), min_size=1, max_size=8)
_batches = iter(range(10**9))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=_starts, keys=st.lists(st.sampled_from(["project", "gpu-model", "capacity-type", "label:cc", "queue"]),
                                    unique=True, min_size=1, max_size=3))
def test_grouped_totals_sum_to_the_total(store: LedgerStore, drawn: list[tuple[Any, ...]], keys: list[str]) -> None:
    batch = next(_batches)
    starts, ends, samples = [], [], []
    for i, (project, model, capacity, label, bound, length, closed, gpus, util, reason) in enumerate(drawn):
        uid, bound_at = f"{batch}-{i}", T0 + bound * 1800
        starts.append(IntervalStart(
            pod_uid=uid, bound_at=bound_at, namespace="ns", pod_name=uid, queue="q" + str(i % 2), node="n",
            gpus=gpus, project=project, gpu_model=model, capacity_type=capacity, cpu_milli=500 * i,
            memory_bytes=2**30 * i, labels={} if label is None else {"cc": label}, created_at=bound_at - 7 * i))
        if closed:
            ends.append(IntervalEnd(uid, bound_at, bound_at + length * 1800, reason))
        if util is not None:
            samples.append(UtilisationSample(uid, bound_at, bound_at + 1, gpu_util=util))
    store.record_starts(starts)
    store.record_ends(ends)
    store.record_samples(samples)
    report = usage_report(store, since=T0 + 3 * H, until=T0 + 9 * H, now=T0 + 8 * H, group_by=tuple(keys),
                          prices=PRICES)
    total = report.total
    for name in ("gpu_hours", "measured_gpu_hours", "used_gpu_hours", "preempted_gpu_hours", "cost", "gpu_cost",
                 "preempted_cost"):
        assert sum(getattr(row, name) for row in report.rows) == pytest.approx(getattr(total, name), abs=1e-9), name
    assert sum(row.intervals for row in report.rows) == total.intervals
    assert sum(row.waits for row in report.rows) == total.waits
    assert len({row.group for row in report.rows}) == len(report.rows)


def _nearest_rank(waits: list[int], p: int) -> float | None:
    """The p-th percentile by nearest rank, the plain way: the ceil(p n / 100)-th smallest."""
    if not waits:
        return None
    ordered = sorted(waits)
    return ordered[max(1, -(-p * len(ordered) // 100)) - 1] / 1_000_000


_waiting = st.lists(st.tuples(
    st.sampled_from(["p1", "p2", None]), st.sampled_from(["H100", "A100", None]), st.sampled_from(["q1", "q2"]),
    st.integers(-4, 24), st.one_of(st.none(), st.integers(0, 5_000)),
), min_size=1, max_size=40)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=_waiting, keys=st.sampled_from([(), ("project", "gpu-model"), ("project",), ("queue", "gpu-model")]),
       by_count=st.booleans())
def test_wait_percentiles_are_the_nearest_ranks_of_a_plain_sort(
    store: LedgerStore, drawn: list[tuple[Any, ...]], keys: tuple[str, ...], by_count: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whichever way SQL numbers the waits (an index walked in order, a sort, picks by VALUES or by
    count), each group's p50/p95/p99 and the total's are what sorting its waits in Python gives."""
    monkeypatch.setattr(reports, "MAX_PICK_PARAMETERS", 0 if by_count else 30_000)
    batch = next(_batches)
    since = T0 + 1000 * H * (batch + 1)  # the store is shared by the examples: each its own window
    until = since + 18 * H
    starts, waits = [], {}
    for i, (project, model, queue, half_hours, wait_s) in enumerate(drawn):
        uid, bound_at = f"w{batch}-{i}", since + half_hours * 1800 + i
        created = None if wait_s is None else bound_at - wait_s - i / 1000
        starts.append(IntervalStart(pod_uid=uid, bound_at=bound_at, namespace="ns", pod_name=uid, queue=queue,
                                    node="n", gpus=1.0, project=project, gpu_model=model, created_at=created))
        if created is not None and since <= bound_at < until:
            group = {"project": project, "gpu-model": model, "queue": queue}
            waits.setdefault(tuple(group[k] for k in keys), []).append(round((bound_at - created) * 1e6))
    store.record_starts(starts)
    report = usage_report(store, since=since, until=until, now=until + H, group_by=keys)
    everything = [w for group in waits.values() for w in group]
    rows = {row.group: row for row in report.rows} if keys else {}
    for group, row in [((), report.total), *rows.items()]:
        expected = everything if group == () else waits.get(group, [])
        assert row.waits == len(expected)
        for p in (50, 95, 99):
            assert getattr(row, f"wait_p{p}_s") == _nearest_rank(expected, p), (group, p)


def test_the_waits_are_numbered_along_an_index_on_sqlite(tmp_path: Any) -> None:
    """Grouped by project and GPU model (and over all), the numbering of the waits walks the waits'
    covering indexes (migration 0003): no sort of the waits, no visit to the table."""
    from gpufleet.ledger import open_ledger

    with open_ledger(str(tmp_path / "l.db")) as store:
        fill(store)
        window = reports._window(SINCE, UNTIL, LATER)
        statement = reports._percentiles_statement(window, ("project", "gpu-model"), {None: 3, ("a", "b"): 3})
        with store.reading() as conn:
            sql = str(statement.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
            plan = [row[3] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql).all()]
    assert "SCAN ledger_intervals USING COVERING INDEX ix_ledger_intervals_project_model_waits" in plan, plan
    assert "SCAN ledger_intervals USING COVERING INDEX ix_ledger_intervals_waits" in plan, plan
    assert not any("TEMP B-TREE" in step for step in plan), plan
