"""scripts/bench_options.py: the snapshot with every issue-17 option on engages each rule (not a
benchmark of options that never act), and ``--digest`` prints a line per shape and mode."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from tests.scripts.load import SCRIPTS, load_script

from gpufleet.bench.shapes import make_shape
from gpufleet.domain import ANNOTATION_CHECKPOINTED, GPU
from gpufleet.engine import schedule

bench = load_script("bench_options")


def _all_on(shape: str, scale: float):  # type: ignore[no-untyped-def]
    plain = bench.two_models(make_shape(shape, scale))
    return plain, bench.every_option(bench.flavored(plain))


def test_every_option_is_set_and_the_time_is_after_every_pod() -> None:
    plain, snapshot = _all_on("preemption", 0.1)
    config = snapshot.config
    assert config.now is not None and config.usage_half_life == 24 * 3600.0
    assert config.reservation is not None and config.reservation.after == 900.0 and config.reservation.max == 4
    assert config.consolidation is not None and config.consolidation.enabled
    assert all(p.creation_time + 1800.0 <= config.now for p in snapshot.pods)
    assert all(q.min_runtime == 3600.0 and q.preemption_delay == 600.0 and q.flavors for q in snapshot.queues)
    running = [p for p in snapshot.pods if p.node_name is not None]
    assert sum(p.annotations.get(ANNOTATION_CHECKPOINTED) == "true" for p in running) == (len(running) + 1) // 2
    # Some running pods are younger than minRuntime, so fewer gangs are victims; the preemptors
    # have waited past the delay and still evict one pod each.
    assert any(config.now - (p.start_time or 0.0) < 3600.0 for p in running)
    assert len(schedule(snapshot).evictions) == len(schedule(plain).evictions) > 0


def test_stuck_gangs_move_or_reserve_with_every_option_on() -> None:
    _, snapshot = _all_on("stuck-gangs", 0.05)
    decisions = schedule(snapshot)
    # Consolidation acts for queues with flavors too: stuck gangs are admitted by moves first.
    assert decisions.moves
    assert any(q.decayed_usage.get(GPU) for q in snapshot.queues)
    # Without it, overdue gangs reserve racks; the reserved ones evict the backfill there and start.
    off = schedule(replace(snapshot, config=replace(snapshot.config, consolidation=None)))
    assert off.reservations or any(e.reason.value == "reservation" for e in off.evictions)


def test_digest_prints_each_shape_and_mode() -> None:
    out = subprocess.run([sys.executable, str(SCRIPTS / "bench_options.py"), "--digest", "--scale", "0.01",
                          "--shape", "basic", "--shape", "gang-small"], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [[s, m] for s in ("basic", "gang-small")
                                                    for m in ("plain", "flavors", "all")]


def test_reference_times_the_given_tree_in_a_child_process() -> None:
    src = str(Path(__file__).resolve().parents[2] / "src")
    cpu, pods = bench.reference_cpu(src, "basic", 0.01, 1)
    assert cpu > 0 and pods == len(make_shape("basic", 0.01).pods) - sum(
        p.node_name is not None for p in make_shape("basic", 0.01).pods)
    assert set(bench.RECORDED_85312C8) == set(bench.SHAPES)


def test_reference_refuses_a_scale_its_figures_were_not_taken_at() -> None:
    out = subprocess.run([sys.executable, str(SCRIPTS / "bench_options.py"), "--scale", "0.5", "--reference", "src"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "--reference: the recorded figures are at --scale 1" in out.stderr


def test_schedule_with_every_option_on_leaves_no_cyclic_garbage() -> None:
    """With flavors and consolidation on, nothing of a call's state may hold the engine in a cycle
    (the consolidator's flavor callback once did): ``schedule()`` pauses the collector, so such a
    cycle kept the call's whole state alive for the collector to walk inside the next call."""
    import gc

    for shape, scale in (("preemption", 0.05), ("stuck-gangs", 0.05)):
        _, snapshot = _all_on(shape, scale)
        schedule(snapshot)  # first use: modules imported lazily leave their own import-time cycles
        gc.collect()
        enabled = gc.isenabled()
        gc.disable()
        try:
            decisions = schedule(snapshot)
            assert gc.collect() == 0, shape
        finally:
            if enabled:
                gc.enable()
        assert decisions.bindings
