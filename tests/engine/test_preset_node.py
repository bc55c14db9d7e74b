"""A pod of ours whose author set spec.nodeName: counted on that node, never moved, and a warning
when the node cannot hold it."""

from __future__ import annotations

from gpufleet.adapters.k8s_yaml import load_snapshot_text
from gpufleet.engine import schedule

SNAPSHOT = """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: '8', memory: 64Gi, pods: '110'}}
---
apiVersion: v1
kind: Node
metadata: {name: n2}
status: {allocatable: {cpu: '8', memory: 64Gi, pods: '110'}}
---
apiVersion: v1
kind: Pod
metadata: {name: running, namespace: ml}
spec:
  nodeName: n1
  containers: [{name: c, resources: {requests: {cpu: '6'}}}]
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: preset, namespace: ml}
spec:
  schedulerName: gpufleet
  nodeName: n1
  containers: [{name: c, resources: {requests: {cpu: '%s'}}}]
status: {phase: Pending}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ml}
spec:
  schedulerName: gpufleet
  containers: [{name: c, resources: {requests: {cpu: '1'}}}]
status: {phase: Pending}
"""


def test_preset_node_that_does_not_fit_is_counted_and_warned() -> None:
    decisions = schedule(load_snapshot_text(SNAPSHOT % "4", "snap.yaml"))
    assert [(b.pod, b.node) for b in decisions.bindings] == [("ml/p", "n2")]  # n1 is full: 6 + 4 > 8
    assert not decisions.pending
    (warning,) = [w for w in decisions.warnings if "spec.nodeName" in w]
    assert "ml/preset" in warning and "n1" in warning and "cpu" in warning


def test_preset_node_that_fits_gives_no_warning() -> None:
    decisions = schedule(load_snapshot_text(SNAPSHOT % "1", "snap.yaml"))
    assert [(b.pod, b.node) for b in decisions.bindings] == [("ml/p", "n1")]  # 6 + 1 held: 1 cpu left, binpack
    assert not [w for w in decisions.warnings if "spec.nodeName" in w]
