"""Time ``basic`` and ``dra-basic`` alternately in one process (BENCHMARKS.md, "DRA allocation").

Usage: .venv/bin/python scripts/bench_dra_vs_basic.py [ROUNDS] [--cache none|same|new-pods]

Prints, per shape, the median CPU seconds (``time.process_time``) of the whole call
(``resolve_devices`` + ``schedule`` + ``attach``) and of ``schedule`` alone, and the ratio of
``basic``'s time to ``dra-basic``'s (the ratio of their decision rates: both decide 10,000 pods);
and the median time per call of the cyclic collector's passes (``gc.callbacks``), which a call's
objects cost when the collector runs again after each step (they are memory-bound: instruction
counts hardly show them).

``--cache``: each shape's calls keep a DeviceCache between them, as the controller does between
cycles: ``same``, every call on the same snapshot (a cycle in which nothing changed since the last);
``new-pods``, every call on a snapshot whose pods and ResourceClaims are new (equal) objects, made
before the call and not timed (a cycle in which every pod and claim just arrived; nodes and slices
unchanged). ``none`` (the default): no cache, as ``replay`` and bench_options.py make the call.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from dataclasses import replace

from gpufleet.adapters import DeviceCache, resolve_devices
from gpufleet.bench.shapes import make_shape
from gpufleet.domain import Snapshot
from gpufleet.engine import schedule


def renewed(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with new (equal) pod and ResourceClaim objects."""
    return replace(snapshot, pods=tuple(replace(p) for p in snapshot.pods),
                   resource_claims=tuple(replace(c) for c in snapshot.resource_claims))


def main(rounds: int, cache_mode: str) -> None:
    shapes = {name: make_shape(name) for name in ("basic", "dra-basic")}
    caches = {name: DeviceCache() if cache_mode != "none" else None for name in shapes}
    whole: dict[str, list[float]] = {name: [] for name in shapes}
    engine: dict[str, list[float]] = {name: [] for name in shapes}
    collector: dict[str, list[float]] = {name: [] for name in shapes}
    passes: list[float] = []
    began = [0.0]

    def watch(phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.process_time()
        else:
            passes.append(time.process_time() - began[0])

    gc.callbacks.append(watch)
    for _ in range(rounds):
        for name, snapshot in shapes.items():
            if cache_mode == "new-pods":
                snapshot = renewed(snapshot)
            passes.clear()
            start = time.process_time()
            view = resolve_devices(snapshot, caches[name])
            engine_start = time.process_time()
            decisions = schedule(view.snapshot)
            engine_end = time.process_time()
            view.attach(decisions)
            _ = [[] for _ in range(1000)]  # the collector's pass due after the last step, in the call
            whole[name].append(time.process_time() - start)
            engine[name].append(engine_end - engine_start)
            collector[name].append(sum(passes))
    gc.callbacks.remove(watch)
    medians = {name: (statistics.median(whole[name]), statistics.median(engine[name])) for name in shapes}
    for name, (total, alone) in medians.items():
        print(f"{name}: whole call {total:.3f} s, schedule {alone:.3f} s, "
              f"collector {statistics.median(collector[name]):.3f} s")
    print(f"rate of dra-basic / basic: whole call {medians['basic'][0] / medians['dra-basic'][0]:.2f}, "
          f"schedule {medians['basic'][1] / medians['dra-basic'][1]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int, nargs="?", default=7)
    parser.add_argument("--cache", choices=("none", "same", "new-pods"), default="none")
    args = parser.parse_args()
    main(args.rounds, args.cache)
