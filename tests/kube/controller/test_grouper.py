"""The pod-grouper's PodGroup bodies (its behaviour with the controller: test_grouper_http.py)."""

from __future__ import annotations

from gpufleet.domain import QueueName
from gpufleet.kube.controller.grouper import MANAGED_BY, group_body
from gpufleet.policy.grouping import GroupPlan, OwnerRef


def test_group_body_carries_the_plan() -> None:
    plan = GroupPlan(OwnerRef("kubeflow.org/v1", "PyTorchJob", "ml", "llama", "u1"), "pytorchjob-llama-x", 3, 7,
                     QueueName("team-a"), priority_class="train", topology_required="rack")
    body = group_body(plan)
    assert body["spec"] == {"minMember": 3, "queue": "team-a", "priorityClassName": "train",
                            "topology": {"required": "rack"}}
    assert body["metadata"]["labels"] == {MANAGED_BY[0]: MANAGED_BY[1]}
