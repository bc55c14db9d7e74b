"""Admission by suspension (docs/semantics-notes.md, "Admission by suspension"): which suspended owners
the controller unsuspends, given what the engine decided for their virtual gangs. Pure: no I/O.

An owner created suspended is shown to the engine as pending *virtual* pods, one per member its
group plans ask for; the owner is admitted (its ``spec.suspend`` set to false) only when, for **every**
gang it has, at least ``min_member`` of that gang's virtual pods were placed. A partly placeable owner
stays suspended: unsuspending it would create pods that cannot all start."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from gpufleet.policy.grouping.model import GroupPlan, OwnerRef

__all__ = ["SUSPENDABLE_KINDS", "SuspendedOwner", "VirtualGang", "owners_to_unsuspend", "virtual_gang"]

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
