"""explain with GPU-model quotas (docs/semantics.md, "GPU-model quotas"): the flavor a pod would take,
and for a pod left pending each flavor tried."""

from __future__ import annotations

from pathlib import Path

from gpufleet.adapters.k8s_yaml import load_snapshot_file
from gpufleet.engine import admission_order, schedule
from gpufleet.kube.inspect.explain import PodFacts, explain_pod, explain_report

SCENARIO = Path(__file__).parents[2] / "scenarios" / "flavors" / "fallback-in-quota-first.yaml"


def test_explain_names_the_flavor_and_the_flavors_tried() -> None:
    snapshot = load_snapshot_file(SCENARIO)
    decisions = schedule(snapshot)
    bound = explain_pod(PodFacts("ml", "p1", scheduler_name="gpufleet"), snapshot, decisions)
    assert any(line.startswith("gpufleet would bind it to node a1 (") and line.endswith("), on flavor a100.")
               for line in bound)
    waiting = explain_pod(PodFacts("ml", "p3", scheduler_name="gpufleet"), snapshot, decisions)
    assert any(line.startswith("It would stay pending: tried h100: ") and "; a100: " in line for line in waiting)
    report = explain_report(PodFacts("ml", "p1", scheduler_name="gpufleet"), snapshot, decisions,
                            admission_order(snapshot))
    assert report["binding"]["flavor"] == "a100"
