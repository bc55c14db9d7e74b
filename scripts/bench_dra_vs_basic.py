"""Time ``basic`` and ``dra-basic`` alternately in one process (BENCHMARKS.md, "DRA allocation").

Usage: .venv/bin/python scripts/bench_dra_vs_basic.py [ROUNDS]

Prints, per shape, the median of the whole call (``resolve_devices`` + ``schedule`` + ``attach``)
and of ``schedule`` alone, and the ratio of ``basic``'s time to ``dra-basic``'s (the ratio of
their decision rates: both decide 10,000 pods); and the median time per call of the cyclic collector's
passes (``gc.callbacks``), which a call's objects cost when the collector runs again after each step
(they are memory-bound: instruction counts hardly show them).
"""

from __future__ import annotations

import gc
import statistics
import sys
import time

from gpufleet.adapters import resolve_devices
from gpufleet.bench.shapes import make_shape
from gpufleet.engine import schedule


def main(rounds: int) -> None:
    shapes = {name: make_shape(name) for name in ("basic", "dra-basic")}
    whole: dict[str, list[float]] = {name: [] for name in shapes}
    engine: dict[str, list[float]] = {name: [] for name in shapes}
    collector: dict[str, list[float]] = {name: [] for name in shapes}
    passes: list[float] = []
    began = [0.0]

    def watch(phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            passes.append(time.perf_counter() - began[0])

    gc.callbacks.append(watch)
    for _ in range(rounds):
        for name, snapshot in shapes.items():
            passes.clear()
            start = time.perf_counter()
            view = resolve_devices(snapshot)
            engine_start = time.perf_counter()
            decisions = schedule(view.snapshot)
            engine_end = time.perf_counter()
            view.attach(decisions)
            _ = [[] for _ in range(1000)]  # the collector's pass due after the last step, in the call
            whole[name].append(time.perf_counter() - start)
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
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
