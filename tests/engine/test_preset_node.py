"""A pod of ours whose author set spec.nodeName: counted on that node, never moved, and a warning
when the node cannot hold it."""

from __future__ import annotations

from gpufleet.adapters.k8s_yaml import load_snapshot_text
from gpufleet.engine import schedule

NODES = "".join(
    f"apiVersion: v1\nkind: Node\nmetadata: {{name: {n}}}\nstatus: {{allocatable: {{cpu: '8', memory: 64Gi, pods: '110'}}}}\n---\n"
    for n in ("n1", "n2")
)


def pod(name: str, cpu: str, node: str | None, phase: str = "Pending", ours: bool = True) -> str:
    spec = ("  schedulerName: gpufleet\n" if ours else "") + (f"  nodeName: {node}\n" if node else "")
    return (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: ml}}\nspec:\n{spec}"
            f"  containers: [{{name: c, resources: {{requests: {{cpu: '{cpu}'}}}}}}]\nstatus: {{phase: {phase}}}\n")


def snapshot(preset_cpu: str) -> str:
    return NODES + "---\n".join([pod("running", "6", "n1", "Running", ours=False), pod("preset", preset_cpu, "n1"),
                                  pod("p", "1", None)])


def test_preset_node_that_does_not_fit_is_counted_and_warned() -> None:
    decisions = schedule(load_snapshot_text(snapshot("4"), "snap.yaml"))
    assert [(b.pod, b.node) for b in decisions.bindings] == [("ml/p", "n2")]  # n1 is full: 6 + 4 > 8
    assert not decisions.pending
    (warning,) = [w for w in decisions.warnings if "spec.nodeName" in w]
    assert "ml/preset" in warning and "n1" in warning and "cpu" in warning


def test_preset_node_that_fits_gives_no_warning() -> None:
    decisions = schedule(load_snapshot_text(snapshot("1"), "snap.yaml"))
    assert [(b.pod, b.node) for b in decisions.bindings] == [("ml/p", "n1")]  # 6 + 1 held: 1 cpu left, binpack
    assert not [w for w in decisions.warnings if "spec.nodeName" in w]
