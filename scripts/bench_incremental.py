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
import dataclasses
import statistics
import time

from gpufleet.bench.shapes import SHAPES, make_shape
from gpufleet.domain import Decisions, Snapshot
from gpufleet.engine import IncrementalEngine, schedule


def carried_out(snapshot: Snapshot, decisions: Decisions, now: float) -> Snapshot:
    """``snapshot`` after a controller carried out ``decisions``."""
    bound = {b.pod: b for b in decisions.bindings}
    evicted = {e.pod for e in decisions.evictions}
    pods = []
    for pod in snapshot.pods:
        if pod.key in evicted:
            continue
        b = bound.get(pod.key)
        if b is not None:
            pod = dataclasses.replace(pod, node_name=b.node, phase="Running", gpu_index=b.gpus, start_time=now,
                                      gpu_blocks=b.gpu_blocks if b.gpu_blocks is not None else pod.gpu_blocks)
        pods.append(pod)
    return dataclasses.replace(snapshot, pods=tuple(pods))


def delta(snapshot: Snapshot, step: int, size: int) -> Snapshot:
    """``size`` running pods finish (spread over the list) and ``size`` new pending pods arrive."""
    pods = list(snapshot.pods)
    running = [i for i, p in enumerate(pods) if p.bound]
    for i in running[step % max(1, len(running) // max(1, size))::max(1, len(running) // max(1, size))][:size]:
        pods[i] = dataclasses.replace(pods[i], phase="Succeeded")
    models = [p for p in pods if not p.bound and not p.finished] or [p for p in pods if p.bound]
    for k in range(size):
        model = models[(step * size + k) % len(models)]
        pods.append(dataclasses.replace(model, name=f"{model.name}-d{step}-{k}", node_name=None, phase="Pending",
                                        gpu_index=(), start_time=None, group_label=None))
    return dataclasses.replace(snapshot, pods=tuple(pods))


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
        snapshot = delta(carried_out(snapshot, fresh, 1e9 + step), step, args.delta)
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
