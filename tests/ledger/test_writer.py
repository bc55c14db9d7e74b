"""The buffered writer against a failing, then recovering database: nothing lost within the bound, drops
counted beyond it, the backoff schedule from the injected clock (no test waits on real time)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpufleet.ledger import (
    Backoff,
    BufferedWriter,
    LedgerEvent,
    LedgerStore,
    LedgerUnavailableError,
    WriterStatus,
    open_ledger,
)

from .helpers import end, start


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FlakySink:
    """Fails while ``down``; records every batch it was handed and every batch it wrote."""

    def __init__(self, target: LedgerStore | None = None) -> None:
        self.down = False
        self.attempts: list[int] = []
        self.written: list[LedgerEvent] = []
        self.target = target

    def write(self, events: Sequence[LedgerEvent]) -> None:
        self.attempts.append(len(events))
        if self.down:
            raise LedgerUnavailableError("ledger postgresql+psycopg://db/ledger: connection refused")
        if self.target is not None:
            self.target.write(events)
        self.written.extend(events)


def test_nothing_within_the_bound_is_lost_and_drops_beyond_it_are_counted(store: LedgerStore) -> None:
    clock, sink, seen = Clock(), FlakySink(store), []
    writer = BufferedWriter(sink, capacity=100, batch_size=30, clock=clock, on_status=seen.append)
    sink.down = True
    assert writer.submit_many(start(f"u{i}") for i in range(60)) == 60
    assert writer.flush() is False
    assert writer.submit_many(start(f"u{i}") for i in range(60, 130)) == 40  # 100 fit, 30 dropped
    assert writer.submit(start("late")) is False
    status = writer.status
    assert (status.buffered, status.dropped, status.written, status.failures) == (100, 31, 0, 1)
    assert status.last_error == "ledger postgresql+psycopg://db/ledger: connection refused"
    assert seen[-1] == status
    sink.down = False
    clock.now = 10.0
    assert writer.flush() is True
    assert writer.status == WriterStatus(buffered=0, dropped=31, written=100, failures=0, last_error=None,
                                         retry_at=None)
    assert sink.attempts == [30, 30, 30, 30, 10]  # the failed batch again, then the rest in batches
    assert sorted(s.pod_uid for s in store.open_intervals()) == sorted(f"u{i}" for i in range(100))  # none lost


def test_a_failed_batch_is_retried_in_order_with_its_ends() -> None:
    clock, sink = Clock(), FlakySink()
    writer = BufferedWriter(sink, clock=clock)
    events: list[LedgerEvent] = [start("u1"), end("u1"), start("u2")]
    writer.submit_many(events)
    sink.down = True
    writer.flush()
    sink.down = False
    clock.now = 100.0
    writer.flush()
    assert sink.written == events


def test_the_backoff_doubles_up_to_its_maximum_and_resets_on_success() -> None:
    clock, sink = Clock(), FlakySink()
    writer = BufferedWriter(sink, clock=clock, backoff=Backoff(initial_s=0.5, factor=2.0, maximum_s=4.0))
    writer.submit(start("u1"))
    sink.down = True
    attempts_at = []
    while clock.now < 20.0:
        before = len(sink.attempts)
        writer.flush()
        if len(sink.attempts) > before:
            attempts_at.append(clock.now)
        clock.now = round(clock.now + 0.25, 2)
    assert attempts_at == [0.0, 0.5, 1.5, 3.5, 7.5, 11.5, 15.5, 19.5]
    assert writer.status.retry_at == 23.5
    assert writer.flush(force=True) is False and writer.status.failures == 9  # force skips the wait
    sink.down = False
    assert writer.flush(force=True) is True
    assert writer.status.retry_at is None and writer.status.failures == 0


def test_run_sleeps_as_the_backoff_says_and_flushes_at_stop() -> None:
    clock, sink = Clock(), FlakySink()
    writer = BufferedWriter(sink, clock=clock, backoff=Backoff(initial_s=1.0, factor=3.0, maximum_s=100.0))
    writer.submit(start("u1"))
    sink.down = True
    stop = asyncio.Event()
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.now += seconds
        if len(waits) == 4:
            sink.down = False  # the database comes back
        if len(waits) == 6:
            writer.submit(end("u1"))
            stop.set()

    async def inline(flush):  # type: ignore[no-untyped-def]
        return flush()

    asyncio.run(writer.run(stop, interval=5.0, sleep=sleep, offload=inline))
    assert waits == [1.0, 3.0, 9.0, 27.0, 5.0, 5.0]  # backing off, then the interval once written
    assert sink.written == [start("u1"), end("u1")]  # the last flush at stop wrote the late end


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="capacity"):
        BufferedWriter(FlakySink(), capacity=0)


def test_a_real_database_that_is_down_then_back_loses_nothing(backend: str, request: pytest.FixtureRequest,
                                                              tmp_path: Path) -> None:
    """The database is really away (SQLite: its directory is missing; PostgreSQL: the database does not
    exist yet), then comes back: everything buffered meanwhile is written, once."""
    if backend == "sqlite":
        folder = tmp_path / "ledger"
        folder.mkdir()
        url = str(folder / "l.db")
        lazy = open_ledger(url, connect=False)
        folder.rmdir()

        def come_back() -> None:
            folder.mkdir()
    else:
        server = request.getfixturevalue("postgres")
        name = f"ledger_late_{os.getpid()}"
        url = server.url(name)
        lazy = open_ledger(url, connect=False)

        def come_back() -> None:
            server.admin(f"CREATE DATABASE {name}")

    clock = Clock()
    writer = BufferedWriter(lazy, capacity=1_000, batch_size=64, clock=clock)
    events: list[LedgerEvent] = [start(f"u{i}") for i in range(300)] + [end(f"u{i}") for i in range(0, 300, 3)]
    writer.submit_many(events[:200])
    assert writer.flush() is False
    assert writer.status.failures == 1 and writer.status.buffered == 200
    assert writer.status.last_error is not None and writer.status.last_error.startswith("ledger ")
    writer.submit_many(events[200:])
    come_back()
    clock.now = 60.0
    assert writer.flush() is True
    assert writer.status.written == len(events) and writer.status.dropped == 0
    with lazy:
        got = lazy.intervals()
    assert len(got) == 300 and sum(i.ended_at is not None for i in got) == 100
