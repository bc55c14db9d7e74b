"""What the controller reports after a cycle: Queue, PodGroup and Project statuses, per-queue metrics.

Figures describe the cluster once the cycle's decisions are carried out (the engine's end state:
bound pods, plus this cycle's bindings, minus its evictions), in the units of ``semantics.md``:
a whole GPU counts 1, a fractional pod blocks/100. The status shapes are K1's
(:mod:`gpufleet.kube.controller.status`), so what is written always validates against the CRDs.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpufleet.domain import GPU, MILLI, MILLI_PER_BLOCK, Decisions, Pod, PodGroup, PodKey, Queue, Reservation
from gpufleet.domain.queues import gang_key
from gpufleet.kube.controller.convert import SnapshotView, gang_id
from gpufleet.kube.controller.decayed_usage import DecayedValue
from gpufleet.kube.controller.status import (
    Condition,
    ConditionStatus,
    PodGroupPhase,
    PodGroupStatus,
    ProjectStatus,
    QueueReservation,
    QueueStatus,
    format_quantity,
)
from gpufleet.policy import ProjectIndex

__all__ = [
    "EndState",
    "GroupFacts",
    "QueueReport",
    "end_state",
    "group_status",
    "project_status",
    "queue_reports",
    "queue_status",
    "reservations_by_queue",
    "same_status",
]


@dataclass(frozen=True)
class EndState:
    bound: Mapping[PodKey, Pod]  # our pods holding a place once the decisions are carried out
    pending: Mapping[PodKey, str]  # our pods left pending, with the reason


def end_state(view: SnapshotView, decisions: Decisions, waiting: Mapping[PodKey, str] | None = None,
              ignored: Collection[PodKey] = ()) -> EndState:
    """``waiting``: pods the engine placed whose binding waits (victims still terminating); they
    hold their place like bound pods. ``ignored``: pods bound to a node the engine does not have
    (``gpufleet.engine.screen``), which hold nothing."""
    bound: dict[PodKey, Pod] = {k: p for k, p in view.pods.items()
                                if p.ours and p.node_name is not None and k not in ignored}
    for binding in decisions.bindings:
        pod = view.pods.get(binding.pod)
        if pod is not None:
            bound[binding.pod] = pod
    for eviction in decisions.evictions:
        bound.pop(eviction.pod, None)
    pending = {p.pod: p.reason for p in decisions.pending}
    pending.update(view.rejected)
    for key in waiting or {}:
        pending.pop(key, None)
    return EndState(bound, pending)


def usage_of(pod: Pod, resources: Sequence[str]) -> list[int]:
    """What a pod counts against quota, in milli-units, over ``resources``."""
    out: list[int] = []
    for r in resources:
        if r == GPU:
            if pod.is_fractional:
                out.append((pod.gpu_blocks or 0) * MILLI_PER_BLOCK)
            else:
                out.append(pod.whole_gpus * MILLI)
        else:
            out.append(pod.requests.get(r, 0))
    return out


@dataclass
class QueueReport:
    usage: dict[str, int] = field(default_factory=dict)
    guaranteed: dict[str, int] = field(default_factory=dict)
    borrowed: dict[str, int] = field(default_factory=dict)
    quota: dict[str, int] = field(default_factory=dict)
    admitted: int = 0
    pending: int = 0
    overcommitted: str = ""  # why this queue's children promise more than its quota, or ""


def queue_reports(queues: Sequence[Queue], view: SnapshotView, state: EndState) -> dict[str, QueueReport]:
    """Usage, guaranteed usage, borrowed amount and gang counts of every queue (subtrees summed)."""
    resources = sorted({GPU} | {r for q in queues for r, spec in q.resources.items()
                                if spec.quota is not None or spec.limit is not None or spec.lending_limit is not None})
    names: list[str] = [str(q.name) for q in queues]
    children: dict[str, list[str]] = {n: [] for n in names}
    for q in queues:
        if q.parent in children:
            children[q.parent].append(q.name)
    reports: dict[str, QueueReport] = {n: QueueReport(usage=dict.fromkeys(resources, 0)) for n in names}
    admitted: dict[str, set[str]] = {n: set() for n in names}
    pending: dict[str, set[str]] = {n: set() for n in names}
    for key, pod in state.bound.items():
        queue = view.queue_of.get(key)
        if queue not in reports:
            continue
        assert queue is not None
        for r, amount in zip(resources, usage_of(pod, resources), strict=True):
            reports[queue].usage[r] += amount
        admitted[queue].add(gang_id(pod))
    for key in state.pending:
        queue = view.queue_of.get(key)
        pending_pod = view.pods.get(key)
        if queue in pending and pending_pod is not None:
            assert queue is not None
            gang = gang_id(pending_pod)
            if gang not in admitted[queue]:
                pending[queue].add(gang)
    by_name: dict[str, Queue] = {str(q.name): q for q in queues}
    for name in _post_order(names, children):
        report = reports[name]
        for child in children[name]:
            for r in resources:
                report.usage[r] += reports[child].usage[r]
            admitted[name] |= admitted[child]
            pending[name] |= pending[child]
        report.admitted, report.pending = len(admitted[name]), len(pending[name])
        spec_of = by_name[name].resources
        for r in resources:
            spec = spec_of.get(r)
            children_quota = sum(reports[c].quota.get(r, 0) for c in children[name])
            if spec is not None and spec.quota is not None:
                report.quota[r] = spec.quota
                if children[name] and children_quota > spec.quota:
                    report.overcommitted = (
                        f"the quotas of its children add up to {format_quantity(children_quota)} {r}, "
                        f"more than its quota of {format_quantity(spec.quota)}"
                    )
            else:
                report.quota[r] = children_quota
            # semantics.md's guaranteed usage: a leaf's usage; a parent's, the sum over its children
            # of min(their guaranteed usage, their quota), which is the sum of their reported figures.
            # Reported: the part of it within the queue's own quota (docs/controller.md, "Status").
            guaranteed = (sum(reports[c].guaranteed[r] for c in children[name]) if children[name]
                          else report.usage[r])
            report.guaranteed[r] = min(guaranteed, report.quota[r])
            report.borrowed[r] = max(0, report.usage[r] - report.quota[r])
    return reports


def _post_order(names: Iterable[str], children: Mapping[str, list[str]]) -> list[str]:
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for child in children[name]:
            visit(child)
        order.append(name)

    for name in names:
        visit(name)
    return order


def _quantities(amounts: Mapping[str, int]) -> dict[str, str]:
    return {r: format_quantity(max(0, amount)) for r, amount in sorted(amounts.items())}


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(int(seconds), tz=UTC)


def _existing_condition(existing: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    for condition in (existing or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def reservations_by_queue(view: SnapshotView, reservations: Sequence[Reservation]) -> dict[str, list[Reservation]]:
    """Each leaf queue's reservations (docs/semantics.md, "Reservation and backfill"): a gang's queue is
    its pods' leaf queue as the snapshot placed them."""
    if not reservations:
        return {}
    wanted = {r.gang for r in reservations}
    queue_of: dict[str, str] = {}
    for pod in view.snapshot.pods:
        gang = gang_key(pod)
        if gang in wanted and gang not in queue_of and (queue := view.queue_of.get(pod.key)) is not None:
            queue_of[gang] = queue
    out: dict[str, list[Reservation]] = {}
    for r in reservations:
        if r.gang in queue_of:
            out.setdefault(queue_of[r.gang], []).append(r)
    return out


