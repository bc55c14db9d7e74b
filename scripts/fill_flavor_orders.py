"""The FGD fill experiment's flavored engine policies under other flavor orders, and where their GPUs go.

    .venv/bin/python scripts/fill_flavor_orders.py [--order most-gpus-first ...] [--seed 42] [--best]

``gpufleet-flavors`` (flavorChoice InOrder) lists one ResourceFlavor per GPU model of the openb
cluster, the model with the most GPUs first (``sim.fill.policies.model_flavors``). This runs it with
the models in other orders (``--order``, default all four), or BestPlacement (``--best``), on the
bundled openb lists, and prints per run the GPU allocation at 95, 100 and 130 % arrived, the failures
by cause up to 100 % arrived, and per GPU model the GPUs placed up to 100 % arrived and the CPUs per
GPU of the tasks placed there (the models' own ratio first).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from gpufleet.adapters.traces import load_nodes, load_trace
from gpufleet.adapters.traces.records import TraceNode
from gpufleet.domain import LABEL_GPU_PRODUCT, Node, ResourceFlavor
from gpufleet.sim.fill import policies
from gpufleet.sim.fill.experiment import bucket_means, run_fill

Model = tuple[str, tuple[int, int]]  # (model, (GPUs, CPUs))
ORDERS: dict[str, Callable[[Model], tuple[float, str]]] = {
    "most-gpus-first": lambda m: (-m[1][0], m[0]),
    "fewest-gpus-first": lambda m: (m[1][0], m[0]),
    "most-cpu-per-gpu-first": lambda m: (-m[1][1] / m[1][0], m[0]),
    "least-cpu-per-gpu-first": lambda m: (m[1][1] / m[1][0], m[0]),
}


def per_model(nodes: Sequence[TraceNode]) -> dict[str, tuple[int, int]]:
    """GPUs and CPUs of each GPU model's nodes."""
    out: dict[str, tuple[int, int]] = {}
    for n in nodes:
        if n.gpus:
            gpus, cpus = out.get(n.gpu_model, (0, 0))
            out[n.gpu_model] = (gpus + n.gpus, cpus + n.cpu_milli // 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--order", action="append", choices=list(ORDERS), help="default: all")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--best", action="store_true", help="BestPlacement (the order does not matter)")
    args = parser.parse_args()
    nodes, _ = load_nodes("openb")
    tasks, _ = load_trace("openb")
    models = per_model(nodes)
    jobs = {t.name: t for t in tasks}
    model_of = {n.name: n.gpu_model for n in nodes}
    for order in ([None] if args.best else args.order or list(ORDERS)):
        key = ORDERS[order or "most-gpus-first"]
        ranked = [m for m, _ in sorted(models.items(), key=key)]

        listed = [ResourceFlavor(m.lower(), ((LABEL_GPU_PRODUCT, m),)) for m in ranked]

        def flavors(nodes: Sequence[Node], listed: list[ResourceFlavor] = listed) -> list[ResourceFlavor]:
            return listed

        policies.model_flavors = flavors  # what make_policy lists for the flavored policies
        name = "gpufleet-flavors-best" if args.best else "gpufleet-flavors"
        run = run_fill(name, nodes, tasks, args.seed)
        alloc = bucket_means(run.arrived_pct(), run.alloc_pct())
        print(f"{name} {order or ''}: order {', '.join(ranked)}; allocation @95 {alloc[95]:.2f} @100 {alloc[100]:.2f} "
              f"@130 {alloc[130]:.2f}; failed up to 100%: {run.failures_until(100)}; failed in all {run.failed}")
        placed: dict[str, list[float]] = {m: [0.0, 0.0] for m in models}
        arrived = run.arrived_pct()
        for i, task in enumerate(run.task_names):
            if not run.placed[i] or round(arrived[i]) > 100:
                continue
            job = jobs[task.split("-tuned-")[0]]
            if job.num_gpu:
                row = placed[model_of[run.node_names[run.node[i]].split("-", 1)[1]]]
                row[0] += job.num_gpu * job.gpu_milli / 1000
                row[1] += job.cpu_milli / 1000
        for m in ranked:
            gpus, cpu = placed[m]
            ratio = f"{cpu / gpus:.1f}" if gpus else "-"
            print(f"  {m:8s} nodes {models[m][1] / models[m][0]:5.1f} CPUs/GPU; placed {gpus:6.0f} GPUs, "
                  f"{ratio} CPUs/GPU")


if __name__ == "__main__":
    main()
