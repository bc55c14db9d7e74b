"""Pods naming a PodGroup that does not exist wait for it (api.md); running ones keep their place."""

from __future__ import annotations

from gpufleet.domain import CPU, GPU, MEMORY, MILLI, Node, NodeName, Pod, PodGroup, QueueName, Snapshot
from gpufleet.engine import schedule

NODE = Node(NodeName("n1"), allocatable={CPU: 64 * MILLI, MEMORY: 64 * MILLI, "pods": 110 * MILLI, GPU: 2 * MILLI})


def _pod(name: str, group: str | None, node: str | None = None) -> Pod:
    return Pod(namespace="ml", name=name, requests={GPU: MILLI}, queue_label=QueueName("default"),
               group_label=group, node_name=NodeName(node) if node else None,
               phase="Running" if node else "Pending", gpu_index=(0,) if node else ())


def test_a_running_member_keeps_its_gpu_and_the_pending_ones_wait_for_the_group() -> None:
    pods = (_pod("train-0", "train", node="n1"), _pod("train-1", "train"), _pod("solo", None))
    decisions = schedule(Snapshot(nodes=(NODE,), pods=pods))
    assert [(b.pod, b.gpus) for b in decisions.bindings] == [("ml/solo", (1,))]  # GPU 0 stays train-0's
    assert [(p.pod, p.reason) for p in decisions.pending] == [("ml/train-1", "pod group ml/train does not exist")]


def test_once_the_group_exists_its_rules_apply() -> None:
    pods = (_pod("train-0", "train"), _pod("train-1", "train"))
    group = PodGroup("ml", "train", min_member=2)
    decisions = schedule(Snapshot(nodes=(NODE,), pods=pods, pod_groups=(group,)))
    assert [b.pod for b in decisions.bindings] == ["ml/train-0", "ml/train-1"]


def test_a_label_equal_to_the_pod_name_still_names_a_missing_group() -> None:
    decisions = schedule(Snapshot(nodes=(NODE,), pods=(_pod("train", "train"),)))
    assert [p.reason for p in decisions.pending] == ["pod group ml/train does not exist"]