def queue_status(report: QueueReport, existing: Mapping[str, Any] | None, now: float,
                 decayed: DecayedValue | None = None, reservations: Sequence[Reservation] = ()) -> dict[str, Any]:
    over = bool(report.overcommitted)
    status = ConditionStatus.TRUE if over else ConditionStatus.FALSE
    previous = _existing_condition(existing, "OverCommitted")
    since: Any = _time(now)
    if previous is not None and previous.get("status") == status.value and previous.get("lastTransitionTime"):
        since = previous["lastTransitionTime"]
    condition = Condition(
        type="OverCommitted",
        status=status,
        reason="ChildQuotasExceedQuota" if over else "WithinQuota",
        message=report.overcommitted,
        lastTransitionTime=since,
    )
    status_now = QueueStatus(
        usage=_quantities(report.usage),
        guaranteedUsage=_quantities(report.guaranteed),
        borrowed=_quantities(report.borrowed),
        admittedGangs=report.admitted,
        pendingGangs=report.pending,
        decayedUsage=_quantities(decayed.usage) if decayed is not None else None,
        decayedUsageTime=_time(decayed.at) if decayed is not None else None,
        reservations=[QueueReservation(gang=r.gang, nodes=list(r.nodes), start=_time(r.start), gpus=r.gpus)
                      for r in reservations] or None,
        conditions=[condition],
    ).to_api()
    if not reservations and isinstance(existing, Mapping) and existing.get("reservations"):
        status_now["reservations"] = None  # the merge patch removes the last ones
    return status_now


