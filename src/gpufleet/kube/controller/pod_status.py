"""What a pending pod of ours says in its own status: ``PodScheduled=False`` and ``nominatedNodeName``.

kube-scheduler marks a pod it cannot place with the condition ``PodScheduled=False``, reason
``Unschedulable`` and its message; Cluster Autoscaler and Karpenter act on exactly that condition
(docs/controller.md). gpufleet does the same with the engine's pending reason. A pod whose binding
waits for its victims to terminate also gets ``status.nominatedNodeName``, as a preemptor of
kube-scheduler does. ``PodScheduled=True`` is the API server's: it sets it when it accepts the
Binding. A pod that still has ``spec.schedulingGates`` keeps the API server's ``SchedulingGated``.

The status is written with a JSON merge patch of the ``pods/status`` subresource: ``conditions``
is a list, which a merge patch replaces whole, so the patch carries the pod's other conditions
unchanged (a pod that no node runs yet has no writer of conditions but the scheduler).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

__all__ = ["MAX_MESSAGE", "POD_SCHEDULED", "UNSCHEDULABLE", "marked_unschedulable", "pending_status_patch"]

POD_SCHEDULED = "PodScheduled"
UNSCHEDULABLE = "Unschedulable"
MAX_MESSAGE = 4096  # a reason listing many nodes is cut here: the Event carries the same text

JsonDict = dict[str, Any]


def _time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _scheduled_condition(pod: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], Mapping[str, Any] | None]:
    """The pod's conditions, and its PodScheduled condition among them (None: none)."""
    conditions = [c for c in (pod.get("status") or {}).get("conditions") or [] if isinstance(c, Mapping)]
    return conditions, next((c for c in conditions if c.get("type") == POD_SCHEDULED), None)


def marked_unschedulable(pod: Mapping[str, Any]) -> bool:
    """Whether the pod already says PodScheduled=False, Unschedulable (whatever the message)."""
    current = _scheduled_condition(pod)[1]
    return current is not None and current.get("status") == "False" and current.get("reason") == UNSCHEDULABLE


def pending_status_patch(pod: Mapping[str, Any], message: str, nominated: str | None, now: float) -> JsonDict | None:
    """The status patch that makes ``pod`` say it is unschedulable with ``message`` (and nominated
    to ``nominated``, None: to no node), or None when it says so already or is not ours to mark
    (bound, being deleted, or still gated)."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    if spec.get("nodeName") or spec.get("schedulingGates") or meta.get("deletionTimestamp"):
        return None
    status = pod.get("status") or {}
    conditions, current = _scheduled_condition(pod)
    message = message[:MAX_MESSAGE]
    same_condition = marked_unschedulable(pod) and current is not None and current.get("message") == message
    same_nominated = (status.get("nominatedNodeName") or None) == nominated
    if same_condition and same_nominated:
        return None
    patch: JsonDict = {}
    if not same_condition:
        kept = current is not None and current.get("status") == "False" and current.get("lastTransitionTime")
        condition: JsonDict = {
            "type": POD_SCHEDULED,
            "status": "False",
            "reason": UNSCHEDULABLE,
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": current.get("lastTransitionTime") if kept and current else _time(now),
        }
        patch["conditions"] = [dict(c) for c in conditions if c.get("type") != POD_SCHEDULED] + [condition]
    if not same_nominated:
        patch["nominatedNodeName"] = nominated  # None removes it
    return patch
