"""gpufleet's own resources (Queue, PodGroup, SchedulerConfig): pydantic models of their ``spec``.

``extra="forbid"`` everywhere so that a typo (``quotas:``, ``minMembers:``) is an error rather
than a silently ignored field. Types are strict (no "8" for an integer, no "yes" for a boolean);
quantities accept Kubernetes quantity strings (and plain YAML numbers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, StrictStr, WithJsonSchema
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import ErrorDetails

from gpufleet.adapters._fields import INT32_MAX, INT32_MIN, FieldError, mapping, opt_str, req_str
from gpufleet.adapters.errors import describe
from gpufleet.adapters.quantity import to_milli
from gpufleet.domain import (
    Placement,
    PodGroup,
    Queue,
    QueueName,
    QueueResource,
    SchedulerConfig,
    WithinQueue,
)

__all__ = [
    "QUANTITY_JSON_SCHEMA",
    "PodGroupSpec",
    "QueueSpec",
    "SchedulerConfigSpec",
    "pod_group_from_dict",
    "queue_from_dict",
    "scheduler_config_from_dict",
]


def _quantity(value: object) -> int | None:
    # QuantityError is a ValueError: pydantic reports it as a value_error with our message.
    return None if value is None else to_milli(value)


# What a quantity looks like on the wire, for the CRDs generated from these models: Kubernetes'
# int-or-string, with a pattern that is the intersection of the grammars of Kubernetes and of
# ``_quantity`` (lightkube's parser): no sign but "+" (ours are never negative), the suffixes both
# know (no "n"/"u", which lightkube lacks, no "Z"/"Y", which Kubernetes lacks), a lower-case
# exponent only and never with a suffix. So the API server refuses what the scheduler could not read.
QUANTITY_PATTERN = r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[mkMGTPE]|e[+-]?[0-9]+)?$"
QUANTITY_JSON_SCHEMA: dict[str, Any] = {
    "x-kubernetes-int-or-string": True,
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": QUANTITY_PATTERN,
    "minimum": 0,
}

Quantity = Annotated[int | None, BeforeValidator(_quantity), WithJsonSchema(QUANTITY_JSON_SCHEMA)]
Int32 = Annotated[StrictInt, Field(ge=INT32_MIN, le=INT32_MAX)]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class QueueResourceSpec(_Spec):
    quota: Quantity = Field(None, description="Guaranteed amount of this resource; default 0.")
    limit: Quantity = Field(None, description="Ceiling on usage, borrowed included; default: none.")
    lendingLimit: Quantity = Field(
        None, description="At most this much of the unused quota may be used by other queues; default: all of it."
    )


class QueuePreemptionSpec(_Spec):
    reclaimBorrowed: StrictBool = Field(
        True, description="In-quota work of this queue may evict other queues' borrowed work."
    )
    withinQueue: WithinQueue = Field(
        WithinQueue.LOWER_PRIORITY, description="Whether pods of this queue may preempt lower-priority pods of it."
    )


class QueueSpec(_Spec):
    parent: StrictStr | None = Field(None, description="Name of the parent Queue; none: a top-level queue.")
    weight: Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)] = Field(
        1.0, description="Share of idle capacity above quota."
    )
    resources: dict[StrictStr, QueueResourceSpec] = Field(
        default_factory=dict, description="Quota, limit and lending limit per resource name (e.g. nvidia.com/gpu)."
    )
    preemption: QueuePreemptionSpec = Field(
        default_factory=QueuePreemptionSpec, description="What work of this queue may evict."
    )


class PodGroupTopologySpec(_Spec):
    required: StrictStr | None = Field(
        None, description="Node label key: every pod of the gang lands in one domain of this level."
    )
    preferred: StrictStr | None = Field(
        None, description="Node label key: as few domains of this level as possible; may spread."
    )


class PodGroupSpec(_Spec):
    minMember: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] = Field(
        description="All or nothing: at least this many pods start together."
    )
    queue: StrictStr | None = Field(None, description="Leaf queue of the gang; else the pods' queue label.")
    priorityClassName: StrictStr | None = Field(None, description="Priority of the gang; else the pods' own.")
    topology: PodGroupTopologySpec = Field(
        default_factory=PodGroupTopologySpec, description="Topology constraints; keys are node label keys."
    )


class SchedulerConfigSpec(_Spec):
    defaultQueue: Annotated[StrictStr, Field(min_length=1)] = Field(
        "default", description="Queue of pods that name none, directly or through their PodGroup."
    )
    topologyLevels: list[StrictStr] = Field(
        default_factory=list, description="Node label keys of nested topology domains, outermost first."
    )
    nonPreemptiblePriority: Int32 = Field(
        100, description="Pods at or above this priority are not preemptible unless labelled."
    )
    placement: Placement = Field(Placement.BINPACK, description="Node placement strategy.")
    requireProject: StrictBool = Field(
        False, description="Pods of namespaces that belong to no Project wait."
    )


def loc_path(loc: Sequence[int | str], root: str = "") -> str:
    """A pydantic error location as a field path: ``pools[0].gpuMemory``, ``labels(key)``."""
    out = root
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            out += "(key)"
        else:
            out += f".{part}" if out else str(part)
    return out


def _bound(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _message(error: ErrorDetails) -> str:
    kind = error["type"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    got = describe(error.get("input"))
    if kind == "missing":
        return "required field missing"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    if kind in ("string_type", "string_sub_type"):
        return f"must be a string, got {got}"
    if kind in ("int_type", "int_from_float", "int_parsing"):
        return f"must be an integer, got {got}"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number, got {got}"
    if kind == "finite_number":
        return f"must be a finite number, got {got}"
    if kind == "bool_type":
        return f"must be true or false, got {got}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping, got {got}"
    if kind in ("list_type", "tuple_type"):
        return f"must be a list, got {got}"
    if kind == "enum":
        return f"must be one of {ctx.get('expected', '?')}, got {got}"
    if kind == "greater_than":
        return f"must be > {_bound(ctx.get('gt'))}, got {got}"
    if kind == "greater_than_equal":
        return f"must be >= {_bound(ctx.get('ge'))}, got {got}"
    if kind == "less_than_equal":
        return f"must be <= {_bound(ctx.get('le'))}, got {got}"
    if kind == "string_too_short":
        return "must not be empty"
    return f"{error['msg']}, got {got}"


def _validate(model: type[_Spec], doc: dict[str, Any], required: bool) -> Any:
    raw = doc.get("spec")
    if raw is None:
        if required:
            raise FieldError("spec", "required field missing")
        raw = {}
    try:
        return model.model_validate(raw)
    except PydanticValidationError as err:
        first = err.errors(include_url=False)[0]
        raise FieldError(loc_path(first["loc"], "spec"), _message(first)) from None


def queue_from_dict(doc: dict[str, Any]) -> Queue:
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    spec: QueueSpec = _validate(QueueSpec, doc, required=False)
    return Queue(
        name=QueueName(name),
        parent=QueueName(spec.parent) if spec.parent else None,
        weight=float(spec.weight),
        resources={
            resource: QueueResource(quota=r.quota, limit=r.limit, lending_limit=r.lendingLimit)
            for resource, r in spec.resources.items()
        },
        reclaim_borrowed=spec.preemption.reclaimBorrowed,
        within_queue=spec.preemption.withinQueue,
    )


def pod_group_from_dict(doc: dict[str, Any]) -> PodGroup:
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    namespace = opt_str(meta.get("namespace"), "metadata.namespace") or "default"
    spec: PodGroupSpec = _validate(PodGroupSpec, doc, required=True)
    return PodGroup(
        namespace=namespace,
        name=name,
        min_member=spec.minMember,
        queue=QueueName(spec.queue) if spec.queue else None,
        priority_class_name=spec.priorityClassName or None,
        topology_required=spec.topology.required or None,
        topology_preferred=spec.topology.preferred or None,
    )


def scheduler_config_from_dict(doc: dict[str, Any]) -> SchedulerConfig:
    meta = mapping(doc.get("metadata"), "metadata")
    opt_str(meta.get("name"), "metadata.name")
    spec: SchedulerConfigSpec = _validate(SchedulerConfigSpec, doc, required=False)
    return SchedulerConfig(
        default_queue=QueueName(spec.defaultQueue),
        topology_levels=tuple(spec.topologyLevels),
        non_preemptible_priority=spec.nonPreemptiblePriority,
        placement=spec.placement,
        require_project=spec.requireProject,
    )
