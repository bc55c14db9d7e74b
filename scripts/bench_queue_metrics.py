#!/usr/bin/env python
"""Cost per cycle of the controller's per-queue metrics (issue 14, docs/metrics.md).

For a bench shape (``gpufleet.bench.shapes``; ``basic``: 5,000 nodes and 11,000 pods, ``queues-2000``:
2,000 leaf queues), one engine cycle decides; then, as the controller does after each cycle, the
figures (:func:`gpufleet.kube.controller.metrics_queues.cycle_figures`, from the same
``queue_reports`` the Queue statuses use), their export into the Prometheus registry
(``QueueMetrics.update``) and one scrape of ``/metrics`` (``generate_latest``) are timed, without and
with telemetry (every bound pod with a utilisation, a tenth idle); ``steady_export``: the export
of a cycle that bound nothing (gauges only). Beside them: the cycle's
``queue_reports`` (which the controller computes anyway) and the engine call, for scale.
CPU seconds (``time.process_time``), best of ``--repeat``.

    .venv/bin/python scripts/bench_queue_metrics.py --shape basic --shape queues-2000 --repeat 5
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any


def _best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def run(shape: str, repeat: int, scale: float) -> dict[str, Any]:
    from prometheus_client import generate_latest

    from gpufleet.bench.shapes import make_shape
    from gpufleet.engine import schedule
    from gpufleet.kube.client.port import Kind
    from gpufleet.kube.controller.convert import build_snapshot
    from gpufleet.kube.controller.metrics import ControllerMetrics
    from gpufleet.kube.controller.metrics_queues import GpuUsageFacts, cycle_figures
    from gpufleet.kube.controller.reporting import end_state, queue_reports

    snap = make_shape(shape, scale=scale)
    objects = {Kind.NODE: snap.nodes, Kind.POD: snap.pods, Kind.QUEUE: snap.queues,
               Kind.POD_GROUP: snap.pod_groups, Kind.PRIORITY_CLASS: snap.priority_classes,
               Kind.PROJECT: snap.projects, Kind.NAMESPACE: snap.namespaces}
    view = build_snapshot(objects)
    t0 = time.process_time()
    decisions = schedule(view.snapshot)
    engine_s = time.process_time() - t0
    state = end_state(view, decisions)
    queues = list(view.snapshot.queues)
    reports = queue_reports(queues, view, state)
    bound = [b.pod for b in decisions.bindings]
    keys = sorted(map(str, state.bound))
    usage = GpuUsageFacts({k: float(i % 100) for i, k in enumerate(keys)}, frozenset(keys[::10]))
    now = max(p.creation_time for p in view.snapshot.pods) + 60.0
    out: dict[str, Any] = {"shape": shape, "nodes": len(view.snapshot.nodes), "pods": len(view.pods),
                           "queues": len(queues), "bound_in_cycle": len(bound), "engine_s": round(engine_s, 3)}
    out["queue_reports_s"] = _best(lambda: queue_reports(queues, view, state), repeat)
    # Before: the registry with only the per-queue gauges the controller had (set_queues).
    old = ControllerMetrics()
    old.set_queues(pending={q: r.pending for q, r in reports.items()},
                   admitted={q: r.admitted for q, r in reports.items()},
                   usage={q: {k: v / 1000 for k, v in r.usage.items()} for q, r in reports.items()},
                   quota={q: {k: v / 1000 for k, v in r.quota.items()} for q, r in reports.items()})
    out["before_scrape_s"] = _best(lambda: generate_latest(old.registry), repeat)
    out["before_scrape_bytes"] = len(generate_latest(old.registry))
    for label, facts in (("no_telemetry", None), ("telemetry", usage)):
        metrics = ControllerMetrics()
        metrics.set_queues(pending={}, admitted={}, usage={}, quota={})

        def figures(facts: GpuUsageFacts | None = facts) -> Any:
            return cycle_figures(view, state, reports, now=now, bound=bound, evictions=decisions.evictions,
                                 usage=facts)

        fig = figures()
        metrics.queues.update(fig)
        out[f"{label}_figures_s"] = _best(figures, repeat)
        out[f"{label}_export_s"] = _best(lambda m=metrics, f=fig: m.queues.update(f), repeat)
        steady = dataclasses.replace(fig, waits=(), evictions=())  # a cycle that binds nothing
        out[f"{label}_steady_export_s"] = _best(lambda m=metrics, f=steady: m.queues.update(f), repeat)
        out[f"{label}_scrape_s"] = _best(lambda m=metrics: generate_latest(m.registry), repeat)
        out[f"{label}_scrape_bytes"] = len(generate_latest(metrics.registry))
    for key, value in out.items():
        if key.endswith("_s") and isinstance(value, float):
            out[key] = round(value, 5)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", default=None)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    for shape in args.shape or ["basic", "queues-2000"]:
        print(json.dumps(run(shape, args.repeat, args.scale)))


if __name__ == "__main__":
    main()
