"""The engine's time on every bench shape with consolidation off and on (docs/semantics.md).

    .venv/bin/python scripts/bench_consolidation.py [--scale 1.0] [--repeat 3]

"on": consolidation enabled (8 moves per cycle, 1 per pod per hour), the snapshot's ``now`` set, and
every running pod annotated ``gpufleet.dev/checkpointed: "true"`` (every preemptible running gang is
movable: the search's worst case). Prints per shape the best of ``--repeat`` calls of ``schedule``
each way, the ratio, and the moves made.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from gpufleet.bench.shapes import SHAPES, make_shape
from gpufleet.domain import ANNOTATION_CHECKPOINTED, Consolidation, Snapshot
from gpufleet.engine.scheduler import schedule


def consolidating(snapshot: Snapshot) -> Snapshot:
    pods = tuple(replace(p, annotations={**p.annotations, ANNOTATION_CHECKPOINTED: "true"}) if p.node_name else p
                 for p in snapshot.pods)
    config = replace(snapshot.config, now=1_000_000.0, consolidation=Consolidation(True, 8, 1))
    return replace(snapshot, pods=pods, config=config)


def best(snapshot: Snapshot, repeat: int) -> tuple[float, int]:
    times = []
    moves = 0
    for _ in range(repeat):
        started = time.perf_counter()
        decisions = schedule(snapshot)
        times.append(time.perf_counter() - started)
        moves = len(decisions.moves or ())
    return min(times), moves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shape", action="append", help="only these shapes (default: all)")
    args = parser.parse_args()
    print(f"{'shape':16s} {'off s':>8s} {'on s':>8s} {'on/off':>7s} {'moves':>6s}")
    for name in args.shape or SHAPES:
        snapshot = make_shape(name, args.scale)
        off, _ = best(snapshot, args.repeat)
        on, moves = best(consolidating(snapshot), args.repeat)
        print(f"{name:16s} {off:8.3f} {on:8.3f} {on / off:7.2f} {moves:6d}", flush=True)


if __name__ == "__main__":
    main()
