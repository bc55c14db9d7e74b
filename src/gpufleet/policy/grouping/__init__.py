"""Gangs of real workloads: the pure rules that turn an owner (a Job, a JobSet, a PyTorchJob, an MPIJob,
a TrainJob, a RayCluster or RayJob, a LeaderWorkerSet, a Deployment or StatefulSet) into the PodGroups
it gets and find a pod's group (docs/semantics-notes.md, "Workload owners and their gangs").

No I/O, no clock: the adapters read owner objects into :class:`Owner`
(``gpufleet.adapters.owner_from_dict``), the caller passes the namespace facts."""

from gpufleet.policy.grouping.kinds import KINDS, KindRule, kind_rule
from gpufleet.policy.grouping.members import Membership, OwnerIndex, member_of, pods_of
from gpufleet.policy.grouping.model import (
    GangUnit,
    GroupFacts,
    GroupPlan,
    GroupProblem,
    ObjectLink,
    Owner,
    OwnerRef,
    PodTemplate,
    Role,
)
from gpufleet.policy.grouping.names import MAX_NAME, group_name
from gpufleet.policy.grouping.rules import (
    ANNOTATION_GROUP_PER,
    ANNOTATION_MIN_MEMBER,
    ANNOTATION_PLACEMENT,
    ANNOTATION_TOPOLOGY_PREFERRED,
    ANNOTATION_TOPOLOGY_REQUIRED,
    Grouping,
    group_for,
    unit_names,
)
from gpufleet.policy.grouping.suspend import (
    SUSPENDABLE_KINDS,
    NotAdmitted,
    SuspendedOwner,
    VirtualGang,
    not_admitted,
    owners_to_unsuspend,
    virtual_gang,
)

__all__ = [
    "ANNOTATION_GROUP_PER",
    "ANNOTATION_MIN_MEMBER",
    "ANNOTATION_PLACEMENT",
    "ANNOTATION_TOPOLOGY_PREFERRED",
    "ANNOTATION_TOPOLOGY_REQUIRED",
    "KINDS",
    "MAX_NAME",
    "SUSPENDABLE_KINDS",
    "GangUnit",
    "GroupFacts",
    "GroupPlan",
    "GroupProblem",
    "Grouping",
    "KindRule",
    "Membership",
    "NotAdmitted",
    "ObjectLink",
    "Owner",
    "OwnerIndex",
    "OwnerRef",
    "PodTemplate",
    "Role",
    "SuspendedOwner",
    "VirtualGang",
    "group_for",
    "group_name",
    "kind_rule",
    "member_of",
    "not_admitted",
    "owners_to_unsuspend",
    "pods_of",
    "unit_names",
    "virtual_gang",
]
