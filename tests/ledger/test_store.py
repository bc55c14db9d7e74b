"""The store on SQLite and PostgreSQL: idempotent writes, closing, reconciliation listing, migrations."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from gpufleet.ledger import EndReason, LedgerStore, UtilisationSample, open_ledger

from .helpers import T0, end, start


def _keys(store: LedgerStore) -> list[tuple[str, float]]:
    return [(i.start.pod_uid, i.start.bound_at) for i in store.intervals()]


def test_a_start_round_trips_every_field(store: LedgerStore) -> None:
    full = start("u1", 5.5, project="vision", submitter="alice", pod_group="pg-1", priority_class="high",
                 preemptible=True, gpu_model="A100-80GB", gpu_indices=(2,), gpu_blocks=30, gpus=0.3,
                 cpu_milli=4500, memory_bytes=64 << 30, created_at=T0 - 120.25,
                 labels={"cost-center": "cc-42", "team": "vision"})
    store.record_starts([full])
    [interval] = store.intervals()
    assert interval.start == full
    assert interval.ended_at is None and interval.end_reason is None
    assert store.open_intervals() == [full]


def test_the_same_batch_twice_and_overlapping_batches_store_each_interval_once(store: LedgerStore) -> None:
    batch = [start(f"u{i}", float(i), labels={"cost-center": f"cc{i % 3}"}) for i in range(50)]
    store.record_starts(batch)
    store.record_starts(batch)
    store.record_starts([start(f"u{i}", float(i), labels={"cost-center": f"cc{i % 3}"}) for i in range(40, 80)])
    store.record_starts(batch[:10] + batch[:10])  # duplicates inside one batch too
    keys = _keys(store)
    assert len(keys) == len(set(keys)) == 80
    assert [i.start.labels["cost-center"] for i in store.intervals()] == [f"cc{i % 3}" for i in range(80)]


def test_a_pod_bound_again_has_a_new_interval(store: LedgerStore) -> None:
    store.write([start("u1", 0.0), end("u1", 0.0, 30.0, EndReason.EVICTED_PREEMPTION, "ml/big"), start("u1", 40.0)])
    first, second = store.intervals()
    assert (first.ended_at, first.end_reason, first.preemptor) == (T0 + 30.0, EndReason.EVICTED_PREEMPTION, "ml/big")
    assert second.start.bound_at == T0 + 40.0 and second.ended_at is None
    assert [s.bound_at for s in store.open_intervals()] == [T0 + 40.0]


def test_closing_twice_is_a_no_op_and_an_unknown_end_changes_nothing(store: LedgerStore) -> None:
    store.record_starts([start("u1"), start("u2")])
    store.record_ends([end("u1", ended=60.0, reason=EndReason.COMPLETED)])
    store.record_ends([end("u1", ended=90.0, reason=EndReason.DELETED), end("nobody", ended=10.0)])
    store.record_starts([start("u1")])  # a replayed start does not reopen it
    u1, u2 = store.intervals()
    assert (u1.ended_at, u1.end_reason) == (T0 + 60.0, EndReason.COMPLETED)
    assert u2.ended_at is None
    assert [s.pod_uid for s in store.open_intervals()] == ["u2"]


def test_open_intervals_list_only_the_open_ones_in_bound_order(store: LedgerStore) -> None:
    store.record_starts([start(f"u{i}", float(10 - i)) for i in range(6)])
    store.record_ends([end("u0", 10.0, 20.0), end("u3", 7.0, 8.0, EndReason.NODE_FAILURE)])
    assert [s.pod_uid for s in store.open_intervals()] == ["u5", "u4", "u2", "u1"]


def test_intervals_overlapping_a_window(store: LedgerStore) -> None:
    store.record_starts([start("early", 0.0), start("open", 10.0), start("late", 500.0)])
    store.record_ends([end("early", 0.0, 5.0)])
    window = store.intervals(since=T0 + 6.0, until=T0 + 400.0)
    assert [i.start.pod_uid for i in window] == ["open"]
    assert window[0].gpu_seconds(T0 + 6.0, T0 + 400.0) == 390.0


def test_samples_make_means_and_a_replayed_sample_counts_once(store: LedgerStore) -> None:
    store.record_starts([start("u1")])
    samples = [UtilisationSample("u1", T0, T0 + t, gpu_util=u, fb_used_bytes=1e9 * t) for t, u in ((10, 20.0), (20, 40.0))]
    store.record_samples(samples)
    store.record_samples(samples)  # replayed
    store.record_samples([UtilisationSample("u1", T0, T0 + 30, gpu_util=90.0, sm_active=0.5)])
    [interval] = store.intervals()
    assert interval.gpu_util_mean == 50.0
    assert interval.sm_active_mean == 0.5
    assert interval.fb_used_mean_bytes == 15e9
    assert interval.samples == 3


_EXPRESSION_INDEXES = pytest.mark.filterwarnings(  # the waits' indexes (0003): SQLAlchemy cannot reflect them
    "ignore:Skipped unsupported reflection of expression-based index", "ignore:autogenerate skipping")


@_EXPRESSION_INDEXES
def test_migrations_from_empty_and_reopen(ledger_url: str) -> None:
    with open_ledger(ledger_url) as first:
        first.record_starts([start("u1")])
        engine = first._engine
        inspector = sa.inspect(engine)
        assert {"ledger_intervals", "ledger_labels", "alembic_version"} <= set(inspector.get_table_names())
        indexes = {ix["name"] for ix in inspector.get_indexes("ledger_intervals")}
        assert {"ix_ledger_intervals_bound", "ix_ledger_intervals_ended", "ix_ledger_intervals_project",
                "ix_ledger_intervals_queue", "ix_ledger_intervals_gpu_model", "ix_ledger_intervals_open"} <= indexes
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == "0003"  # the newest revision
            # the waits' expression indexes (0003), which SQLAlchemy's reflection skips on SQLite
            listed = ("SELECT name FROM sqlite_master WHERE type = 'index'" if engine.dialect.name == "sqlite"
                      else "SELECT indexname FROM pg_indexes WHERE tablename = 'ledger_intervals'")
            assert {"ix_ledger_intervals_waits", "ix_ledger_intervals_project_model_waits"} <= set(
                conn.execute(sa.text(listed)).scalars())
    with open_ledger(ledger_url) as again:  # re-open: migrations are a no-op, the data is there
        assert [s.pod_uid for s in again.open_intervals()] == ["u1"]


def test_a_lazy_store_migrates_on_first_use(ledger_url: str) -> None:
    with open_ledger(ledger_url, connect=False) as lazy:
        lazy.record_starts([start("u1")])
        assert len(lazy.intervals()) == 1


def test_sqlite_runs_in_wal_mode_with_full_sync(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with open_ledger(str(tmp_path / "l.db")) as store, store._engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar_one() == 2  # FULL


@_EXPRESSION_INDEXES
def test_the_migrations_build_exactly_the_schema_the_store_uses(ledger_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from gpufleet.ledger._schema import metadata

    with open_ledger(ledger_url) as store, store._engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diffs == []


def test_whole_intervals_write_their_start_and_end(store: LedgerStore) -> None:
    from gpufleet.ledger import Interval

    store.record_starts([start("running")])
    closed = Interval(start("sim", 10.0), T0 + 70.0, EndReason.EVICTED_RECLAIM, "ml/owner")
    store.write([closed, Interval(start("open", 20.0)), Interval(start("running"), T0 + 99.0, EndReason.COMPLETED)])
    store.write([closed])  # again: a no-op
    got = {i.start.pod_uid: i for i in store.intervals()}
    assert got["sim"] == closed
    assert got["open"].ended_at is None
    assert (got["running"].ended_at, got["running"].end_reason) == (T0 + 99.0, EndReason.COMPLETED)


def test_a_schema_newer_than_this_gpufleet_is_one_line(ledger_url: str) -> None:
    from gpufleet.ledger import LedgerUnavailableError

    with open_ledger(ledger_url) as store, store._engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0099'"))
    with pytest.raises(LedgerUnavailableError) as caught:
        open_ledger(ledger_url)
    assert "its schema cannot be brought up to date by this gpufleet: Can't locate revision identified by '0099'" \
        in str(caught.value)
    assert "\n" not in str(caught.value)
