"""The status patch of a pending pod (pure): what changes, what is kept, what is left alone."""

from __future__ import annotations

from typing import Any

from gpufleet.kube.controller.pod_status import MAX_MESSAGE, pending_status_patch

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def pod(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"containers": [{"name": "c"}], **spec},
            "status": status or {"phase": "Pending"}}


def test_first_mark_keeps_the_other_conditions() -> None:
    other = {"type": "example.com/Ready", "status": "True"}
    patch = pending_status_patch(pod({"conditions": [other]}), "no room", None, NOW)
    assert patch == {"conditions": [other, {
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no room",
        "lastProbeTime": None, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}


def test_same_mark_writes_nothing_and_a_new_message_keeps_the_transition_time() -> None:
    first = pending_status_patch(pod(), "no room", None, NOW)
    assert first is not None
    marked = pod({"conditions": first["conditions"]})
    assert pending_status_patch(marked, "no room", None, NOW + 60) is None
    second = pending_status_patch(marked, "still no room", None, NOW + 60)
    assert second is not None
    assert second["conditions"][-1]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert second["conditions"][-1]["message"] == "still no room"


def test_nominated_node_is_set_and_removed() -> None:
    first = pending_status_patch(pod(), "waiting", "n1", NOW)
    assert first is not None and first["nominatedNodeName"] == "n1"
    nominated = pod({"conditions": first["conditions"], "nominatedNodeName": "n1"})
    assert pending_status_patch(nominated, "waiting", "n1", NOW) is None
    assert pending_status_patch(nominated, "waiting", None, NOW) == {"nominatedNodeName": None}


def test_bound_gated_and_deleted_pods_are_left_alone() -> None:
    assert pending_status_patch(pod(nodeName="n1"), "x", None, NOW) is None
    assert pending_status_patch(pod(schedulingGates=[{"name": "g"}]), "x", None, NOW) is None
    deleting = pod()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert pending_status_patch(deleting, "x", None, NOW) is None


def test_long_messages_are_cut() -> None:
    patch = pending_status_patch(pod(), "x" * (MAX_MESSAGE + 10), None, NOW)
    assert patch is not None and len(patch["conditions"][-1]["message"]) == MAX_MESSAGE
