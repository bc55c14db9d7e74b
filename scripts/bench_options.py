"""The cost of every issue-17 option at once on the bench shapes (issue 17: "Bench shapes keep their
targets with every option on").

    .venv/bin/python scripts/bench_options.py [--options all] [--shape basic ...] [--scale 1.0] [--repeat 3]

``plain`` is bench_flavors.py's plain snapshot (every other rack relabelled A100, no option on);
``flavors`` its flavored one (ResourceFlavors h100 and a100, every queue's GPU quota split between
them); ``all`` (``--options all``) the flavored one with every other option of issue 17 on as well, with
the snapshot's own time set so that each rule engages:

- ``now``: 30 minutes after the latest creation or start time in the shape, so every pending pod has
  waited at least 30 minutes;
- reservation: ``after`` 15m, ``max`` 4, every leaf an ``observedRuntime`` of 2h, and every fourth
  running pod a declared ``gpufleet.dev/expected-runtime`` of 3h: gangs that cannot be placed (gang and
  topology shapes, stuck-gangs) have waited past ``after`` and hold reservations;
- consolidation: enabled (defaults: 8 moves a call, 1 per pod per hour, no minimum wait, 4 GPUs per
  move), every other running pod ``gpufleet.dev/checkpointed: "true"``;
- fair share over time: ``usageHalfLife`` 24h, every leaf a ``status.decayedUsage`` of GPUs (0 to 3x
  its quota, by its position) as of an hour before ``now``;
- disruption guards: every queue ``minRuntime`` 1h (the running pods started in the last hour before
  ``now`` are no victims: 2% in ``preemption`` at scale 1, more at smaller scales, all of them below
  0.05) and ``preemptionDelay`` 10m (shorter than
  every pending pod's wait, so the shape's preemptions still happen: the rule is checked, not
  triggered).

Each shape runs its modes alternately, ``--repeat`` times each, and prints per mode the median CPU
seconds of one call, the ratio to ``plain``, the pods decided per CPU second and whether the shape's
target (bench_flavors.TARGETS) is met, and the median CPU seconds of ``schedule`` alone; then the table
in Markdown. A call is timed as the controller and ``replay`` make it (bench_flavors.timed): DRA objects
read (``resolve_devices``), ``schedule``, devices handed back (``attach``); only ``dra-basic`` has DRA
objects (before issue 17's wt-dra, ``schedule`` was timed on its snapshot unread: pods of no GPU). ``--options
flavors`` runs plain and flavors only (bench_flavors.py's comparison).

``--reference SRC`` (at ``--scale 1``) also times the plain shapes of another checkout (``SRC``: its
``src`` directory) in child processes before and after each shape's modes: with the checkout of 85312c8,
whose figures where the targets were set are recorded (``RECORDED_85312C8``), the ratio of the two gives
the speed of that machine against this one by shape, and each figure is also given at that speed with
its verdict there (a share of ``basic`` needs no such scaling: ``basic`` is timed alternately with the shape here).

``--digest`` times nothing: it prints per shape and mode the numbers of bindings, evictions, pending
pods, moves and reservations and the SHA-256 of the decisions' JSON (as decisions_digest.py does; of
the call as timed: with ``dra-basic``'s DRA objects read and its devices handed back), to
compare the decisions of two trees (the old tree's ``src`` first on ``PYTHONPATH``) with every option
on; ``--one-by-one`` turns the batch path off (``Engine.USE_BATCH``), whose decisions must be the same.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_flavors import MAX_SECONDS, RELATIVE, flavored, timed, two_models, verdict

from gpufleet.adapters import resolve_devices
from gpufleet.adapters.output import render_json
from gpufleet.bench.shapes import SHAPES, make_shape
from gpufleet.domain import (
    ANNOTATION_CHECKPOINTED,
    ANNOTATION_EXPECTED_RUNTIME,
    GPU,
    MILLI,
    Consolidation,
    ReservationConfig,
    Snapshot,
)
from gpufleet.engine import schedule
from gpufleet.engine.scheduler import Engine

HOUR = 3600.0

# What 85312c8 (the end of issue 13, the last commit before these options) gave where the shapes'
# targets were set: `gpufleet bench` pods per second (stuck-gangs: seconds a call), BENCHMARKS.md
# "Issue 13: every target in one run, after round three", the "after" column. ``--reference`` times
# that tree's plain shapes on this machine in the same run: the ratio of the two is this machine's
# speed against that one, by shape, and scales this run's figures to the machine the targets were
# set on (the "at ref. speed" column).
RECORDED_85312C8: dict[str, float] = {
    "basic": 41_450, "gang-small": 40_293, "gang-large": 50_529, "preemption": 2_343, "topology": 16_756,
    "affinity": 12_693, "basic-projects": 26_440, "dra-basic": 17_335, "queues-2000": 19_353,
    "stuck-gangs": 0.752,
}

_REFERENCE_TIMING = """
import json, statistics, sys, time
from gpufleet.bench.shapes import make_shape
from gpufleet.engine import schedule
shape, scale, repeat = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
snapshot = make_shape(shape, scale)
schedule(snapshot)
cpu = []
for _ in range(repeat):
    start = time.process_time()
    decisions = schedule(snapshot)
    cpu.append(time.process_time() - start)
