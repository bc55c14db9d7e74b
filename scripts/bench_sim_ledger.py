"""What ``simulate run --ledger`` costs beyond the run: mapping the result to intervals, writing them,
and writing them again (a no-op), on a Philly-like run. BENCHMARKS.md, "Issue 14: the simulator's ledger".

    .venv/bin/python scripts/bench_sim_ledger.py --trace ../shared/traces/philly-atc19/philly_jobs_pollux_processed.csv
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from gpufleet.adapters.traces import load_trace
from gpufleet.ledger import open_ledger
from gpufleet.sim import QueueBy, RunSettings, Workload, load_cluster, prepare, select_jobs, simulate
from gpufleet.sim.ledger_export import DEFAULT_ORIGIN_S, ledger_intervals

BATCH = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", required=True)
    parser.add_argument("--cluster", default="examples/cluster-philly.yaml")
    parser.add_argument("--limit", type=int, default=None, help="only the first N jobs")
    args = parser.parse_args()
    jobs, report = load_trace(args.trace)
    workload = Workload(select_jobs(jobs, None, args.limit), load_cluster(args.cluster))
    setup, options = prepare(workload, RunSettings(queue_by=QueueBy.VC))
    cpu, wall = time.process_time(), time.perf_counter()
    result = simulate(setup, options)
    print(f"run: cpu {time.process_time() - cpu:.2f} s, wall {time.perf_counter() - wall:.2f} s")
    origin = report.start_epoch_s if report.start_epoch_s is not None else DEFAULT_ORIGIN_S
    cpu, wall = time.process_time(), time.perf_counter()
    intervals = list(ledger_intervals(result, origin_s=origin, run_key="bench"))
    print(f"map: {len(intervals):,} intervals, cpu {time.process_time() - cpu:.2f} s, "
          f"wall {time.perf_counter() - wall:.2f} s")
    with tempfile.TemporaryDirectory() as folder, open_ledger(str(Path(folder) / "ledger.db")) as store:
        for what in ("write", "write again (no-op)"):
            cpu, wall = time.process_time(), time.perf_counter()
            for i in range(0, len(intervals), BATCH):
                store.write(intervals[i:i + BATCH])
            seconds = time.perf_counter() - wall
            print(f"{what}: cpu {time.process_time() - cpu:.2f} s, wall {seconds:.2f} s "
                  f"({len(intervals) / seconds:,.0f} intervals/s)")


if __name__ == "__main__":
    main()
