"""gpufleet's own resources (Queue, PodGroup, SchedulerConfig): pydantic models of their ``spec``.

``extra="forbid"`` everywhere so that a typo (``quotas:``, ``minMembers:``) is an error rather
than a silently ignored field. Types are strict (no "8" for an integer, no "yes" for a boolean);
quantities accept Kubernetes quantity strings (and plain YAML numbers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    model_validator,
)
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import ErrorDetails

from gpufleet.adapters._fields import INT32_MAX, INT32_MIN, FieldError, mapping, opt_str, req_str, timestamp
from gpufleet.adapters.errors import describe
from gpufleet.adapters.quantity import to_milli
from gpufleet.domain import (
    ANNOTATION_MOVED_AT,
    ANNOTATION_QUEUED_AT,
    DEFAULT_INTERRUPTION_KEYS,
    AdmissionMode,
    Consolidation,
    FlavorChoice,
    GpuFailurePolicy,
    IdlePolicy,
    ImagePolicy,
    LabelSelector,
    NodePool,
    Placement,
    PodGroup,
    Project,
    Queue,
    QueueFlavor,
    QueueName,
    QueueResource,
    ReservationConfig,
    ResourceFlavor,
    SchedulerConfig,
    SelectorRequirement,
    VolumePolicy,
    WithinQueue,
)
from gpufleet.domain.units import DURATION_PATTERN, duration_seconds
from gpufleet.policy.images import pattern_problem

__all__ = [
    "QUANTITY_JSON_SCHEMA",
    "DrainSpec",
    "PodGroupSpec",
    "ProjectModel",
    "QueueSpec",
    "ResourceFlavorSpec",
    "SchedulerConfigSpec",
    "pod_group_from_dict",
    "project_from_dict",
    "project_namespace_names",
    "queue_from_dict",
    "resource_flavor_from_dict",
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

def parse_duration(value: object) -> float:
    """Seconds from a duration (``domain.units.duration_seconds``, the one grammar of every duration);
    a ValueError saying what is wrong and quoting the value."""
    try:
        return duration_seconds(value)
    except ValueError as e:
        raise ValueError(f"{e}, got {describe(value)}") from None


# On the wire: Kubernetes' int-or-string (a number of seconds, or text), the text with the very grammar
# the parser reads (docs/semantics.md, "Durations"), so the API server refuses what we could not read.
DURATION_JSON_SCHEMA: dict[str, Any] = {
    "x-kubernetes-int-or-string": True,
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": DURATION_PATTERN,
    "minimum": 0,
}
Duration = Annotated[float, BeforeValidator(parse_duration), WithJsonSchema(DURATION_JSON_SCHEMA)]
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
    minRuntime: Duration | None = Field(
        None, description="Running gangs of this queue younger than this (e.g. 30m) are never evicted for "
        "reclaim or preemption; default: none.",
    )
    preemptionDelay: Duration | None = Field(
        None, description="Gangs of this queue evict others only after waiting this long (e.g. 5m) for "
        "capacity to free on its own; default: none.",
    )


class QueueFlavorSpec(_Spec):
    name: Annotated[StrictStr, Field(min_length=1, max_length=253)] = Field(
        description="Name of a ResourceFlavor."
    )
    resources: dict[StrictStr, QueueResourceSpec] = Field(
        default_factory=dict, description="Quota, limit and lending limit per resource on the flavor's nodes."
    )


class ResourceFlavorSpec(_Spec):
    nodeLabels: Annotated[dict[StrictStr, StrictStr], Field(min_length=1)] = Field(
        description="The labels (key: value) a node carries to be of this flavor (e.g. nvidia.com/gpu.product)."
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
    flavors: list[QueueFlavorSpec] = Field(
        default_factory=list,
        description="Quota per ResourceFlavor (GPU model), in fallback order: a pod takes the first that fits.",
    )
    flavorChoice: FlavorChoice = Field(
        FlavorChoice.IN_ORDER,
        description="InOrder: a pod takes the first flavor that admits it; BestPlacement: a pod alone takes the "
        "best node over all flavors that admit it in quota (else by borrowing).",
    )


class PodGroupTopologySpec(_Spec):
    required: StrictStr | None = Field(
        None, description="Node label key: every pod of the gang lands in one domain of this level."
    )
    preferred: StrictStr | None = Field(
        None, description="Node label key: as few domains of this level as possible; may spread."
    )


# The strategies a PodGroup may choose for its own pods (docs/semantics-notes.md, "Placement per gang");
# defrag needs a target workload, which is the cluster's, so it stays a SchedulerConfig choice.
GangPlacement = Literal["binpack", "spread"]


class PodGroupSpec(_Spec):
    minMember: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] = Field(
        description="All or nothing: at least this many pods start together."
    )
    queue: StrictStr | None = Field(None, description="Leaf queue of the gang; else the pods' queue label.")
    priorityClassName: StrictStr | None = Field(None, description="Priority of the gang; else the pods' own.")
    topology: PodGroupTopologySpec = Field(
        default_factory=PodGroupTopologySpec, description="Topology constraints; keys are node label keys."
    )
    placement: GangPlacement | None = Field(
        None, description="Node placement strategy of this gang's pods; absent: the SchedulerConfig's."
    )


class DrainSpec(_Spec):
    interruptionKeys: list[Annotated[StrictStr, Field(min_length=1, max_length=317)]] | None = Field(
        None, max_length=64,
        description="Taint or label keys that mark a node for interruption (it drains); "
                    "absent: the common AWS, GCP, Azure and Karpenter handlers' keys.",
    )
    drainCordoned: StrictBool = Field(
        False, description="Drain every cordoned node, not only those annotated gpufleet.dev/drain=true."
    )


class FairShareSpec(_Spec):
    usageHalfLife: Duration | None = Field(
        None, description="Half-life of the decayed historical usage the fair order weighs (e.g. 168h); "
        "default: off (current usage only).",
    )


class ConsolidationSpec(_Spec):
    enabled: StrictBool = Field(
        False,
        description="Move checkpointed preemptible gangs to make room for a gang that fragmentation keeps waiting.",
    )
    maxMovesPerCycle: Annotated[StrictInt, Field(ge=0, le=INT32_MAX)] = Field(
        8, description="Most pods moved in one scheduling cycle."
    )
    maxMovesPerPodPerHour: Annotated[StrictInt, Field(ge=0, le=INT32_MAX)] = Field(
        1, description="Most moves of one pod within an hour (its gpufleet.dev/moved-at history)."
    )
    minWaitSeconds: Annotated[StrictInt, Field(ge=0, le=INT32_MAX)] = Field(
        0, description="A gang waits this long (since its queued-at or oldest pod's creation) before moves are "
        "planned for it."
    )
    gpusPerMove: Annotated[StrictInt, Field(ge=0, le=INT32_MAX)] = Field(
        4, description="One plan moves at most one pod per this many whole GPUs of the gang it makes room for "
        "(at least one; 0: no such bound)."
    )


class ReservationSpec(_Spec):
    after: Duration = Field(
        description="How long a gang waits (since gpufleet.dev/queued-at, else creation) before it may hold a "
        "reservation: a duration like 15m or 1h30m."
    )
    max: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] = Field(4, description="Reservations held at once.")
    percentile: Annotated[StrictInt, Field(ge=1, le=100)] = Field(
        90, description="Percentile of a queue's completed runtimes written into observedRuntime."
    )
    observedRuntime: dict[StrictStr, Duration] = Field(
        default_factory=dict, description="Leaf queue -> its observed runtime (the simulator fills it)."
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
    onGPUFailure: GpuFailurePolicy = Field(
        GpuFailurePolicy.EVICT,
        description="A running pod on a GPU listed unhealthy: evict its whole gang (it requeues), or keep it.",
    )
    drain: DrainSpec = Field(
        default_factory=lambda: DrainSpec(), description="Which nodes are drained gang by gang."
    )
    admission: AdmissionMode = Field(
        AdmissionMode.PODS,
        description="Owners of a suspendable kind (Job, JobSet, RayJob, TrainJob) created suspended: admitted "
        "pod by pod (pods), or unsuspended only once their whole gang is placed (suspend).",
    )
    now: StrictStr | None = Field(
        None, description="The snapshot's time (RFC 3339), for replay of a saved state; the controller and "
        "the simulator use their own clock.",
    )
    fairShare: FairShareSpec = Field(
        default_factory=lambda: FairShareSpec(), description="Fair order between queues over time."
    )
    consolidation: ConsolidationSpec | None = Field(
        None, description="Consolidation (docs/semantics.md): absent or disabled, nothing moves.",
    )
    reservation: ReservationSpec | None = Field(
        None, description="Reservation and backfill for gangs that waited too long; absent: off.",
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
    if kind in ("string_too_short", "too_short"):
        return "must not be empty"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '?')}, got {got}"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx.get('pattern', '?')}, got {got}"
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
        resources=_queue_resources(spec.resources),
        reclaim_borrowed=spec.preemption.reclaimBorrowed,
        within_queue=spec.preemption.withinQueue,
        min_runtime=spec.preemption.minRuntime or 0.0,
        preemption_delay=spec.preemption.preemptionDelay or 0.0,
        **_decayed_usage(doc.get("status")),
        flavors=tuple(QueueFlavor(f.name, _queue_resources(f.resources)) for f in spec.flavors),
        flavor_choice=spec.flavorChoice,
    )


def _decayed_usage(status: object) -> dict[str, Any]:
    """A Queue's ``status.decayedUsage`` and ``status.decayedUsageTime`` (docs/semantics.md, "Fairness
    over time"): written by the controller; a malformed one is refused like a malformed spec."""
    if not isinstance(status, dict) or status.get("decayedUsage") is None:
        return {}
    usage = mapping(status.get("decayedUsage"), "status.decayedUsage")
    out: dict[str, int] = {}
    for resource, amount in usage.items():
        try:
            out[str(resource)] = to_milli(amount)
        except ValueError as err:
            raise FieldError(f"status.decayedUsage[{resource}]", str(err)) from None
    return {"decayed_usage": out,
            "decayed_at": timestamp(status.get("decayedUsageTime"), "status.decayedUsageTime")}


