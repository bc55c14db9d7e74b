"""``gpufleet report usage`` over a large ledger: fill it (bulk batches through the store), then time the report.

    .venv/bin/python scripts/bench_report.py [--database URL] [--intervals 1000000] [--repeat 3] [--keep]
        [--reuse FILE]

Fills a fresh ledger (an SQLite file in a temporary directory unless ``--database`` names one; a PostgreSQL
URL is emptied first) with ``--intervals`` intervals over 30 days: 20 projects, 40 queues, 6 GPU models,
whole and fractional pods, a third spot or reserved, 70% with utilisation samples, a cost-centre label
each, every tenth one still open, bound in time order as a controller writes them; each interval is one
row, inserted in bulk (the driver's executemany) in batches of 50,000. Then runs ``report usage``
grouped by project and GPU model with prices, over the whole month, ``--repeat`` times in-process
(:func:`usage_report`: two SQL statements, the sums and the wait percentiles, grouped and total) and once through
the command line, and prints the medians: wall time, and this process's CPU time (SQLite runs in the
process; PostgreSQL's server time is in the wall time only). Aggregation is in SQL: the report fetches
one row per group.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpufleet.adapters.prices import load_prices_text
from gpufleet.ledger import EndReason, LedgerStore, open_ledger, to_micros
from gpufleet.ledger._schema import intervals, labels
from gpufleet.ledger.reports import usage_report

T0 = 1_793_491_200.0  # 2026-11-01T00:00:00Z
MONTH = 30 * 86400.0
MODELS = ("H100-80GB", "A100-80GB", "A100-40GB", "L40S", "V100", "T4")
CAPACITY = (None, None, "spot", None, "reserved", None)
REASONS = (EndReason.COMPLETED, EndReason.COMPLETED, EndReason.COMPLETED, EndReason.FAILED,
           EndReason.EVICTED_PREEMPTION, EndReason.EVICTED_RECLAIM, EndReason.DELETED)
PRICES_YAML = """\
currency: USD
gpus:
  H100-80GB: {onDemand: 4.10, spot: 1.60, reserved: 2.70}
  A100-80GB: {onDemand: 2.20, spot: 0.90, reserved: 1.50}
  A100-40GB: {onDemand: 1.80, spot: 0.70}
  L40S: {onDemand: 1.10}
