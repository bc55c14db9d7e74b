"""Ledger ingestion: interval events per second written in batches, through the store and the buffered writer.

    .venv/bin/python scripts/bench_ledger.py [--database URL] [--intervals 50000] [--batch 5000] [--repeat 3]

Each round opens a fresh ledger (an SQLite file in a temporary directory unless ``--database`` names one;
a PostgreSQL URL is emptied first), then writes ``--intervals`` interval starts (each with one cost-centre
label) followed by their ends: 2 x ``--intervals`` events, in batches of ``--batch``, one transaction
each, the same again through a :class:`BufferedWriter` (submit everything, then flush), and the same
intervals as closed :class:`Interval` records (a start and an end each, in batches of half the size: the
same intervals per transaction). Prints the
median events per second of each path, and per CPU second of this process (the whole cost with SQLite,
which runs in the process; the client's share with PostgreSQL): the steadier figure on a loaded machine.
SQLite runs as the ledger always does: WAL, synchronous=FULL.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gpufleet.ledger import (
    BufferedWriter,
    EndReason,
    Interval,
    IntervalEnd,
    IntervalStart,
    LedgerEvent,
    LedgerStore,
    open_ledger,
)

T0 = 1_790_000_000.0
REASONS = list(EndReason)


def events(count: int) -> list[LedgerEvent]:
    starts: list[LedgerEvent] = [
        IntervalStart(pod_uid=f"{i:08d}-5e1f-4c6a-9d1e-7b2f3a4c5d6e", bound_at=T0 + i * 0.01,
                      namespace=f"team-{i % 40}",
                      pod_name=f"job-{i}-worker-0", queue=f"q-{i % 40}", node=f"node-{i % 5000}", gpus=float(1 + i % 8),
                      project=f"p-{i % 20}", submitter=f"user-{i % 300}", priority_class="normal",
                      gpu_model=("H100", "A100", "L40S")[i % 3], gpu_indices=tuple(range(1 + i % 8)),
                      cpu_milli=8000, memory_bytes=64 << 30, created_at=T0 + i * 0.01 - 30.0,
                      labels={"cost-center": f"cc-{i % 12}"})
        for i in range(count)
    ]
    ends: list[LedgerEvent] = [
        IntervalEnd(s.pod_uid, s.bound_at, s.bound_at + 3600.0, REASONS[i % len(REASONS)])
        for i, s in enumerate(starts) if isinstance(s, IntervalStart)
    ]
    return starts + ends


def fresh(url: str | None, folder: Path, round_no: int) -> LedgerStore:
    if url is None:
        return open_ledger(str(folder / f"ledger-{round_no}.db"))
    store = open_ledger(url)
    with store._engine.begin() as conn:  # the benchmark's own reset
        conn.exec_driver_sql("DELETE FROM ledger_labels")
        conn.exec_driver_sql("DELETE FROM ledger_intervals")
    return store


def through_store(store: LedgerStore, batch: list[LedgerEvent], size: int) -> None:
    for first in range(0, len(batch), size):
        store.write(batch[first:first + size])


def as_intervals(batch: list[LedgerEvent]) -> list[LedgerEvent]:
    """The same intervals as closed :class:`Interval` records (as a simulator writes them)."""
    ends = {(e.pod_uid, e.bound_at): e for e in batch if isinstance(e, IntervalEnd)}
    return [Interval(s, ends[s.pod_uid, s.bound_at].ended_at, ends[s.pod_uid, s.bound_at].reason)
            for s in batch if isinstance(s, IntervalStart)]


def whole_intervals(store: LedgerStore, wholes: list[LedgerEvent], size: int) -> None:
    through_store(store, wholes, size // 2)  # as many intervals per transaction as the other paths


def through_writer(store: LedgerStore, batch: list[LedgerEvent], size: int) -> None:
    writer = BufferedWriter(store, capacity=len(batch), batch_size=size)
    writer.submit_many(batch)
    assert writer.flush() and writer.status.written == len(batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database", default=None, help="a ledger URL (default: a fresh SQLite file per round)")
    parser.add_argument("--intervals", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    batch = events(args.intervals)
    wholes = as_intervals(batch)
    paths: dict[str, Callable[[LedgerStore, list[LedgerEvent], int], None]] = {
        "store.write": through_store, "BufferedWriter": through_writer, "whole Intervals": whole_intervals}
    rates: dict[str, list[float]] = {name: [] for name in paths}
    cpu_rates: dict[str, list[float]] = {name: [] for name in paths}
    with tempfile.TemporaryDirectory() as tmp:
        for round_no in range(args.repeat):
            for index, (name, path) in enumerate(paths.items()):  # interleaved
                with fresh(args.database, Path(tmp), round_no * len(paths) + index) as store:
                    started, cpu = time.perf_counter(), time.process_time()
                    path(store, wholes if path is whole_intervals else batch, args.batch)
                    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
                    written = store.intervals()
                    assert len(written) == args.intervals and all(i.ended_at is not None for i in written)
                rates[name].append(len(batch) / elapsed)
                cpu_rates[name].append(len(batch) / cpu)
    target = args.database or "sqlite (temporary file)"
    for name, values in rates.items():
        print(f"{name:16} {statistics.median(values):>10,.0f} events/s, {statistics.median(cpu_rates[name]):>10,.0f} "
              f"per CPU second of this process  (medians of {args.repeat}; "
              f"{args.intervals:,} starts + {args.intervals:,} ends, batches of {args.batch:,}, {target})")


if __name__ == "__main__":
    main()
