"""Time the engine on the benchmark shapes, and the replay path against bare YAML parsing."""

from __future__ import annotations

import resource
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from gpufleet.bench.shapes import SHAPES, make_shape
from gpufleet.engine import schedule

__all__ = ["peak_rss_mib", "replay_vs_parse", "run_bench"]


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far, in MiB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_bench(shape: str, scale: float = 1.0, repeat: int = 1) -> dict[str, object]:
    """Build ``shape`` (not timed), then time ``schedule`` on it ``repeat`` times.

    Returns ``shape``, ``nodes``, ``pods`` (pending pods of ours decided: bound or left pending),
    ``seconds`` (median wall time of one call: reading DRA objects, ``schedule``, handing devices
    back), ``pods_per_second``, ``engine_seconds`` (median of ``schedule`` alone) and ``peak_rss_mib``.
    """
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; known shapes: {', '.join(SHAPES)}")
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    # Imported here: the adapters are only needed to read DRA objects.
    from gpufleet.adapters import resolve_devices

    snapshot = make_shape(shape, scale)
    times: list[float] = []
    engine_times: list[float] = []
    decided = 0
    for _ in range(repeat):
        # Timed as the controller and replay run it: DRA objects read, scheduled, devices handed back.
        start = time.perf_counter()
        view = resolve_devices(snapshot)
        engine_start = time.perf_counter()
        decisions = schedule(view.snapshot)
        engine_times.append(time.perf_counter() - engine_start)
        decisions = view.attach(decisions)
        times.append(time.perf_counter() - start)
        decided = len(decisions.bindings) + len(decisions.pending)
    seconds = statistics.median(times)
    return {
        "shape": shape,
        "nodes": len(snapshot.nodes),
        "pods": decided,
        "seconds": seconds,
        "pods_per_second": decided / seconds if seconds > 0 else float("inf"),
        "engine_seconds": statistics.median(engine_times),
        "peak_rss_mib": peak_rss_mib(),
    }


def replay_vs_parse(scale: float = 1.0, repeat: int = 3) -> dict[str, object]:
    """Compare the whole replay path with merely parsing the same YAML.

    Writes the ``basic`` shape as YAML to a temporary file, then takes the median over ``repeat``
    runs of (a) ``yaml.load_all`` with the C loader, fully materialised, and (b) loading the
    snapshot file, scheduling it and rendering the decisions as JSON.
    """
    # Imported here: the adapters are only needed for this comparison.
    from gpufleet.adapters.k8s_yaml import load_snapshot_file
    from gpufleet.adapters.k8s_yaml_writer import dump_snapshot
    from gpufleet.adapters.output import render_json

    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    text = dump_snapshot(make_shape("basic", scale))
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as tmp:
        path = Path(tmp) / "basic.yaml"
        path.write_text(text, encoding="utf-8")

        parse_times: list[float] = []
        objects = 0
        for _ in range(repeat):
            start = time.perf_counter()
            documents = list(yaml.load_all(text, Loader=loader))
            parse_times.append(time.perf_counter() - start)
            objects = sum(1 for d in documents if d is not None)
            del documents

        replay_times: list[float] = []
        for _ in range(repeat):
            start = time.perf_counter()
            rendered = render_json(schedule(load_snapshot_file(path)))
            replay_times.append(time.perf_counter() - start)
            del rendered

    parse_seconds = statistics.median(parse_times)
    replay_seconds = statistics.median(replay_times)
    return {
        "objects": objects,
        "yaml_bytes": len(text.encode("utf-8")),
        "parse_seconds": parse_seconds,
        "replay_seconds": replay_seconds,
        "ratio": replay_seconds / parse_seconds if parse_seconds > 0 else float("inf"),
    }