default: {onDemand: 1.00, spot: 0.40, reserved: 0.70}
cpuPerCoreHour: 0.031
memoryPerGiBHour: 0.004
"""
PRICES = load_prices_text(PRICES_YAML, "bench-prices")
BATCH = 50_000


def batch_rows(first: int, count: int, total: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows of ``count`` whole intervals (start, end, utilisation means) and their labels, as the store keeps
    them: inserted in bulk (the store's own writes, one event at a time, are scripts/bench_ledger.py's)."""
    rows, label_rows = [], []
    for i in range(first, first + count):
        bound = to_micros(T0 + (i + (i * 7919 % 13) / 13) / total * MONTH)
        blocks = 30 if i % 9 == 0 else None
        uid = f"{i:08d}-5e1f-4c6a-9d1e-7b2f3a4c5d6e"
        measured = i % 10 < 7
        rows.append({
            "pod_uid": uid, "bound_us": bound, "namespace": f"team-{i % 40}", "pod_name": f"job-{i}-0",
            "project": f"p-{i % 20}", "queue": f"q-{i % 40}", "submitter": f"user-{i % 300}", "pod_group": None,
            "priority_class": "normal", "preemptible": i % 3 == 0, "node": f"node-{i % 2000}",
            "gpu_model": MODELS[i % len(MODELS)], "gpu_indices": "0", "gpu_blocks": blocks,
            "gpus": 0.3 if blocks else float(1 + i % 8), "cpu_milli": 8000, "memory_bytes": 64 << 30,
            "created_us": bound - (i % 600) * 1_000_000,
            "ended_us": bound + (60 + i % 7200) * 1_000_000 if i % 10 else None,
            "end_reason": REASONS[i % len(REASONS)].value if i % 10 else None, "preemptor": None,
            "util_sum": float(i % 100) if measured else 0.0, "util_n": int(measured), "sm_sum": 0.0, "sm_n": 0,
            "fb_sum": 0.0, "fb_n": 0, "last_sample_us": bound + 30_000_000 if measured else None,
            "capacity_type": CAPACITY[(i // 7) % len(CAPACITY)],
        })
        label_rows.append({"pod_uid": uid, "bound_us": bound, "key": "cost-center", "value": f"cc-{i % 12}"})
    return rows, label_rows


def _insert(conn: Any, table: Any, rows: list[dict[str, Any]]) -> None:
    """``rows`` through the driver's executemany (SQLAlchemy's per-row processing skipped: plain values)."""
    compiled = table.insert().compile(dialect=conn.dialect, column_keys=list(rows[0]))
    if compiled.positiontup is None:
        conn.exec_driver_sql(str(compiled), rows)
    else:
        order = compiled.positiontup
        conn.exec_driver_sql(str(compiled), [tuple(row[name] for name in order) for row in rows])


def fill(store: LedgerStore, count: int) -> None:
    with store.reading() as conn:  # one transaction in all
        if store.dialect == "sqlite":
            conn.exec_driver_sql("PRAGMA cache_size=-1000000")  # 1 GB while filling: 7 B-trees grow at once
        for first in range(0, count, BATCH):
            rows, label_rows = batch_rows(first, min(BATCH, count - first), count)
            _insert(conn, intervals, rows)
            _insert(conn, labels, label_rows)


def fresh(url: str | None, folder: Path) -> LedgerStore:
    if url is None:
        return open_ledger(str(folder / "ledger.db"))
    store = open_ledger(url)
    with store._engine.begin() as conn:  # the benchmark's own reset
        conn.exec_driver_sql("DELETE FROM ledger_labels")
        conn.exec_driver_sql("DELETE FROM ledger_intervals")
    return store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--database", default=None)
    parser.add_argument("--intervals", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep the SQLite file (its path is printed)")
    parser.add_argument("--reuse", default=None, metavar="URL",
                        help="a ledger an earlier run filled (an SQLite file kept with --keep, or the PostgreSQL "
                             "--database): report over it, no fill (it is migrated as opened, then analysed)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="gpf-bench-report-"))
    if args.reuse is not None:
        url = args.reuse
        store = open_ledger(url)
        if store.dialect == "postgresql":  # statistics for indexes a migration just made
            with store._engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE")
        print(f"reusing {store.shown_url}")
    else:
        store = fresh(args.database, folder)
        began = time.perf_counter()
        fill(store, args.intervals)
        if store.dialect == "postgresql":
            with store._engine.begin() as conn:
                conn.exec_driver_sql("ANALYZE")
        print(f"filled {args.intervals:,} intervals in {time.perf_counter() - began:.1f} s ({store.dialect})")
        url = args.database or str(folder / "ledger.db")
    store.close()
    store = open_ledger(url)  # as a report opens it (the fill's connection settings are not the report's)

    times, cpu = [], []
    for _ in range(args.repeat):
        began, began_cpu = time.perf_counter(), time.process_time()
        report = usage_report(store, since=T0, until=T0 + MONTH, now=T0 + 2 * MONTH,
                              group_by=("project", "gpu-model"), prices=PRICES)
        times.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    store.close()
    total = report.total
    print(f"report usage --group-by project,gpu-model: {len(report.rows)} rows, {total.intervals:,} intervals, "
          f"{total.gpu_hours:,.0f} GPU-hours, cost {total.cost:,.0f} {report.currency}, wait p99 "
          f"{total.wait_p99_s:.0f} s")
    print(f"in-process: median {statistics.median(times):.2f} s wall ({', '.join(f'{t:.2f}' for t in times)}), "
          f"{statistics.median(cpu):.2f} s CPU ({', '.join(f'{t:.2f}' for t in cpu)})")

    prices = folder / "prices.yaml"
    prices.write_text(PRICES_YAML)
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpufleet", "report", "usage", "--database", url, "--since", "2026-11-01",
                    "--until", "2026-12-01", "--group-by", "project,gpu-model", "--prices", str(prices)],
                   check=True, stdout=subprocess.DEVNULL)
    print(f"command line (gpufleet report usage ... --format table, start-up included): "
          f"{time.perf_counter() - began:.2f} s")
    if args.keep:
        print(f"kept {url}")


if __name__ == "__main__":
    main()
