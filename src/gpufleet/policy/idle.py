"""A Project's idle policy, pure (docs/semantics-notes.md, "Idle policy"): which bound pods are due a
warning and which are due to be stopped because their GPUs stayed idle.

The controller keeps the facts (when each pod's current run of low GPU samples began, from the
telemetry's idle tracker; when it warned the pod for that run) and carries out the actions (a
Warning Event; an eviction whose ledger interval ends with reason ``idle``). This module only
decides, from those facts and the time it is given, so the rule is tested without a cluster or a
clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.domain import IdlePolicy, PodKey, Project
from gpufleet.domain.selectors import selector_matches
from gpufleet.policy.projects import ProjectIndex

__all__ = ["IdleAction", "IdleStep", "IdleWatch", "idle_actions", "idle_policy_for"]


class IdleStep(StrEnum):
    WARN = "warn"  # post the Warning Event IdleWarning on the pod
    STOP = "stop"  # evict the pod (ledger end reason idle) and post IdleStopped


@dataclass(frozen=True, slots=True)
class IdleWatch:
    """What the controller knows of one bound pod of ours. ``low_since``: the start of its current run
    of GPU samples under the idle threshold (None: it is using its GPUs, or nothing is known of them);
    ``warned_at``: when the controller warned it for that same run (None: not yet)."""

    pod: PodKey  # "namespace/name"
    labels: Mapping[str, str] = field(default_factory=dict)
    low_since: float | None = None
    warned_at: float | None = None


@dataclass(frozen=True, slots=True)
class IdleAction:
    pod: PodKey
    project: str
    step: IdleStep
    stop_at: float  # the earliest time the pod may be stopped
    message: str


def idle_policy_for(index: ProjectIndex, pod: PodKey, labels: Mapping[str, str]) -> tuple[Project, IdlePolicy] | None:
    """The Project and idle policy governing ``pod`` (None: its namespace is in no Project, the Project
    has no idle policy, or the policy's pod selector does not select it)."""
    project = index.project_of(pod.split("/", 1)[0])
    if project is None or project.idle_policy is None:
        return None
    policy = project.idle_policy
    if policy.pod_selector is not None and not selector_matches(policy.pod_selector, labels):
        return None
    return project, policy


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f}m"


def idle_actions(index: ProjectIndex, watches: Iterable[IdleWatch], now: float) -> list[IdleAction]:
    """The warnings and stops due at ``now``, in pod order.

    A pod idle since ``low_since`` is due to stop at ``low_since + idle_seconds``, but never less than
    ``warn_seconds`` after its warning: a pod not yet warned is warned first (at ``stop - warn`` or
    later), and stopped once both times have passed. A restart of the controller that forgot a warning
    warns again and so delays the stop, never shortens the notice.
    """
    actions: list[IdleAction] = []
    for watch in sorted(watches, key=lambda w: w.pod):
        if watch.low_since is None:
            continue
        governed = idle_policy_for(index, watch.pod, watch.labels)
        if governed is None:
            continue
        project, policy = governed
        stop_at = watch.low_since + policy.idle_seconds
        if watch.warned_at is None:
            if now >= stop_at - policy.warn_seconds:
                due = max(stop_at, now + policy.warn_seconds)
                step = IdleStep.STOP if policy.warn_seconds == 0 and now >= stop_at else IdleStep.WARN
                message = (f"GPUs idle for {_minutes(now - watch.low_since)}: project {project.name} stops "
                           f"pods idle for {_minutes(policy.idle_seconds)}" +
                           ("" if step is IdleStep.STOP else f"; this pod is stopped in {_minutes(due - now)} "
                            "unless it uses its GPUs"))
                actions.append(IdleAction(watch.pod, project.name, step, due, message))
            continue
        due = max(stop_at, watch.warned_at + policy.warn_seconds)
        if now >= due:
            message = (f"GPUs idle for {_minutes(now - watch.low_since)}: stopped by project {project.name}'s "
                       f"idle policy ({_minutes(policy.idle_seconds)})")
            actions.append(IdleAction(watch.pod, project.name, IdleStep.STOP, due, message))
    return actions
