"""The cost of GPU-model quotas on the bench shapes (docs/semantics.md, "GPU-model quotas").

    .venv/bin/python scripts/bench_flavors.py [--shape basic ...] [--scale 1.0] [--repeat 3]

The shape's nodes of every other rack are relabelled A100; ``plain`` is that snapshot as it is,
``flavors`` the same with ResourceFlavors h100 and a100 and every queue's GPU quota split between
them (half each, h100 listed first). Each shape (default: all) runs plain and flavors alternately,
``--repeat`` times each; prints per shape the median wall and CPU seconds of one call (``timed``)
of each, their ratios, the pods decided per CPU second and whether the shape's target is met by them
(BENCHMARKS.md's first table, measured on an idle machine, where wall and CPU time agree: on a loaded
one the CPU time is the figure to judge by; ``basic-projects`` and ``dra-basic``: within 10% and 20%
of ``basic`` in the same mode; ``stuck-gangs``: under 0.5 s a call), then the table in Markdown.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from gpufleet.adapters import resolve_devices
from gpufleet.bench.shapes import SHAPES, make_shape
from gpufleet.domain import GPU, LABEL_GPU_PRODUCT, QueueFlavor, QueueResource, ResourceFlavor, Snapshot
from gpufleet.engine import schedule

RACK = "topology.gpufleet.dev/rack"
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"


def two_models(snapshot: Snapshot) -> Snapshot:
    nodes = tuple(
        replace(n, labels={**n.labels, LABEL_GPU_PRODUCT: A100}) if int(n.labels.get(RACK, "rack-0")[5:] or 0) % 2
        else replace(n, labels={**n.labels, LABEL_GPU_PRODUCT: H100}) for n in snapshot.nodes)
    return replace(snapshot, nodes=nodes)


def flavored(snapshot: Snapshot) -> Snapshot:
    queues = []
    for q in snapshot.queues:
        gpu = q.resources.get(GPU)
        if gpu is None:
            queues.append(q)
            continue
        half = QueueResource(None if gpu.quota is None else gpu.quota // 2, gpu.limit, gpu.lending_limit)
        queues.append(replace(q, resources={r: s for r, s in q.resources.items() if r != GPU},
                              flavors=(QueueFlavor("h100", {GPU: half}), QueueFlavor("a100", {GPU: half}))))
    flavors = (ResourceFlavor("h100", ((LABEL_GPU_PRODUCT, H100),)),
               ResourceFlavor("a100", ((LABEL_GPU_PRODUCT, A100),)))
    return replace(snapshot, queues=tuple(queues), flavors=flavors)


# Pods decided per second (None: see RELATIVE, or seconds a call for stuck-gangs).
TARGETS: dict[str, float | None] = {"basic": 10_000, "gang-small": 2_000, "gang-large": 2_000,
                                    "preemption": 2_000, "topology": 2_000, "affinity": 5_000,
                                    "basic-projects": None, "dra-basic": None, "queues-2000": 10_000,
                                    "stuck-gangs": None}
RELATIVE = {"basic-projects": 0.9, "dra-basic": 0.8}  # at least this share of basic's pods/s
MAX_SECONDS = {"stuck-gangs": 0.5}


def timed(snapshots: dict[str, Snapshot], repeat: int) -> dict[str, tuple[float, float, int, float]]:
    """Median wall and CPU seconds of one call and pods decided, per mode, the modes alternating;
    and the median CPU seconds of ``schedule`` alone. A call is timed as the controller, ``replay``
    and ``gpufleet bench`` make it: the snapshot's DRA objects read (``resolve_devices``), scheduled,
    the devices handed back to the claims (``attach``); on a snapshot without DRA objects the first
    and last steps do nothing. (``schedule`` on a snapshot with DRA objects not read knows no DRA
    GPU: ``dra-basic``'s pods would be pods of no GPU.)"""
    wall: dict[str, list[float]] = {mode: [] for mode in snapshots}
    cpu: dict[str, list[float]] = {mode: [] for mode in snapshots}
    engine: dict[str, list[float]] = {mode: [] for mode in snapshots}
    decided: dict[str, int] = {}
    for _ in range(repeat):
        for mode, snapshot in snapshots.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            view = resolve_devices(snapshot)
            engine_cpu = time.process_time()
            decisions = schedule(view.snapshot)
            engine[mode].append(time.process_time() - engine_cpu)
            decisions = view.attach(decisions)
            cpu[mode].append(time.process_time() - start_cpu)
            wall[mode].append(time.perf_counter() - start)
            decided[mode] = len(decisions.bindings) + len(decisions.pending)
    return {mode: (statistics.median(wall[mode]), statistics.median(cpu[mode]), decided[mode],
                   statistics.median(engine[mode])) for mode in snapshots}


def verdict(shape: str, seconds: float, rate: float, basic_rate: float | None) -> str:
    """The target and whether this run meets it."""
    if shape in MAX_SECONDS:
        return f"< {MAX_SECONDS[shape]} s: {'yes' if seconds < MAX_SECONDS[shape] else 'no'}"
    if shape in RELATIVE:
        if basic_rate is None:
            return f">= {RELATIVE[shape]:.0%} of basic: basic not run"
        share = rate / basic_rate
        return f">= {RELATIVE[shape]:.0%} of basic: {share:.2f}, {'yes' if share >= RELATIVE[shape] else 'no'}"
    target = TARGETS[shape]
    assert target is not None
    return f">= {target:,.0f}/s: {'yes' if rate >= target else 'no'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", choices=list(SHAPES), help="only these shapes (default: all)")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    basic: dict[str, float] = {}
    for shape in args.shape or SHAPES:
        plain = two_models(make_shape(shape, args.scale))
        got = timed({"plain": plain, "flavors": flavored(plain)}, args.repeat)
        (p_s, p_c, p_n, _), (f_s, f_c, f_n, _) = got["plain"], got["flavors"]
        p_rate, f_rate = p_n / p_c, f_n / f_c  # pods per CPU second
        if shape == "basic":
            basic = {"plain": p_rate, "flavors": f_rate}
        row = (shape, p_s, f_s, f_s / p_s, p_c, f_c, f_c / p_c, p_rate, f_rate,
               verdict(shape, p_c, p_rate, basic.get("plain")), verdict(shape, f_c, f_rate, basic.get("flavors")))
        rows.append(row)
        print(f"{shape:15s} wall {p_s:.3f} / {f_s:.3f} s ({f_s / p_s:.2f})  CPU {p_c:.3f} / {f_c:.3f} s "
              f"({f_c / p_c:.2f})  {p_rate:,.0f} / {f_rate:,.0f} pods per CPU s  target: plain {row[9]}; "
              f"flavors {row[10]}", flush=True)
    print("\n| shape | wall s plain | wall s flavors | ratio | CPU s plain | CPU s flavors | ratio "
          "| pods/CPU s plain | pods/CPU s flavors | target: plain | target: flavors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for shape, p_s, f_s, ratio, p_c, f_c, c_ratio, p_rate, f_rate, p_ok, f_ok in rows:
        print(f"| {shape} | {p_s:.3f} | {f_s:.3f} | {ratio:.2f} | {p_c:.3f} | {f_c:.3f} | {c_ratio:.2f} "
              f"| {p_rate:,.0f} | {f_rate:,.0f} | {p_ok} | {f_ok} |")


if __name__ == "__main__":
    main()