def _queue_resources(specs: dict[str, QueueResourceSpec]) -> dict[str, QueueResource]:
    return {resource: QueueResource(quota=r.quota, limit=r.limit, lending_limit=r.lendingLimit)
            for resource, r in specs.items()}


def resource_flavor_from_dict(doc: dict[str, Any]) -> ResourceFlavor:
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    spec: ResourceFlavorSpec = _validate(ResourceFlavorSpec, doc, required=True)
    return ResourceFlavor(name, tuple(sorted(spec.nodeLabels.items())))


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
        placement=Placement(spec.placement) if spec.placement is not None else None,
        queued_at=_queued_at(meta),
        moved_at=_annotation(meta, ANNOTATION_MOVED_AT),
    )


def _annotation(meta: dict[str, Any], key: str) -> str | None:
    annotations = meta.get("annotations")
    value = annotations.get(key) if isinstance(annotations, dict) else None
    return value if isinstance(value, str) else None


def _queued_at(meta: dict[str, Any]) -> float | None:
    """The group's ``gpufleet.dev/queued-at`` (the controller's), never earlier than its creation: a
    forged one gains nothing a tenant could not get by creating its pods with the group. Unreadable: none."""
    annotations = meta.get("annotations")
    text = annotations.get(ANNOTATION_QUEUED_AT) if isinstance(annotations, dict) else None
    if text is None:
        return None
    try:
        queued = timestamp(text, f"metadata.annotations[{ANNOTATION_QUEUED_AT}]")
        created = timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp")
    except FieldError:
        return None
    if queued is None:
        return None
    return max(queued, created) if created is not None else queued


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
        on_gpu_failure=spec.onGPUFailure,
        interruption_keys=(tuple(spec.drain.interruptionKeys) if spec.drain.interruptionKeys is not None
                           else DEFAULT_INTERRUPTION_KEYS),
        drain_cordoned=spec.drain.drainCordoned,
        admission=spec.admission,
        now=timestamp(spec.now, "spec.now") if spec.now is not None else None,
        usage_half_life=spec.fairShare.usageHalfLife or 0.0,
        consolidation=_consolidation(spec.consolidation),
        reservation=_reservation(spec.reservation) if spec.reservation is not None else None,
    )


