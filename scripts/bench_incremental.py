"""Time IncrementalEngine against a fresh schedule() over successive snapshots of one cluster
(BENCHMARKS.md, "Issue 13: the incremental engine").

Usage: .venv/bin/python scripts/bench_incremental.py [--shape preemption] [--scale 1.0] [--calls 10]
                                                      [--delta 5]

The first snapshot is a bench shape; the engine's first call builds its state. Each next snapshot
is the last one with its decisions carried out (bound pods running, evicted pods gone), then
``--delta`` running pods finished and ``--delta`` new pending pods (copies of pending pods, or of
running ones when none is pending). Each snapshot is decided twice, alternately: by a fresh
``schedule()`` and by the IncrementalEngine (decisions checked equal). Prints the first call and
the median of the others for both, per call and in pods of the snapshot per second.
"""

from __future__ import annotations

import argparse
import statistics
import time

from gpufleet.bench.deltas import carried_out, small_delta
from gpufleet.bench.shapes import SHAPES, make_shape
from gpufleet.engine import IncrementalEngine, schedule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="preemption", choices=SHAPES)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--calls", type=int, default=10, help="calls after the first")
    parser.add_argument("--delta", type=int, default=5, help="pods finished and pods added between calls")
    args = parser.parse_args()
    snapshot = make_shape(args.shape, args.scale)
    engine = IncrementalEngine()
    fresh_s: list[float] = []
    kept_s: list[float] = []
    pods: list[int] = []
    for step in range(args.calls + 1):
        start = time.perf_counter()
        fresh = schedule(snapshot)
        middle = time.perf_counter()
        kept = engine(snapshot)
        end = time.perf_counter()
        if kept != fresh:
            raise SystemExit(f"call {step}: the IncrementalEngine decided otherwise than schedule()")
        fresh_s.append(middle - start)
        kept_s.append(end - middle)
        pods.append(len(snapshot.pods))
        snapshot = small_delta(carried_out(snapshot, fresh, 1e9 + step), step, args.delta)
    n = statistics.median(pods[1:])
    f, k = statistics.median(fresh_s[1:]), statistics.median(kept_s[1:])
    print(f"{args.shape} x{args.scale}: {pods[0]:,} pods, then {args.calls} calls each after {args.delta} pods "
          f"finished and {args.delta} added (median {n:,.0f} pods); kept state followed "
          f"{args.calls + 1 - engine.fresh_calls} of {args.calls + 1} calls")
    print(f"first call: schedule {fresh_s[0]:.3f} s, IncrementalEngine {kept_s[0]:.3f} s")
    print(f"next calls (median): schedule {f:.3f} s ({n / f:,.0f} pods/s), IncrementalEngine {k:.3f} s "
          f"({n / k:,.0f} pods/s): {f / k:.2f}x")


if __name__ == "__main__":
    main()
