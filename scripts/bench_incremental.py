"""Time IncrementalEngine against a fresh schedule() over successive snapshots of one cluster
(BENCHMARKS.md, "Issue 13: the incremental engine").

Usage: .venv/bin/python scripts/bench_incremental.py [--shape preemption] [--scale 1.0] [--calls 10]
                                                      [--delta 5]
       .venv/bin/python scripts/bench_incremental.py --trace PHILLY.csv [--cluster examples/cluster-philly.yaml]
                                                      [--days 0-30] [--rounds 3]

The first snapshot is a bench shape; the engine's first call builds its state. Each next snapshot
is the last one with its decisions carried out (bound pods running, evicted pods gone), then
``--delta`` running pods finished and ``--delta`` new pending pods (copies of pending pods, or of
running ones when none is pending). Each snapshot is decided twice, alternately: by a fresh
``schedule()`` and by the IncrementalEngine (decisions checked equal). Prints the first call and
the median of the others for both, per call and in pods of the snapshot per second.

With ``--trace``: the snapshots of a ``simulate run`` (queues by virtual cluster, the default
1-minute cycle) whose cycles fall in ``--days``, recorded once, then decided in turn by
``schedule()`` and by one IncrementalEngine over the whole sequence, ``--rounds`` times; prints
the CPU time per call (the least of the rounds) of both.
"""

from __future__ import annotations

import argparse
import statistics
import time

from gpufleet.adapters.traces import load_trace
from gpufleet.bench.deltas import carried_out, small_delta
from gpufleet.bench.shapes import SHAPES, make_shape
from gpufleet.domain import Decisions, Snapshot
from gpufleet.engine import IncrementalEngine, schedule
from gpufleet.sim.compare import RunSettings
from gpufleet.sim.queue_mapping import QueueBy
from gpufleet.sim.scenario import Workload, load_cluster, prepare, select_jobs
from gpufleet.sim.timeline import Timeline


def trace_cycles(trace: str, cluster: str, days: str) -> list[Snapshot]:
    """The snapshots of the simulation's cycles from day ``a`` to day ``b`` (``days``: "a-b")."""
    first, last = (float(d) * 86400 for d in days.split("-"))
    jobs, _ = load_trace(trace)
    workload = Workload(select_jobs(jobs, last, None), load_cluster(cluster), until_s=last)
    setup, options = prepare(workload, RunSettings(queue_by=QueueBy.VC))
    kept: list[Snapshot] = []
    engine = IncrementalEngine()
    timeline: Timeline

    def record(snapshot: Snapshot) -> Decisions:
        if timeline.clock.now >= first:
            kept.append(snapshot)
        return engine(snapshot)

    timeline = Timeline(setup, options, scheduler=record)
    timeline.run()
    return kept


def replay_cycles(snapshots: list[Snapshot], rounds: int) -> None:
    cpu: dict[str, list[float]] = {"schedule": [], "IncrementalEngine": []}
    for _ in range(rounds):
        for name in cpu:
            decide = schedule if name == "schedule" else IncrementalEngine()
            start = time.process_time()
            for snapshot in snapshots:
                decide(snapshot)
            cpu[name].append((time.process_time() - start) / len(snapshots))
    pods = statistics.mean(len(s.pods) for s in snapshots)
    f, k = min(cpu["schedule"]), min(cpu["IncrementalEngine"])
    print(f"{len(snapshots):,} cycles, {pods:,.0f} pods on average: schedule {f * 1e3:.3f} ms CPU per call, "
          f"IncrementalEngine {k * 1e3:.3f} ms: {f / k:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="preemption", choices=SHAPES)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--calls", type=int, default=10, help="calls after the first")
    parser.add_argument("--delta", type=int, default=5, help="pods finished and pods added between calls")
    parser.add_argument("--trace", help="a Philly job list: time the cycles of its simulation instead")
    parser.add_argument("--cluster", default="examples/cluster-philly.yaml")
    parser.add_argument("--days", default="0-30", help="the cycles timed, from day a to day b: a-b")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.trace:
        replay_cycles(trace_cycles(args.trace, args.cluster, args.days), args.rounds)
        return
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