def _reservation(spec: ReservationSpec) -> ReservationConfig:
    return ReservationConfig(
        after=spec.after,
        max=spec.max,
        percentile=spec.percentile,
        observed_runtime=dict(sorted(spec.observedRuntime.items())),
    )


def _consolidation(spec: ConsolidationSpec | None) -> Consolidation | None:
    if spec is None or not spec.enabled:
        return None
    return Consolidation(True, spec.maxMovesPerCycle, spec.maxMovesPerPodPerHour, float(spec.minWaitSeconds),
                         spec.gpusPerMove)


# --- Project (docs/semantics-notes.md, "Projects (tenancy)") ------------------------------------
# ProjectModel is the spec model the Project CRD is generated from (kube.install.crds) and that
# project_from_dict (replay, the controller, `policy check`) validates with.

# The volume sources of a PodSpec (core/v1 Volume), as a Project's volumes.kinds names them.
VolumeKind = Literal[
    "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "configMap", "csi", "downwardAPI",
    "emptyDir", "ephemeral", "fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs",
    "hostPath", "image", "iscsi", "nfs", "persistentVolumeClaim", "photonPersistentDisk", "portworxVolume",
    "projected", "quobyte", "rbd", "scaleIO", "secret", "storageos", "vsphereVolume",
]  # fmt: skip
Name = Annotated[StrictStr, Field(min_length=1, max_length=253)]
def _usable_glob(pattern: str) -> str:
    problem = pattern_problem(pattern)  # the admission rule's own check (gpufleet.policy.images)
    if problem is not None:
        raise ValueError(problem)
    return pattern


