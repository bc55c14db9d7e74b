"""A hostile inter-pod rule set cannot make the engine's memory grow with sets x nodes
(docs/semantics-notes.md, "Cluster state the engine does not trust")."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from gpufleet.adapters.k8s_yaml import load_snapshot_file
from gpufleet.domain import (
    GPU,
    MILLI,
    LabelSelector,
    Node,
    NodeName,
    Pod,
    PodAffinityTerm,
    Snapshot,
)
from gpufleet.engine import interpod, schedule
from gpufleet.engine.interpod import MAX_COUNT_CELLS

HOST = "kubernetes.io/hostname"
N_NODES = 5_000
N_SELECTORS = 2_000
# Beside the bounded counts (8 bytes each), the call's own arrays for 5,000 nodes and 4,000 pods.
BOUND_BYTES = MAX_COUNT_CELLS * 8 + 24 * 2**20


def hostile_snapshot() -> Snapshot:
    """2,000 running pods, each with a label of its own, and 2,000 pending pods each keeping off
    one of them by a required anti-affinity: 2,000 distinct selectors on 5,000 nodes."""
    nodes = tuple(Node(NodeName(f"n{i:05d}"), labels={HOST: f"n{i:05d}"}, allocatable={"cpu": 64 * MILLI, "pods": 110 * MILLI, GPU: 8 * MILLI})
                  for i in range(N_NODES))
    running = tuple(Pod("t", f"r{i:05d}", labels={"app": f"a{i}"}, scheduler_name="default-scheduler",
                        node_name=NodeName(f"n{i:05d}"), phase="Running", requests={"cpu": MILLI})
                    for i in range(N_SELECTORS))
    pending = tuple(Pod("t", f"p{i:05d}", requests={"cpu": MILLI}, anti_affinity_terms=(
        PodAffinityTerm(HOST, LabelSelector((("app", f"a{i}"),))),)) for i in range(N_SELECTORS))
    return Snapshot(nodes=nodes, pods=running + pending)


def test_memory_stays_bounded_with_thousands_of_distinct_selectors() -> None:
    snapshot = hostile_snapshot()
    tracemalloc.start()
    try:
        decisions = schedule(snapshot)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(decisions.bindings) == N_SELECTORS
    placed = {b.pod: b.node for b in decisions.bindings}
    assert all(placed[f"t/p{i:05d}"] != f"n{i:05d}" for i in range(N_SELECTORS))  # every rule held
    assert peak < BOUND_BYTES, f"peak {peak / 2**20:.0f} MiB"


SCENARIOS = Path(__file__).parents[1] / "scenarios"
RULE_SCENARIOS = sorted(p for folder in ("interpod", "scoring") for p in (SCENARIOS / folder).glob("*.yaml")
                        if not p.name.endswith(".config.yaml"))


@pytest.mark.parametrize("path", RULE_SCENARIOS, ids=lambda p: p.stem)
def test_counts_dropped_and_built_again_decide_the_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snapshot = load_snapshot_file(path)
    want = schedule(snapshot)
    monkeypatch.setattr(interpod, "MAX_COUNT_CELLS", 1)  # every count array is dropped when the next is built
    assert schedule(snapshot) == want