print(json.dumps({"cpu": statistics.median(cpu), "pods": len(decisions.bindings) + len(decisions.pending)}))
"""


def reference_cpu(src: str, shape: str, scale: float, repeat: int) -> tuple[float, int]:
    """Median CPU seconds of one plain ``schedule()`` call of ``shape`` with the tree at ``src``, and
    the pods it decided (a child process with that tree's package first on its path)."""
    env = dict(os.environ, PYTHONPATH=src)
    out = subprocess.run([sys.executable, "-c", _REFERENCE_TIMING, shape, str(scale), str(repeat)], env=env,
                         check=True, capture_output=True, text=True).stdout
    got = json.loads(out)
    return float(got["cpu"]), int(got["pods"])


def every_option(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` (flavored) with every other option of issue 17 on (see the module's docstring)."""
    latest = max((max(p.creation_time, p.start_time or 0.0) for p in snapshot.pods), default=0.0)
    now = latest + 1800.0
    parents = {q.parent for q in snapshot.queues if q.parent is not None}
    leaves = {q.name: k for k, q in enumerate(q for q in snapshot.queues if q.name not in parents)}
    queues = []
    for q in snapshot.queues:
        q = replace(q, min_runtime=HOUR, preemption_delay=600.0)
        if q.name not in parents:
            quota = sum((f.resources[GPU].quota or 0) for f in q.flavors if GPU in f.resources)
            quota += (q.resources[GPU].quota or 0) if GPU in q.resources else 0
            k = leaves[q.name]
            usage = max(MILLI, quota) * (k % 4)
            q = replace(q, decayed_usage={GPU: usage} if usage else {}, decayed_at=now - HOUR)
        queues.append(q)
    pods = []
    running = 0
    for p in snapshot.pods:
        if p.node_name is not None:
            extra = {}
            if running % 2 == 0:
                extra[ANNOTATION_CHECKPOINTED] = "true"
            if running % 4 == 1:
                extra[ANNOTATION_EXPECTED_RUNTIME] = "3h"
            running += 1
            if extra:
                p = replace(p, annotations={**p.annotations, **extra})
        pods.append(p)
    config = replace(
        snapshot.config,
        now=now,
        usage_half_life=24 * HOUR,
        consolidation=Consolidation(enabled=True),
        reservation=ReservationConfig(after=900.0, max=4, observed_runtime=dict.fromkeys(leaves, 2 * HOUR)),
    )
    return replace(snapshot, queues=tuple(queues), pods=tuple(pods), config=config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--options", choices=("all", "flavors"), default="all")
    parser.add_argument("--shape", action="append", choices=list(SHAPES), help="only these shapes (default: all)")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--digest", action="store_true", help="print the decisions' digests, time nothing")
    parser.add_argument("--one-by-one", action="store_true", help="with --digest: the batch path off")
    parser.add_argument("--reference", metavar="SRC",
                        help="the src directory of a checkout of 85312c8: time its plain shapes in the same run "
                             "and give every figure at the speed of the machine the targets were set on")
    args = parser.parse_args()
    if args.reference and args.scale != 1.0:
        parser.error("--reference: the recorded figures are at --scale 1")
    modes = ("plain", "flavors", "all") if args.options == "all" else ("plain", "flavors")
    if args.digest:
        Engine.USE_BATCH = not args.one_by_one
        for shape in args.shape or SHAPES:
            plain = two_models(make_shape(shape, args.scale))
            snapshots = {"plain": plain, "flavors": flavored(plain)}
            snapshots["all"] = every_option(snapshots["flavors"])
            for mode in modes:
                view = resolve_devices(snapshots[mode])
                d = view.attach(schedule(view.snapshot))
                digest = hashlib.sha256(render_json(d).encode()).hexdigest()[:16]
                print(f"{shape:15s} {mode:8s} {len(d.bindings):6d} {len(d.evictions):6d} {len(d.pending):6d} "
                      f"{len(d.moves or ()):3d} {len(d.reservations):3d} {digest}", flush=True)
        return
    rows = []
    basic: dict[str, float] = {}
    for shape in args.shape or SHAPES:
        plain = two_models(make_shape(shape, args.scale))
        snapshots = {"plain": plain, "flavors": flavored(plain)}
        if args.options == "all":
            snapshots["all"] = every_option(snapshots["flavors"])
        speed = 1.0  # the reference machine's speed against this one, for this shape
        note = ""
        if args.reference:  # the reference tree before and after, around this tree's modes
            ref = [reference_cpu(args.reference, shape, args.scale, args.repeat)]
        if shape in RELATIVE:  # its share of basic: basic's modes timed alternately with its own
            base = two_models(make_shape("basic", args.scale))
            both = dict(snapshots)
            both.update({f"basic {mode}": snap for mode, snap in
                         (("plain", base), ("flavors", flavored(base)), ("all", every_option(flavored(base))))
                         if mode in snapshots})
            got = timed(both, args.repeat)
            basic = {mode: got[f"basic {mode}"][2] / got[f"basic {mode}"][1] for mode in snapshots}
        else:
            got = timed(snapshots, args.repeat)
        if args.reference:
            ref.append(reference_cpu(args.reference, shape, args.scale, args.repeat))
            ref_cpu = statistics.median(c for c, _ in ref)
            recorded = RECORDED_85312C8[shape]
            ref_rate = ref[0][1] / ref_cpu
            speed = (ref_cpu / recorded) if shape in MAX_SECONDS else (recorded / ref_rate)
            note = f"  [85312c8 here: {ref_cpu:.3f} s, {ref_rate:,.0f}/s; reference machine {speed:.2f}x this one]"
        cells = []
        for mode in modes:
            _, cpu, n, engine = got[mode]
            cpu_ref = cpu / speed  # the CPU seconds at the reference machine's speed
            rate = n / cpu_ref
            if shape == "basic":
                basic[mode] = n / cpu
            # A share of basic compares two shapes timed here: no machine speed in it.
            ok = verdict(shape, n / cpu, n / cpu, basic.get(mode)) if shape in RELATIVE else \
                verdict(shape, cpu_ref, rate, None)
            cells.append((mode, cpu, cpu / got["plain"][1], n / cpu, rate, ok, engine))
        rows.append((shape, cells))
        print(f"{shape:15s} " + "  ".join(f"{m} {c:.3f} s ({r:.2f}) {here:,.0f}/s" +
                                          (f" = {rate:,.0f}/s at ref. speed" if args.reference else "") +
                                          f" [{ok}] schedule {e:.3f} s"
                                          for m, c, r, here, rate, ok, e in cells) + note, flush=True)
    ref_col = " pods/s at ref. speed |" if args.reference else ""
    print(f"\n| shape | mode | CPU s | ratio to plain | pods/CPU s |{ref_col} target | CPU s of schedule alone |")
    print("|---|---|---|---|---|---|---|" + ("---|" if args.reference else ""))
    for shape, cells in rows:
        for mode, cpu, ratio, here, rate, ok, engine in cells:
            extra = f" {rate:,.0f} |" if args.reference else ""
            print(f"| {shape} | {mode} | {cpu:.3f} | {ratio:.2f} | {here:,.0f} |{extra} {ok} | {engine:.3f} |")


if __name__ == "__main__":
    main()
