"""What the grouping rules read and what they derive (docs/semantics-notes.md, "Workload owners and
their gangs"): plain frozen dataclasses. The adapters read a foreign owner object (a Job, a
PyTorchJob, ...) into an :class:`Owner`; the rules turn it into :class:`GroupPlan` or
:class:`GroupProblem`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from gpufleet.domain import Placement, QueueName
from gpufleet.policy.projects import ProjectIndex

__all__ = [
    "GangUnit",
    "GroupFacts",
    "GroupPlan",
    "GroupProblem",
    "ObjectLink",
    "Owner",
    "OwnerRef",
    "PodTemplate",
    "Role",
]

_DEFAULT_QUEUE = QueueName("default")


class GangUnit(Enum):
    """What one gang of an owner is."""

    OWNER = "owner"  # the whole owner (a Job, a PyTorchJob, a RayCluster)
    ROLE = "role"  # each role (a JobSet's replicated job, when annotated)
    REPLICA = "replica"  # each replica of the one role (a LeaderWorkerSet's groups)
    POD = "pod"  # each pod alone (Deployments, StatefulSets)


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """The identity of an owner object: what a PodGroup's ownerReference names."""

    api_version: str  # "kubeflow.org/v1"
    kind: str  # "PyTorchJob"
    namespace: str
    name: str
    uid: str

    @property
    def api_group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """What the rules read of a pod template."""

    priority_class: str | None = None
    queue_grant: QueueName | None = None  # its gpufleet.dev/queue-grant annotation


@dataclass(frozen=True, slots=True)
class Role:
    """One kind of member of an owner (a PyTorchJob's Worker, a JobSet's replicated job).

    ``replicas`` pods (each of ``pods_per_replica``) are asked for; ``min_replicas`` of them make the
    gang (elastic owners), the others are elastic members; ``max_replicas``: the most it may scale to
    (None: ``replicas``). A role that is not ``counted`` adds to the members but not to minMember."""

    name: str
    replicas: int
    template: PodTemplate = PodTemplate()
    pods_per_replica: int = 1
    min_replicas: int | None = None  # None: replicas
    max_replicas: int | None = None  # None: replicas
    counted: bool = True

    @property
    def min_pods(self) -> int:
        if not self.counted:
            return 0
        low = self.replicas if self.min_replicas is None else self.min_replicas
        return low * self.pods_per_replica

    @property
    def max_pods(self) -> int:
        high = self.replicas if self.max_replicas is None else max(self.max_replicas, self.replicas)
        return high * self.pods_per_replica


@dataclass(frozen=True, slots=True)
class Owner:
    """A workload owner, read from its object: identity, metadata and roles (in the kind's order)."""

    ref: OwnerRef
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    roles: tuple[Role, ...] = ()
    unit: GangUnit = GangUnit.OWNER
    replica_count: int = 1  # GangUnit.REPLICA: how many gangs (a LeaderWorkerSet's spec.replicas)


@dataclass(frozen=True, slots=True)
class GroupFacts:
    """What the rules know of the owner's namespace and the cluster (no I/O: the caller reads them).

    ``projects``: a :class:`gpufleet.policy.ProjectIndex`; ``priority_values``: PriorityClass name to
    value; ``topology_levels`` and ``default_queue``, ``require_project``, ``non_preemptible_priority``
    from the SchedulerConfig; ``leaf_queues``: the Queues that may receive pods."""

    projects: ProjectIndex
    default_queue: QueueName = _DEFAULT_QUEUE
    require_project: bool = False
    topology_levels: tuple[str, ...] = ()
    priority_values: Mapping[str, int] = field(default_factory=dict)
    non_preemptible_priority: int = 100
    # The leaf queues of the cluster; None: not checked (the simulator's queues are its own).
    leaf_queues: frozenset[QueueName] | None = None


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """One PodGroup an owner gets, and which of its pods belong to it.

    ``unit``: the replicated job, the LWS group index or the pod name the gang is for ("" for the
    whole owner); ``member_roles``: the roles whose pods belong (empty: all); ``elastic_above``:
    members beyond ``min_member`` (up to ``max_member``) are elastic; ``placement``: the
    PodGroup's ``spec.placement`` (None: the SchedulerConfig's); ``warnings``: what was wrong in the
    owner's annotations but had a default (the controller shows each as a Warning Event)."""

    owner: OwnerRef
    name: str
    min_member: int
    max_member: int
    queue: QueueName
    priority_class: str | None = None
    topology_required: str | None = None
    topology_preferred: str | None = None
    unit: str = ""
    member_roles: tuple[str, ...] = ()
    placement: Placement | None = None
    warnings: tuple[str, ...] = ()

    @property
    def elastic_above(self) -> int:
        """Members beyond this count are elastic: preemptible first, placed on their own."""
        return self.min_member


@dataclass(frozen=True, slots=True)
class GroupProblem:
    """Why an owner gets no PodGroup: one line naming the owner and the field. ``names``: the group
    names its pods are still labelled with, so that they wait rather than start one by one."""

    owner: OwnerRef
    reason: str
    names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ObjectLink:
    """Any namespaced object on an owner-reference chain (a pod, a Job of a JobSet, a ReplicaSet):
    its identity, its labels and the uid of its controller owner reference, if any."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    controller_uid: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
