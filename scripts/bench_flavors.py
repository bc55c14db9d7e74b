"""The cost of GPU-model quotas on a bench shape (docs/semantics.md, "GPU-model quotas").

    .venv/bin/python scripts/bench_flavors.py [--shape basic] [--scale 1.0] [--repeat 3]

The shape's nodes of every other rack are relabelled A100; ``plain`` is that snapshot as it is,
``flavors`` the same with ResourceFlavors h100 and a100 and every queue's GPU quota split between
them (half each, h100 listed first). Prints the median seconds of one ``schedule()`` call of each,
and the pods decided per second.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

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


def timed(snapshot: Snapshot, repeat: int) -> tuple[float, int]:
    times = []
    decided = 0
    for _ in range(repeat):
        start = time.perf_counter()
        decisions = schedule(snapshot)
        times.append(time.perf_counter() - start)
        decided = len(decisions.bindings) + len(decisions.pending)
    return statistics.median(times), decided


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="basic", choices=list(SHAPES))
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    plain = two_models(make_shape(args.shape, args.scale))
    for name, snap in (("plain", plain), ("flavors", flavored(plain))):
        seconds, decided = timed(snap, args.repeat)
        print(f"{args.shape} {name:8s} {seconds:.3f} s  {decided / seconds:,.0f} pods/s", flush=True)


if __name__ == "__main__":
    main()