# A glob over image references or claim names: no blanks, no "***" (docs/semantics-notes.md, "Projects").
# The API server refuses "***" with the CEL rule; the loader with the admission's own check (same words).
_NO_TRIPLE_STAR = "'***' is not a glob ('*': within one path segment, '**': across segments)"
Glob = Annotated[StrictStr, Field(
    min_length=1, max_length=1024, pattern=r"^\S+$",
    json_schema_extra={"x-kubernetes-validations": [{"rule": "!self.contains('***')", "message": _NO_TRIPLE_STAR}]},
), AfterValidator(_usable_glob)]
Cap = Annotated[StrictInt, Field(ge=0, le=INT32_MAX)]
_SET: dict[str, Any] = {"x-kubernetes-list-type": "set"}


def _checked(rule: str, message: str) -> ConfigDict:
    """A spec model whose check (a model validator raising ``message``) the API server also makes:
    the CEL ``rule`` in the CRD's schema (x-kubernetes-validations)."""
    return ConfigDict(extra="forbid", frozen=True,
                      json_schema_extra={"x-kubernetes-validations": [{"rule": rule, "message": message}]})


_VALUES_FIT = "values must be given for In and NotIn, and only for them"
_DEFAULT_LISTED = "defaultQueue must be one of queues"


class SelectorRequirementSpec(_Spec):
    model_config = _checked(
        "(self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)", _VALUES_FIT)
    key: Name = Field(description="The label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[StrictStr] = Field(default_factory=list, description="For In and NotIn: the values.")

    @model_validator(mode="after")
    def _values_fit_the_operator(self) -> SelectorRequirementSpec:
        if (self.operator in ("In", "NotIn")) != bool(self.values):
            raise ValueError(_VALUES_FIT)
        return self


class LabelSelectorSpec(_Spec):
    matchLabels: dict[StrictStr, StrictStr] = Field(default_factory=dict, description="Labels that must be equal.")
    matchExpressions: list[SelectorRequirementSpec] = Field(
        default_factory=list, max_length=32, description="Requirements that must all hold."
    )

    def to_domain(self) -> LabelSelector:
        return LabelSelector(
            tuple(sorted(self.matchLabels.items())),
            tuple(SelectorRequirement(r.key, r.operator, tuple(r.values)) for r in self.matchExpressions),
        )


class ProjectNamespacesSpec(_Spec):
    names: list[Name] = Field(default_factory=list, description="Namespaces of the project, by name.",
                              json_schema_extra=_SET)
    selector: LabelSelectorSpec | None = Field(
        None, description="Namespaces of the project, by their labels (also kubernetes.io/metadata.name)."
    )


class NodePoolSpec(_Spec):
    name: Name = Field(description="Name of the pool, as pending reasons show it.")
    nodeSelector: LabelSelectorSpec = Field(description="The nodes of the pool, by their labels.")


class ImagePolicySpec(_Spec):
    allowed: list[Glob] = Field(default_factory=list, description="Image globs allowed; empty: any image.")
    denied: list[Glob] = Field(default_factory=list, description="Image globs denied, even when allowed.")
    requireDigest: StrictBool = Field(False, description="Images must be pinned by digest (@sha256:...).")


class VolumePolicySpec(_Spec):
    kinds: list[VolumeKind] | None = Field(
        None, description="Volume sources allowed; default persistentVolumeClaim, configMap, secret, emptyDir, "
        "projected, downwardAPI, ephemeral.", json_schema_extra=_SET,
    )
    storageClasses: list[Name] | None = Field(None, description="StorageClasses its claims may use; absent: any.")
    claimNames: list[Glob] | None = Field(None, description="Globs over the names of claims it may mount; absent: any.")


_WARN_BEFORE = "warnMinutes must be less than idleMinutes"


class IdlePolicySpec(_Spec):
    model_config = _checked("(has(self.warnMinutes) ? self.warnMinutes : 15) < self.idleMinutes", _WARN_BEFORE)
    idleMinutes: Annotated[StrictInt, Field(ge=10, le=525_600)] = Field(
        description="Minutes a pod's GPUs may stay idle (under the controller's idle threshold) before it is stopped.")
    warnMinutes: Annotated[StrictInt, Field(ge=0, le=525_600)] = Field(
        15, description="Minutes before the stop that a Warning Event (IdleWarning) is posted on the pod.")
    podSelector: LabelSelectorSpec | None = Field(
        None, description="The Project's pods the policy applies to, by their labels; absent: every pod of ours.")

    @model_validator(mode="after")
    def _warn_before_stop(self) -> IdlePolicySpec:
        if self.warnMinutes >= self.idleMinutes:
            raise ValueError(_WARN_BEFORE)
        return self

    def to_domain(self) -> IdlePolicy:
        return IdlePolicy(idle_seconds=self.idleMinutes * 60, warn_seconds=self.warnMinutes * 60,
                          pod_selector=self.podSelector.to_domain() if self.podSelector else None)


class ProjectModel(_Spec):
    model_config = _checked(
        "!has(self.defaultQueue) || (has(self.queues) && self.defaultQueue in self.queues)", _DEFAULT_LISTED)
    namespaces: ProjectNamespacesSpec = Field(
        default_factory=ProjectNamespacesSpec, description="The namespaces the project governs."
    )
    # maxItems bound the cost the API server estimates for the defaultQueue rule (CEL).
    queues: list[Name] = Field(default_factory=list, max_length=1000, description="Leaf queues its pods may name.",
                               json_schema_extra=_SET)
    defaultQueue: Name | None = Field(None, description="Queue of its pods that name none (one of queues).")
    nodePools: list[NodePoolSpec] = Field(
        default_factory=list, max_length=64, description="Nodes its pods may use; empty: every node.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    priorityClasses: list[Name] | None = Field(
        None, description="PriorityClasses its pods and PodGroups may name; absent: any.", json_schema_extra=_SET
    )
    allowNonPreemptible: StrictBool = Field(False, description="Whether its work may be non-preemptible.")
    maxGPUsPerUser: Annotated[StrictInt, Field(ge=1, le=INT32_MAX)] | None = Field(
        None, description="GPUs one user may hold in the project; absent: no cap.")
    maxPendingGangsPerUser: Cap | None = Field(
        None, description="Pending gangs of one user considered at a time; absent: no cap."
    )
    images: ImagePolicySpec = Field(default_factory=ImagePolicySpec, description="Images its pods may run.")
    volumes: VolumePolicySpec = Field(default_factory=VolumePolicySpec, description="Volumes its pods may mount.")
    idlePolicy: IdlePolicySpec | None = Field(
        None, description="Opt-in: stop its pods whose GPUs stay idle (a Warning Event first); absent: never.")

    @model_validator(mode="after")
    def _default_queue_is_listed(self) -> ProjectModel:
        if self.defaultQueue is not None and self.defaultQueue not in self.queues:
            raise ValueError(_DEFAULT_LISTED)
        names = [pool.name for pool in self.nodePools]
        if len(set(names)) != len(names):
            raise ValueError("nodePools: names must be unique")
        return self

    def to_domain(self, name: str) -> Project:
        volumes = self.volumes
        return Project(
            name=name,
            namespace_names=tuple(self.namespaces.names),
            namespace_selector=self.namespaces.selector.to_domain() if self.namespaces.selector else None,
            queues=tuple(QueueName(q) for q in self.queues),
            default_queue=QueueName(self.defaultQueue) if self.defaultQueue else None,
            node_pools=tuple(NodePool(p.name, p.nodeSelector.to_domain()) for p in self.nodePools),
            priority_classes=tuple(self.priorityClasses) if self.priorityClasses is not None else None,
            allow_non_preemptible=self.allowNonPreemptible,
            max_gpus_per_user=self.maxGPUsPerUser,
            max_pending_gangs_per_user=self.maxPendingGangsPerUser,
            images=ImagePolicy(tuple(self.images.allowed), tuple(self.images.denied), self.images.requireDigest),
            volumes=VolumePolicy(
                kinds=tuple(volumes.kinds) if volumes.kinds is not None else VolumePolicy().kinds,
                storage_classes=tuple(volumes.storageClasses) if volumes.storageClasses is not None else None,
                claim_names=tuple(volumes.claimNames) if volumes.claimNames is not None else None,
            ),
            idle_policy=self.idlePolicy.to_domain() if self.idlePolicy is not None else None,
        )


def project_namespace_names(doc: Any) -> tuple[str, ...]:
    """The namespaces a Project names in ``spec.namespaces.names``, read leniently (strings only),
    for a Project that cannot be read as a whole: its namespaces are then known to be claimed."""
    spec = doc.get("spec") if isinstance(doc, dict) else None
    namespaces = spec.get("namespaces") if isinstance(spec, dict) else None
    names = namespaces.get("names") if isinstance(namespaces, dict) else None
    return tuple(n for n in names if isinstance(n, str) and n) if isinstance(names, list) else ()


def project_from_dict(doc: dict[str, Any]) -> Project:
    """A Project object (cluster-scoped) as the domain's :class:`~gpufleet.domain.Project`."""
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    spec: ProjectModel = _validate(ProjectModel, doc, required=False)
    return spec.to_domain(name)
