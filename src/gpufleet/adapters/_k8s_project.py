"""gpufleet's Project (``gpufleet.dev/v1alpha1``, cluster-scoped) and the v1 Namespace labels a
Project's namespace selector reads (docs/semantics-notes.md, "Projects (tenancy)").

The Project ``spec`` is a pydantic model with ``extra="forbid"``, like the Queue and PodGroup
specs (a typo is an error, not an ignored field); what spans objects (its queues exist and are
leaves, no namespace claimed twice) is checked by the snapshot validator.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, NamedTuple

from pydantic import Field, StrictBool, StrictInt, StrictStr, ValidationInfo, field_validator

from gpufleet.adapters._fields import INT32_MAX, mapping, req_str, str_map
from gpufleet.adapters._k8s_models import _Spec, _validate
from gpufleet.domain import (
    DEFAULT_VOLUME_KINDS,
    ImagePolicy,
    LabelSelector,
    NodePool,
    Project,
    QueueName,
    SelectorRequirement,
    VolumePolicy,
)

__all__ = ["NamespaceLabels", "ProjectSpec", "namespace_from_dict", "project_from_dict"]

Name = Annotated[StrictStr, Field(min_length=1)]


class SelectorOperator(str, Enum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class SelectorRequirementSpec(_Spec):
    key: Name = Field(description="Label key.")
    operator: SelectorOperator = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[StrictStr] = Field(
        default_factory=list, validate_default=True,
        description="At least one for In and NotIn; none for Exists and DoesNotExist.",
    )

    @field_validator("values")
    @classmethod
    def _values_fit_operator(cls, values: list[str], info: ValidationInfo) -> list[str]:
        operator = info.data.get("operator")
        if operator in (SelectorOperator.IN, SelectorOperator.NOT_IN) and not values:
            raise ValueError(f"must list at least one value for operator {operator.value}")
        if operator in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST) and values:
            raise ValueError(f"must be empty for operator {operator.value}")
        return values


class LabelSelectorSpec(_Spec):
    matchLabels: dict[StrictStr, StrictStr] = Field(default_factory=dict, description="Labels that must all match.")
    matchExpressions: list[SelectorRequirementSpec] = Field(
        default_factory=list, description="Requirements that must all hold."
    )

    def domain(self) -> LabelSelector:
        return LabelSelector(
            tuple(sorted(self.matchLabels.items())),
            tuple(SelectorRequirement(e.key, e.operator.value, tuple(e.values)) for e in self.matchExpressions),
        )


class ProjectNamespacesSpec(_Spec):
    names: list[Name] = Field(default_factory=list, description="Namespaces of the Project, by name.")
    selector: LabelSelectorSpec | None = Field(
        None, description="Namespaces of the Project, by their labels (kubernetes.io/metadata.name included)."
    )


class NodePoolSpec(_Spec):
    name: Name = Field(description="Name of the pool, as pending reasons show it.")
    nodeSelector: LabelSelectorSpec = Field(description="The nodes of the pool: a label selector over node labels.")


class ImagesSpec(_Spec):
    allowed: list[Name] = Field(default_factory=list, description="Image reference globs; empty: any image.")
    denied: list[Name] = Field(default_factory=list, description="Image reference globs refused.")
    requireDigest: StrictBool = Field(False, description="Images must be pinned by digest.")


class VolumesSpec(_Spec):
    kinds: list[Name] = Field(default_factory=lambda: list(DEFAULT_VOLUME_KINDS), description="Volume kinds allowed.")
    storageClasses: list[StrictStr] | None = Field(None, description="StorageClasses allowed; absent: any.")
    claimNames: list[Name] | None = Field(None, description="PVC name globs allowed; absent: any.")


class ProjectSpec(_Spec):
    namespaces: ProjectNamespacesSpec = Field(
        default_factory=ProjectNamespacesSpec, description="The namespaces that belong to the Project."
    )
    queues: list[Name] = Field(default_factory=list, description="Leaf queues its pods may name.")
    defaultQueue: Name | None = Field(None, description="Queue of its pods that name none; one of queues.")
    nodePools: list[NodePoolSpec] = Field(
        default_factory=list, description="Nodes its pods may use; empty: every node."
    )
    priorityClasses: list[Name] | None = Field(None, description="PriorityClasses its pods may name; absent: any.")
    allowNonPreemptible: StrictBool = Field(False, description="Whether its work may be non-preemptible.")
    maxGPUsPerUser: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] | None = Field(
        None, description="GPUs one user may hold in the Project; absent: no cap."
    )
    maxPendingGangsPerUser: Annotated[StrictInt, Field(ge=0, le=INT32_MAX)] | None = Field(
        None, description="Pending gangs of one user that are candidates; absent: no cap."
    )
    images: ImagesSpec = Field(default_factory=ImagesSpec, description="Images its pods may run.")
    volumes: VolumesSpec = Field(default_factory=VolumesSpec, description="Volumes its pods may mount.")

    @field_validator("defaultQueue")
    @classmethod
    def _default_is_listed(cls, value: str | None, info: ValidationInfo) -> str | None:
        queues = info.data.get("queues")
        if value is not None and queues is not None and value not in queues:
            listed = ", ".join(queues) if queues else "none"
            raise ValueError(f'must be one of spec.queues ({listed}), got "{value}"')
        return value


def project_from_dict(doc: dict[str, Any]) -> Project:
    """A ``gpufleet.dev/v1alpha1`` Project (cluster-scoped: a namespace is ignored)."""
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    spec: ProjectSpec = _validate(ProjectSpec, doc, required=False)
    ns = spec.namespaces
    return Project(
        name=name,
        namespace_names=tuple(ns.names),
        namespace_selector=ns.selector.domain() if ns.selector is not None else None,
        queues=tuple(QueueName(q) for q in spec.queues),
        default_queue=QueueName(spec.defaultQueue) if spec.defaultQueue else None,
        node_pools=tuple(NodePool(pool.name, pool.nodeSelector.domain()) for pool in spec.nodePools),
        priority_classes=tuple(spec.priorityClasses) if spec.priorityClasses is not None else None,
        allow_non_preemptible=spec.allowNonPreemptible,
        max_gpus_per_user=spec.maxGPUsPerUser,
        max_pending_gangs_per_user=spec.maxPendingGangsPerUser,
        images=ImagePolicy(tuple(spec.images.allowed), tuple(spec.images.denied), spec.images.requireDigest),
        volumes=VolumePolicy(
            tuple(spec.volumes.kinds),
            tuple(spec.volumes.storageClasses) if spec.volumes.storageClasses is not None else None,
            tuple(spec.volumes.claimNames) if spec.volumes.claimNames is not None else None,
        ),
    )


class NamespaceLabels(NamedTuple):
    """A v1 Namespace as gpufleet reads it: its name and labels (for Project namespace selectors)."""

    name: str
    labels: dict[str, str]


def namespace_from_dict(doc: dict[str, Any]) -> NamespaceLabels:
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    return NamespaceLabels(name, str_map(meta.get("labels"), "metadata.labels"))
