"""Time the engine on the benchmark shapes, and the replay path against bare YAML parsing."""

from __future__ import annotations

import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import yaml

from gpufleet.bench.shapes import SHAPES, make_shape
from gpufleet.domain import Decisions, ReservationConfig, Snapshot
from gpufleet.engine import IncrementalEngine, schedule

__all__ = ["peak_rss_mib", "replay_vs_parse", "run_bench"]


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far, in MiB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def with_reservations(snapshot: Snapshot, after: float) -> Snapshot:
    """``snapshot`` with reservation and backfill on (docs/semantics.md): ``after`` seconds, the
    snapshot's time ``after`` past its last pod's creation (every pending gang may reserve), and an
    observed runtime of an hour for every queue (running pods are expected to end)."""
    latest = max((p.creation_time for p in snapshot.pods), default=0.0)
    observed = {str(q.name): 3600.0 for q in snapshot.queues}
    config = replace(snapshot.config, now=latest + after,
                     reservation=ReservationConfig(after=after, observed_runtime=observed))
    return replace(snapshot, config=config)


def run_bench(shape: str, scale: float = 1.0, repeat: int = 1, kept: bool = False,
              reservation: float | None = None) -> dict[str, object]:
    """Build ``shape`` (not timed), then time ``schedule`` on it ``repeat`` times.

    ``kept``: time instead a warm :class:`~gpufleet.engine.IncrementalEngine` (what the controller
    runs every cycle), after one untimed call of it on the same snapshot: the state it keeps
    between calls is built, each timed call decides the shape again from that state; the result
    then also has ``kept`` (True). ``reservation``: decide with reservations on (:func:`with_reservations`);
    the result then also has ``reservations``, the number the last call held.

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
    if reservation is not None:
        snapshot = with_reservations(snapshot, reservation)
    decide: Callable[[Snapshot], Decisions] = schedule
    if kept:
        decide = IncrementalEngine()
        decide(resolve_devices(snapshot).snapshot)
    times: list[float] = []
    engine_times: list[float] = []
    decided = 0
    for _ in range(repeat):
        # Timed as the controller and replay run it: DRA objects read, scheduled, devices handed back.
        start = time.perf_counter()
        view = resolve_devices(snapshot)
        engine_start = time.perf_counter()
        decisions = decide(view.snapshot)
        engine_times.append(time.perf_counter() - engine_start)
        decisions = view.attach(decisions)
        times.append(time.perf_counter() - start)
        decided = len(decisions.bindings) + len(decisions.pending)
    seconds = statistics.median(times)
    return {
        "shape": shape,
        **({"kept": True} if kept else {}),
        **({"reservations": len(decisions.reservations)} if reservation is not None else {}),
        "nodes": len(snapshot.nodes),
        "pods": decided,
        "seconds": seconds,
        "pods_per_second": decided / seconds if seconds > 0 else float("inf"),
        "engine_seconds": statistics.median(engine_times),
        "peak_rss_mib": peak_rss_mib(),
    }


def replay_vs_parse(scale: float = 1.0, repeat: int = 3) -> dict[str, object]:
    """Compare the whole replay path, from YAML and from JSON, with merely parsing the YAML.

    Writes the ``basic`` shape as YAML and as JSON (``dump_snapshot_json``) to temporary files, then
    takes the median over ``repeat`` rounds, each timing in turn: (a) ``yaml.load_all`` with the C
    loader, fully materialised (``parse_seconds``); loading the snapshot file alone (parse, convert,
    validate) from YAML and from JSON (``yaml_load_seconds``, ``json_load_seconds``); and the replay
    (load, schedule, render the decisions as JSON) from YAML and from JSON (``replay_seconds``,
    ``json_replay_seconds``). ``ratio`` is replay_seconds / parse_seconds (target: at most 1);
    ``json_speedup`` is parse_seconds / json_replay_seconds (target: at least 3).
    """
    # Imported here: the adapters are only needed for this comparison.
    from gpufleet.adapters.k8s_yaml import load_snapshot_file
    from gpufleet.adapters.k8s_yaml_writer import dump_snapshot, dump_snapshot_json
    from gpufleet.adapters.output import render_json

    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    snapshot = make_shape("basic", scale)
    text = dump_snapshot(snapshot)
    json_text = dump_snapshot_json(snapshot)
    del snapshot
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    times: dict[str, list[float]] = {
        "parse": [], "yaml_load": [], "json_load": [], "replay": [], "json_replay": []
    }

    def timed(key: str, work: Callable[[], object]) -> object:
        start = time.perf_counter()
        result = work()
        times[key].append(time.perf_counter() - start)
        return result

    objects = 0
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as tmp:
        path = Path(tmp) / "basic.yaml"
        path.write_text(text, encoding="utf-8")
        json_path = Path(tmp) / "basic.json"
        json_path.write_text(json_text, encoding="utf-8")
        for _ in range(repeat):
            documents = timed("parse", lambda: list(yaml.load_all(text, Loader=loader)))
            assert isinstance(documents, list)
            objects = sum(1 for d in documents if d is not None)
            del documents
            timed("yaml_load", lambda: load_snapshot_file(path))
            timed("json_load", lambda: load_snapshot_file(json_path))
            timed("replay", lambda: render_json(schedule(load_snapshot_file(path))))
            timed("json_replay", lambda: render_json(schedule(load_snapshot_file(json_path))))

    median = {key: statistics.median(values) for key, values in times.items()}
    parse_seconds = median["parse"]
    return {
        "objects": objects,
        "yaml_bytes": len(text.encode("utf-8")),
        "json_bytes": len(json_text.encode("utf-8")),
        "parse_seconds": parse_seconds,
        "yaml_load_seconds": median["yaml_load"],
        "json_load_seconds": median["json_load"],
        "replay_seconds": median["replay"],
        "json_replay_seconds": median["json_replay"],
        "ratio": median["replay"] / parse_seconds if parse_seconds > 0 else float("inf"),
        "json_speedup": parse_seconds / median["json_replay"] if median["json_replay"] > 0 else float("inf"),
    }
