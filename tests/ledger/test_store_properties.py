"""Hypothesis: any sequence of batches of starts, ends, samples, whole intervals and replays leaves the table a simple model
predicts (each interval once, the first end wins, each sample once), on SQLite and on PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.ledger import (
    EndReason,
    Interval,
    IntervalEnd,
    IntervalStart,
    LedgerEvent,
    LedgerStore,
    UtilisationSample,
)

from .helpers import T0, end, start

UIDS = ["a", "b", "c"]
BOUNDS = [0.0, 100.0, 100.000001]  # the last two differ by one microsecond: two intervals

starts = st.builds(lambda uid, bound, gpus: start(uid, bound, gpus=gpus),
                   st.sampled_from(UIDS), st.sampled_from(BOUNDS), st.sampled_from([0.25, 1.0, 8.0]))
ends = st.builds(lambda uid, bound, after, reason: end(uid, bound, bound + after, reason),
                 st.sampled_from(UIDS), st.sampled_from(BOUNDS), st.integers(0, 50).map(float),
                 st.sampled_from(list(EndReason)))
samples = st.builds(lambda uid, bound, at, util: UtilisationSample(uid, T0 + bound, T0 + bound + at, gpu_util=util),
                    st.sampled_from(UIDS), st.sampled_from(BOUNDS), st.integers(0, 5).map(float),
                    st.sampled_from([0.0, 12.5, 50.0, 100.0]))
wholes = st.builds(lambda s, after, reason, closed: Interval(s, s.bound_at + after, reason) if closed else Interval(s),
                   starts, st.integers(0, 50).map(float), st.sampled_from(list(EndReason)), st.booleans())
batches = st.lists(st.one_of(starts, ends, samples, wholes), min_size=1, max_size=8)
steps = st.lists(st.one_of(batches, st.integers(0, 10)), min_size=1, max_size=12)  # an int: replay an earlier batch


@dataclass
class Row:
    ended: tuple[float, EndReason] | None = None
    utils: list[float] = field(default_factory=list)
    last_sample: int | None = None


def _apply(model: dict[tuple[str, int], Row], batch: list[LedgerEvent]) -> None:
    """The rules, as plainly as they can be written: starts, then ends, then samples in time order."""
    def key(event: LedgerEvent) -> tuple[str, int]:
        named = event.key
        return (named.pod_uid, round(named.bound_at * 1_000_000))

    for event in batch:
        if isinstance(event, IntervalStart | Interval):
            model.setdefault(key(event), Row())
    closing = [e for e in batch if isinstance(e, IntervalEnd)]
    closing += [e for e in (w.end() for w in batch if isinstance(w, Interval)) if e is not None]
    for event in closing:
        if key(event) in model and model[key(event)].ended is None:
            model[key(event)].ended = (event.ended_at, event.reason)
    sampled = sorted((e for e in batch if isinstance(e, UtilisationSample)), key=lambda s: (*key(s), s.at))
    for sample in sampled:
        row = model.get(key(sample))
        at = round(sample.at * 1_000_000)
        if row is not None and (row.last_sample is None or row.last_sample < at):
            assert sample.gpu_util is not None
            row.utils.append(sample.gpu_util)
            row.last_sample = at


def _reset(store: LedgerStore) -> None:
    with store._engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM ledger_labels"))
        conn.execute(sa.text("DELETE FROM ledger_intervals"))


@pytest.mark.parametrize("examples", [100])
def test_random_batches_and_replays_give_the_models_table(store: LedgerStore, examples: int) -> None:
    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(steps)
    def check(plan: list[list[LedgerEvent] | int]) -> None:
        _reset(store)
        model: dict[tuple[str, int], Row] = {}
        sent: list[list[LedgerEvent]] = []
        for step in plan:
            if isinstance(step, int):
                if not sent:
                    continue
                batch = sent[step % len(sent)]
            else:
                batch = step
                sent.append(batch)
            store.write(batch)
            _apply(model, batch)
        table = {(i.start.pod_uid, round(i.start.bound_at * 1_000_000)): i for i in store.intervals()}
        assert set(table) == set(model)
        for k, row in model.items():
            got = table[k]
            assert (None if got.ended_at is None else (got.ended_at, got.end_reason)) == row.ended
            assert got.samples == len(row.utils)
            assert got.gpu_util_mean == (pytest.approx(sum(row.utils) / len(row.utils)) if row.utils else None)
        assert {(s.pod_uid, round(s.bound_at * 1_000_000)) for s in store.open_intervals()} == {
            k for k, row in model.items() if row.ended is None}

    check()
