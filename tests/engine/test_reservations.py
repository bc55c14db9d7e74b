"""Reservation and backfill (docs/semantics.md, "Reservation and backfill"): bad input, the option off,
the tenant-written runtime annotation, and ``earliest_fit`` on small arrays."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from gpufleet.adapters.k8s_yaml import load_snapshot_file
from gpufleet.domain import ANNOTATION_EXPECTED_RUNTIME, NodeName, ReservationConfig
from gpufleet.engine import schedule
from gpufleet.engine.reservations import earliest_fit


def _at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


SCENARIO = Path(__file__).parents[1] / "scenarios" / "reservation" / "blocks-small-admits-backfill.yaml"


@pytest.mark.parametrize(("after", "message"), [
    ("10x", 'spec.reservation.after: must be a duration like 90, 30m, 1h30m or 2d, got "10x"'),
    ("-5m", 'spec.reservation.after: must be a duration like 90, 30m, 1h30m or 2d, got "-5m"'),
    ("true", "spec.reservation.after: must be a duration like 90, 30m, 1h30m or 2d, got true"),
])
def test_a_bad_reservation_duration_exits_2_with_one_line(tmp_path: Path, after: str, message: str) -> None:
    snapshot = tmp_path / "snap.yaml"
    snapshot.write_text("apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\n"
                        f"spec: {{reservation: {{after: {after}}}}}\n")
    proc = subprocess.run([sys.executable, "-m", "gpufleet", "replay", str(snapshot)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_off_without_the_option_or_without_a_time() -> None:
    snapshot = load_snapshot_file(SCENARIO)
    assert schedule(snapshot).reservations
    off = replace(snapshot, config=replace(snapshot.config, reservation=None))
    no_time = replace(snapshot, config=replace(snapshot.config, now=None))
    assert not schedule(off).reservations
    assert schedule(no_time) == schedule(off)
    # and the small pod binds, as the shared spec says
    assert "ml/small" in {b.pod for b in schedule(off).bindings}


@pytest.mark.parametrize("text", ["a while", "-5m", "1h-30m", "5w", "1e999h", ""])
def test_a_malformed_runtime_annotation_is_ignored_with_a_warning(text: str) -> None:
    snapshot = load_snapshot_file(SCENARIO)
    pods = tuple(replace(p, annotations={**p.annotations, ANNOTATION_EXPECTED_RUNTIME: text})
                 if p.name == "backfill" else p for p in snapshot.pods)
    decisions = schedule(replace(snapshot, pods=pods))
    assert any("ml/backfill" in w and ANNOTATION_EXPECTED_RUNTIME in w and "ignored" in w
               for w in decisions.warnings), decisions.warnings
    # without a declared runtime it is no backfill: it waits like the small pod
    assert "ml/backfill" in {p.pod for p in decisions.pending}


def test_a_runtime_that_ends_after_the_start_is_no_backfill() -> None:
    """The annotation is the tenant's: declaring a runtime longer than the time left before the
    reservation starts (01:20, now 01:00) gains nothing."""
    snapshot = load_snapshot_file(SCENARIO)
    pods = tuple(replace(p, annotations={**p.annotations, ANNOTATION_EXPECTED_RUNTIME: "21m"})
                 if p.name == "backfill" else p for p in snapshot.pods)
    decisions = schedule(replace(snapshot, pods=pods))
    assert "ml/backfill" in {p.pod for p in decisions.pending}


def test_observed_runtime_counts_for_pods_without_a_declared_one() -> None:
    """r2 declares 50m; without it, its queue's observed runtime (20m from its start 00:30: 00:50, already
    past at 01:00) counts: past its expected end a pod is expected to run as long again as it has run
    (30m), so the reservation starts at 01:30 (docs/semantics.md)."""
    snapshot = load_snapshot_file(SCENARIO)
    pods = tuple(replace(p, annotations={}) if p.name in ("r1", "r2") else p for p in snapshot.pods)
    assert snapshot.config.reservation is not None
    config = replace(snapshot.config, reservation=replace(snapshot.config.reservation,
                                                          observed_runtime={"q": 1200.0}))
    decisions = schedule(replace(snapshot, pods=pods, config=config))
    (r,) = decisions.reservations
    assert snapshot.config.now is not None
    assert r.start == snapshot.config.now + 1800


def test_reservation_config_defaults() -> None:
    c = ReservationConfig(after=60.0)
    assert (c.max, c.percentile, dict(c.observed_runtime)) == (4, 90, {})


def test_earliest_fit_takes_the_soonest_domain_and_fewest_nodes() -> None:
    inf = np.inf
    # 4 nodes x 2 GPUs; domains: nodes 0,1 -> 0; nodes 2,3 -> 1
    cell_end = np.array([[0, 50], [50, 50], [10, 10], [inf, 20]], dtype=np.float64)
    candidates = np.ones(4, dtype=np.bool_)
    domain = np.array([0, 0, 1, 1], dtype=np.int64)
    # 2 pods of 2 GPUs: domain 0 at 50 (nodes 0 and 1), domain 1 never (node 3 has a GPU that never frees)
    start, code, nodes = earliest_fit(cell_end, candidates, domain, 2, 2)  # type: ignore[misc]
    assert (start, code, nodes.tolist()) == (50.0, 0, [0, 1])
    # 1 pod of 2 GPUs: node 2 at 10
    start, code, nodes = earliest_fit(cell_end, candidates, domain, 2, 1)  # type: ignore[misc]
    assert (start, code, nodes.tolist()) == (10.0, 1, [2])
    # 3 pods of 2 GPUs: never
    assert earliest_fit(cell_end, candidates, domain, 2, 3) is None


def test_a_preemptible_pod_running_before_the_reservation_time_does_not_make_it_due() -> None:
    """r2 (n2, declared 50m) made preemptible and started 00:05, before big's reservation time
    (00:10), declaring 75m: it is no backfill and counts by its expected end (01:20), preemptible or
    not. The reservation starts at 01:20, not now, and nothing is evicted."""
    snapshot = load_snapshot_file(SCENARIO)
    pods = tuple(replace(p, preemptible_label=True,
                         annotations={**p.annotations, ANNOTATION_EXPECTED_RUNTIME: "75m"},
                         start_time=_at("2026-01-01T00:05:00Z"),
                         creation_time=_at("2026-01-01T00:05:00Z"))
                 if p.name == "r2" else p for p in snapshot.pods)
    decisions = schedule(replace(snapshot, pods=pods))
    assert not decisions.evictions
    (r,) = decisions.reservations
    assert r.start == _at("2026-01-01T01:20:00Z")


def test_backfill_never_delays_the_start() -> None:
    """pre, admitted onto n2 at 00:56 (after big's reservation time) as preemptible backfill with a
    declared 3h, counts as ending by the start: the reservation still starts at 01:20 and nothing is
    evicted before then."""
    snapshot = load_snapshot_file(SCENARIO)
    pods = tuple(replace(p, node_name=NodeName("n2"), phase="Running", start_time=_at("2026-01-01T00:56:00Z"),
                         annotations={**p.annotations, "gpufleet.dev/gpu-index": "2",
                                      ANNOTATION_EXPECTED_RUNTIME: "3h"})
                 if p.name == "pre" else p for p in snapshot.pods)
    decisions = schedule(replace(snapshot, pods=pods))
    assert not decisions.evictions
    (r,) = decisions.reservations
    assert r.start == _at("2026-01-01T01:20:00Z") and r.nodes == ("n2",)
