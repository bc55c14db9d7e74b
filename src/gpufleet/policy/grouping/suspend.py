"""Admission by suspension (docs/semantics-notes.md, "Admission by suspension"): which suspended owners
the controller unsuspends, given what the engine decided for their virtual gangs. Pure: no I/O.

An owner created suspended is shown to the engine as pending *virtual* pods, one per member its
group plans ask for; the owner is admitted (its ``spec.suspend`` set to false) only when, for **every**
gang it has, at least ``min_member`` of that gang's virtual pods were placed. A partly placeable owner
stays suspended: unsuspending it would create pods that cannot all start."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from gpufleet.policy.grouping.model import GroupPlan, OwnerRef

__all__ = [
    "SUSPENDABLE_KINDS", "NotAdmitted", "SuspendedOwner", "VirtualGang", "not_admitted", "owners_to_unsuspend",
    "virtual_gang",
]

# (apiGroup, kind) of the owners whose spec.suspend gpufleet may clear; every other kind is admitted
# pod by pod as before.
SUSPENDABLE_KINDS: frozenset[tuple[str, str]] = frozenset({
    ("batch", "Job"),
    ("jobset.x-k8s.io", "JobSet"),
    ("ray.io", "RayJob"),
    ("trainer.kubeflow.org", "TrainJob"),
})


@dataclass(frozen=True, slots=True)
class VirtualGang:
    """One gang of a suspended owner: its plan and the names of the virtual pods standing for its
    members (as many as the plan's ``max_member``; the first ``min_member`` make the gang)."""

    plan: GroupPlan
    pods: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SuspendedOwner:
    """An owner whose ``spec.suspend`` is true, with every gang its plans give it."""

    ref: OwnerRef
    gangs: tuple[VirtualGang, ...]


def virtual_gang(plan: GroupPlan) -> VirtualGang:
    """The virtual gang standing for ``plan``'s members: ``max_member`` pods named
    ``<group name>-virtual-<i>`` (a group name ends in a hash of the owner's uid, so no real pod of
    any owner, whose names its operator derives from the owner's name, is named so in practice)."""
    return VirtualGang(plan, tuple(f"{plan.name}-virtual-{i}" for i in range(max(plan.max_member, 0))))


def _gang_placed(gang: VirtualGang, placed: Collection[str]) -> bool:
    need = gang.plan.min_member
    # min_member 0 or fewer pods than min_member can never be a whole gang: never admitted.
    if need < 1 or len(gang.pods) < need:
        return False
    return sum(1 for pod in set(gang.pods) if pod in placed) >= need


def owners_to_unsuspend(owners: Iterable[SuspendedOwner], placed: Collection[str]) -> tuple[OwnerRef, ...]:
    """The owners to unsuspend, in input order: those of a suspendable kind with at least one gang,
    each of whose gangs has at least ``min_member`` of its virtual pods in ``placed`` (the names of the
    virtual pods the engine bound). Never an owner with a gang placed in part or not at all."""
    out: list[OwnerRef] = []
    for owner in owners:
        if (owner.ref.api_group, owner.ref.kind) not in SUSPENDABLE_KINDS or not owner.gangs:
            continue
        if all(_gang_placed(gang, placed) for gang in owner.gangs):
            out.append(owner.ref)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class NotAdmitted:
    """A suspended owner left suspended, and why: the first of its gangs not placed whole (its
    PodGroup's name) and the engine's pending reason for that gang's virtual pods."""

    ref: OwnerRef
    group: str
    reason: str


NO_TEMPLATES = "its pod templates could not be read: no virtual pods to place"


def not_admitted(owners: Iterable[SuspendedOwner], placed: Collection[str],
                 pending: Mapping[str, str]) -> tuple[NotAdmitted, ...]:
    """Why each owner of a suspendable kind that :func:`owners_to_unsuspend` does not admit stays
    suspended, in input order. ``placed`` as there; ``pending``: the engine's pending reason of each
    virtual pod left pending, by name. A gang none of whose pods the engine saw (its templates were
    not read) is said to be so."""
    out: list[NotAdmitted] = []
    for owner in owners:
        if (owner.ref.api_group, owner.ref.kind) not in SUSPENDABLE_KINDS:
            continue
        gang = next((g for g in owner.gangs if not _gang_placed(g, placed)), None)
        if gang is None:
            continue  # admitted (or no gang at all: nothing to say)
        reason = next((pending[pod] for pod in gang.pods if pod in pending), None)
        if reason is not None:  # virtual pods exist nowhere: not named to the owner's user
            for pod in gang.pods:
                reason = reason.replace(f"{owner.ref.namespace}/{pod}", "a pod of the gang")
        else:
            got = sum(1 for pod in set(gang.pods) if pod in placed)
            reason = (f"{got} of {gang.plan.min_member} members placed" if got else NO_TEMPLATES)
        out.append(NotAdmitted(owner.ref, gang.plan.name, reason))
    return tuple(out)
