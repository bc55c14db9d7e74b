"""Which gang a pod belongs to: its controller owner references, followed upwards by uid through
objects of its own namespace to the topmost owner gpufleet groups; the operators' labels then only
pick the unit (a replicated job, an LWS group) and the role. Labels alone never make a member: a
tenant's pod that claims an owner by label, or references an object of another namespace, joins
nothing (docs/semantics-notes.md, "Workload owners and their gangs")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpufleet.policy.grouping.kinds import kind_rule
from gpufleet.policy.grouping.model import GangUnit, ObjectLink, Owner, OwnerRef
from gpufleet.policy.grouping.names import group_name

__all__ = ["Membership", "OwnerIndex", "member_of", "pods_of"]


@dataclass(frozen=True, slots=True)
class Membership:
    owner: OwnerRef
    group: str  # the PodGroup name (same namespace as the pod)
    unit: str  # "" (the whole owner), a replicated job, an LWS group index, the pod's name


@dataclass(frozen=True, slots=True)
class OwnerIndex:
    """The objects a chain may pass (by uid) and the owners gpufleet groups (by uid)."""

    links: Mapping[str, ObjectLink]
    owners: Mapping[str, Owner]

    @staticmethod
    def build(links: Iterable[ObjectLink], owners: Iterable[Owner]) -> OwnerIndex:
        return OwnerIndex({link.uid: link for link in links}, {owner.ref.uid: owner for owner in owners})


def _topmost_owner(pod: ObjectLink, index: OwnerIndex) -> Owner | None:
    found: Owner | None = None
    seen: set[str] = {pod.uid}
    uid = pod.controller_uid
    while uid is not None and uid not in seen:
        seen.add(uid)
        owner = index.owners.get(uid)
        if owner is not None:
            if owner.ref.namespace != pod.namespace:
                break
            found = owner
        link = index.links.get(uid)
        if link is None or link.namespace != pod.namespace:
            break
        uid = link.controller_uid
    return found


def member_of(pod: ObjectLink, index: OwnerIndex) -> Membership | None:
    """The gang of ``pod``, or None: no supported owner on its chain, or a pod of its owner that is
    not a member (a RayJob's submitter, a TrainJob's initializers), or a unit label it lacks."""
    owner = _topmost_owner(pod, index)
    if owner is None:
        return None
    rule = kind_rule(owner.ref.api_version, owner.ref.kind)
    if rule is None:
        return None
    if rule.member_roles:
        role = pod.labels.get(rule.role_label or "")
        if role not in rule.member_roles:
            return None
    if owner.unit is GangUnit.OWNER:
        unit = ""
    elif owner.unit is GangUnit.POD:
        unit = pod.name
    else:
        label = pod.labels.get(rule.unit_label or "")
        if label is None:
            return None
        if owner.unit is GangUnit.REPLICA:
            if not (label.isascii() and label.isdigit()):
                return None
            unit = str(int(label))
        else:
            if label not in {role.name for role in owner.roles}:
                return None
            unit = label
    return Membership(owner.ref, group_name(rule.short, owner.ref, unit), unit)


def pods_of(owner: Owner, pods: Iterable[ObjectLink], index: OwnerIndex) -> dict[str, tuple[ObjectLink, ...]]:
    """The member pods of ``owner``, by group name (in the order given)."""
    out: dict[str, list[ObjectLink]] = {}
    for pod in pods:
        membership = member_of(pod, index)
        if membership is not None and membership.owner == owner.ref:
            out.setdefault(membership.group, []).append(pod)
    return {name: tuple(members) for name, members in out.items()}