@dataclass(frozen=True)
class GroupFacts:
    """What is known of one PodGroup's pods."""

    group: PodGroup
    bound: int  # pods holding a node once the cycle's decisions are carried out
    running: int  # pods bound and reported Running by the kubelet
    failed: int  # pods in phase Failed
    alive: int  # pods not finished
    reason: str  # why it is pending (a member's reason), or ""


def group_status(facts: GroupFacts, existing: Mapping[str, Any] | None, now: float) -> dict[str, Any]:
    need = facts.group.min_member
    if facts.failed and facts.alive < need:
        phase, reason = PodGroupPhase.FAILED, f"{facts.failed} pods failed; {facts.alive} of {need} left"
    elif facts.running >= need:
        phase, reason = PodGroupPhase.RUNNING, f"{facts.running} pods running"
    elif facts.bound >= need:
        phase, reason = PodGroupPhase.ADMITTED, f"{facts.bound} pods bound"
    else:
        phase = PodGroupPhase.PENDING
        reason = facts.reason or f"{facts.alive} of {need} pods exist"
    since: Any = _time(now)
    if existing and existing.get("phase") == phase.value and existing.get("lastTransitionTime"):
        since = existing["lastTransitionTime"]
    return PodGroupStatus(phase=phase, boundPods=facts.bound, lastReason=reason, lastTransitionTime=since,
                          conditions=[_scheduled_condition(facts, phase, reason, existing, now)]).to_api()


SCHEDULED = "Scheduled"


def _scheduled_condition(facts: GroupFacts, phase: PodGroupPhase, reason: str, existing: Mapping[str, Any] | None,
                         now: float) -> Condition:
    """``Scheduled``: True once minMember pods hold a node (Admitted, Running); False with reason
    ``Unschedulable`` and the engine's pending reason as its message, ``WaitingForPods`` while fewer
    than minMember pods exist, ``PodsFailed`` when too many failed. ``lastTransitionTime`` (the
    injected clock's ``now``) moves only when the status changes."""
    if phase in (PodGroupPhase.ADMITTED, PodGroupPhase.RUNNING):
        status, why = ConditionStatus.TRUE, "Scheduled"
    elif phase == PodGroupPhase.FAILED:
        status, why = ConditionStatus.FALSE, "PodsFailed"
    else:
        status, why = ConditionStatus.FALSE, "Unschedulable" if facts.reason else "WaitingForPods"
    previous = _existing_condition(existing, SCHEDULED)
    since: Any = _time(now)
    if previous is not None and previous.get("status") == status.value and previous.get("lastTransitionTime"):
        since = previous["lastTransitionTime"]
    return Condition(type=SCHEDULED, status=status, reason=why, message=reason, lastTransitionTime=since)


def same_status(model: type[QueueStatus] | type[PodGroupStatus] | type[ProjectStatus], current: Any,
                wanted: Mapping[str, Any]) -> bool:
    """Whether the status already stored says what ``wanted`` says (normalised through the model)."""
    if not isinstance(current, Mapping):
        return False
    try:
        return bool(model.model_validate(dict(current)).to_api() == wanted)
    except ValueError:
        return False


NAMESPACE_CONFLICT = "NamespaceConflict"


def project_status(name: str, index: ProjectIndex, existing: Mapping[str, Any] | None, now: float) -> dict[str, Any]:
    """A Project's status: how many namespaces it governs, and ``NamespaceConflict`` (True, naming
    each namespace and the other Projects that claim it, while it shares a namespace; docs/semantics-notes.md,
    "Projects")."""
    conflicts = index.conflicts_of(name)
    status = ConditionStatus.TRUE if conflicts else ConditionStatus.FALSE
    message = "; ".join(f"namespace {ns} is also claimed by project{'s' if len(others) > 1 else ''} {', '.join(others)}"
                        for ns, others in conflicts.items())  # fmt: skip
    previous = _existing_condition(existing, NAMESPACE_CONFLICT)
    since: Any = _time(now)
    if previous is not None and previous.get("status") == status.value and previous.get("lastTransitionTime"):
        since = previous["lastTransitionTime"]
    condition = Condition(
        type=NAMESPACE_CONFLICT,
        status=status,
        reason="NamespaceClaimedTwice" if conflicts else "NoConflict",
        message=message,
        lastTransitionTime=since,
    )
    governed = sum(1 for project in index.by_namespace.values() if project.name == name)
    return ProjectStatus(namespaceCount=governed, conditions=[condition]).to_api()
