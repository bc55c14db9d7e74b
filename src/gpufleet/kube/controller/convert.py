"""Kubernetes objects (as the API server sends them) -> the engine's :class:`~gpufleet.domain.Snapshot`.

Each object goes through the converter ``gpufleet replay`` uses for the same kind in a YAML file
(:mod:`gpufleet.adapters.k8s_yaml`), and pods are filtered with the rule ``gpufleet snapshot``
uses (:func:`gpufleet.kube.inspect.snapshot.wanted_pod`): a replay of a snapshot of the cluster and the
controller see the same objects the same way.

Unlike the replay loader, which refuses a whole file for one bad object, a controller must keep
scheduling everything else: an object that cannot be read is left out (and reported), and so is a
pod of ours whose queue does not exist or is not a leaf. :func:`build_snapshot` also applies the
controller's own knowledge on top of what the API server says (:class:`Overlay`): pods it has
decided to bind (bindings in flight, or waiting for victims to go) hold their place, and pods it
has evicted count as gone at once, as they do in ``replay``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.adapters import FieldError, InputError, reader_for, validate_snapshot
from gpufleet.domain import (
    LABEL_PREFIX,
    Binding,
    ClaimAllocation,
    Namespace,
    Node,
    NodeName,
    Pod,
    PodGroup,
    PodKey,
    PriorityClass,
    Project,
    Queue,
    QueueName,
    ResourceClaim,
    ResourceFlavor,
    SchedulerConfig,
    Snapshot,
)
from gpufleet.domain.flavors import flavor_problems
from gpufleet.domain.queues import (
    NotALeaf,
    QueueProblem,
    QueueTree,
    UnknownParent,
    UnknownQueue,
    gang_id,
    gang_key,
    pod_group_of,
    resolve_queue,
)
from gpufleet.domain.selectors import namespace_labels
from gpufleet.domain.wire import ANNOTATION_DEFAULT_CLASS, ANNOTATION_SELECTED_NODE
from gpufleet.kube.client.port import Kind
from gpufleet.kube.inspect.snapshot import wanted_pod
from gpufleet.policy import ProjectIndex, queue_for

__all__ = [
    "CONVERTED_KINDS",
    "DRA_KINDS",
    "ConversionError",
    "Overlay",
    "SnapshotView",
    "build_snapshot",
    "convert_object",
    "gang_id",
    "gang_key",
    "label_selector_matches",
    "relevant_change",
]

# The kinds that make up a snapshot (PodDisruptionBudgets, Leases and Events do not).
CONVERTED_KINDS = (Kind.NODE, Kind.POD, Kind.PRIORITY_CLASS, Kind.QUEUE, Kind.POD_GROUP, Kind.SCHEDULER_CONFIG,
                   Kind.PERSISTENT_VOLUME_CLAIM, Kind.PERSISTENT_VOLUME, Kind.STORAGE_CLASS, Kind.NAMESPACE,
                   Kind.PROJECT, Kind.RESOURCE_SLICE, Kind.DEVICE_CLASS, Kind.RESOURCE_CLAIM,
                   Kind.RESOURCE_CLAIM_TEMPLATE, Kind.RESOURCE_FLAVOR)  # fmt: skip
# Dynamic Resource Allocation (docs/semantics-notes.md): absent from a cluster without resource.k8s.io/v1.
DRA_KINDS = (Kind.RESOURCE_SLICE, Kind.DEVICE_CLASS, Kind.RESOURCE_CLAIM, Kind.RESOURCE_CLAIM_TEMPLATE)
NOT_OURS = "default-scheduler"
log = logging.getLogger(__name__)


class ConversionError(Exception):
    """An object the loader would refuse, in one line: ``Pod ml/a: metadata.labels...: message``."""


def _describe(kind: Kind, obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    name = str(meta.get("name") or "?")
    if kind.namespaced:
        name = f"{meta.get('namespace') or 'default'}/{name}"
    return f"{kind.kind} {name}"


def convert_object(kind: Kind, obj: Mapping[str, Any]) -> Any:
    """The domain object for ``obj`` of ``kind``, read exactly as ``gpufleet replay`` reads it.

    List items from the API server carry no apiVersion/kind: ``kind`` says what they are."""
    reader = reader_for(kind.api_version, kind.kind)
    if reader is None:  # pragma: no cover - CONVERTED_KINDS are all readable
        raise ConversionError(f"{kind.kind}: not a kind gpufleet reads")
    try:
        return reader(dict(obj))
    except FieldError as err:
        if kind is Kind.POD_GROUP and err.path == _PLACEMENT:
            return _default_placement(obj, f"{_describe(kind, obj)}: {err.path}: {err.message}")
        where = f"{err.path}: " if err.path else ""
        raise ConversionError(f"{_describe(kind, obj)}: {where}{err.message}") from None
    except Exception as err:  # the loader's safety net: never let a bad object stop the controller
        raise ConversionError(f"{_describe(kind, obj)}: invalid object ({type(err).__name__}: {err})") from None


_PLACEMENT = "spec.placement"


def _default_placement(obj: Mapping[str, Any], problem: str) -> Any:
    """A PodGroup whose ``spec.placement`` is unreadable (its CRD's enum refuses one: only an object
    written past the schema gets here), read without it: the SchedulerConfig's strategy, and a
    warning. A strategy gains a gang no capacity, so its pods are not held back for it."""
    log.warning("%s; the SchedulerConfig's placement is used", problem)
    spec = obj.get("spec")
    assert isinstance(spec, Mapping)  # the error was about one of its fields
    return convert_object(Kind.POD_GROUP, {**obj, "spec": {k: v for k, v in spec.items() if k != "placement"}})


def label_selector_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels and matchExpressions) against ``labels``; a missing or
    malformed selector matches nothing (as for a PodDisruptionBudget)."""
    if not isinstance(selector, Mapping):
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, Mapping):
            return False
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        value = labels.get(key) if isinstance(key, str) else None
        if (op == "In" and value not in values) or (op == "NotIn" and present and value in values):
            return False
        if (op == "Exists" and not present) or (op == "DoesNotExist" and present):
            return False
    return True


@dataclass(frozen=True)
class Overlay:
    """What the controller knows that the API server does not show yet."""

    placed: Mapping[PodKey, Binding] = field(default_factory=dict)  # binding in flight or planned
    gone: frozenset[PodKey] = frozenset()  # evicted, still terminating
    # The pod-grouper's pod-group labels given but not yet seen back (kube.controller.grouper).
    grouped: Mapping[PodKey, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SnapshotView:
    """One cycle's input and what was left out of it."""

    snapshot: Snapshot
    pods: Mapping[PodKey, Pod]  # every pod of the snapshot (ours and others'), overlay applied
    groups: Mapping[str, PodGroup]
    queue_of: Mapping[PodKey, str]  # leaf queue of each of our pods in the snapshot
    rejected: Mapping[PodKey, str]  # our pending pods left out, and why
    problems: tuple[str, ...]  # objects that could not be read


def _queue_problem_text(problem: QueueProblem) -> str:
    """The controller's wording of a queue problem (events and status conditions show it)."""
    if isinstance(problem, UnknownQueue):
        return f"queue {problem.queue!r} does not exist"
    if isinstance(problem, NotALeaf):
        return f"queue {problem.queue!r} is not a leaf"
    if isinstance(problem, UnknownParent):
        return f"queue {problem.queue!r} names an unknown parent {problem.parent!r}"
    return "cycle in the queue tree: " + " -> ".join(problem.path)


def _placed(pod: Pod, binding: Binding) -> Pod:
    blocks = binding.gpu_blocks if binding.gpu_blocks is not None else pod.gpu_blocks
    return dataclasses.replace(pod, node_name=NodeName(binding.node), gpu_index=binding.gpus, gpu_blocks=blocks)


_POD_SLOTS = tuple(f.name for f in dataclasses.fields(Pod))
_set = object.__setattr__


def _with_group_label(pod: Pod, group: str) -> Pod:
    """``dataclasses.replace(pod, group_label=group)``, at a third of its cost: the first cycle of a
    pod-grouper relabels every pod that arrived at once (10,000 in the grouping benchmark), and a
    Pod has no ``__post_init__`` for ``replace`` to run (tests/kube/controller/test_convert.py checks
    that the two agree)."""
    new = object.__new__(Pod)
    for name in _POD_SLOTS:
        _set(new, name, getattr(pod, name))
    _set(new, "group_label", group)
    return new


def build_snapshot(
    objects: Mapping[Kind, Iterable[Any]],
    overlay: Overlay | None = None,
    problems: Iterable[str] = (),
    now: float | None = None,
) -> SnapshotView:
    """The engine's input from converted objects (:func:`convert_object`) of every kind.

    Pods of ours whose queue is unusable are left out while pending (``rejected``) and, when
    bound, kept as capacity held outside every queue."""
    overlay = overlay or Overlay()
    nodes: list[Node] = list(objects.get(Kind.NODE, ()))
    queues: list[Queue] = list(objects.get(Kind.QUEUE, ()))
    groups_list: list[PodGroup] = list(objects.get(Kind.POD_GROUP, ()))
    classes: list[PriorityClass] = list(objects.get(Kind.PRIORITY_CLASS, ()))
    configs: list[SchedulerConfig] = list(objects.get(Kind.SCHEDULER_CONFIG, ()))
    namespaces: list[Namespace] = list(objects.get(Kind.NAMESPACE, ()))
    config = configs[0] if configs else SchedulerConfig()
    if now is not None:  # the controller's clock is the snapshot's time (docs/semantics.md)
        config = dataclasses.replace(config, now=now)
    extra_problems: list[str] = []
    projects: list[Project] = sorted(objects.get(Kind.PROJECT, ()), key=lambda p: p.name)
    default_queue = _default_queues(projects, namespaces, config.default_queue)
    groups: dict[str, PodGroup] = {str(g.key): g for g in groups_list}
    tree = QueueTree.of(queues)
    broken = tree.broken
    out_problems = list(problems) + extra_problems
    if broken:
        out_problems.extend(f"Queue {name}: {_queue_problem_text(why)}" for name, why in sorted(broken.items()))
    flavors: list[ResourceFlavor] = sorted(objects.get(Kind.RESOURCE_FLAVOR, ()), key=lambda f: f.name)
    if flavors or any(q.flavors for q in queues):  # the engine leaves such flavors out (docs/semantics.md)
        out_problems.extend(f"{p.kind} {p.name}: {p.path}: {p.message}: unusable"
                            for p in flavor_problems(flavors, queues, nodes))

    pods: dict[PodKey, Pod] = {}
    queue_of: dict[PodKey, str] = {}
    rejected: dict[PodKey, str] = {}
    for pod in objects.get(Kind.POD, ()):
        key = pod.key
        if key in overlay.gone:
            continue
        if overlay.grouped and key in overlay.grouped and pod.group_label is None:
            pod = _with_group_label(pod, overlay.grouped[key])
        placed = overlay.placed.get(key)
        if placed is not None and pod.node_name is None:
            pod = _placed(pod, placed)
        if pod.ours and not pod.finished:
            fallback = default_queue(pod.namespace)
            queue = resolve_queue(pod, pod_group_of(pod, groups), fallback)
            problem = tree.use_problem(queue, fallback)
            if problem is not None:
                if pod.node_name is None:
                    rejected[key] = _queue_problem_text(problem)
                    continue
                pod = dataclasses.replace(pod, scheduler_name=NOT_OURS)  # holds capacity, in no queue
            else:
                queue_of[key] = queue
        pods[key] = pod
    snapshot = Snapshot(
        nodes=tuple(nodes),
        pods=tuple(pods.values()),
        priority_classes=tuple(classes),
        queues=tuple(q for q in queues if q.name not in broken),
        pod_groups=tuple(groups_list),
        config=config,
        claims=tuple(objects.get(Kind.PERSISTENT_VOLUME_CLAIM, ())),
        volumes=tuple(objects.get(Kind.PERSISTENT_VOLUME, ())),
        storage_classes=tuple(objects.get(Kind.STORAGE_CLASS, ())),
        namespaces=tuple(namespaces),
        resource_slices=tuple(objects.get(Kind.RESOURCE_SLICE, ())),
        device_classes=tuple(objects.get(Kind.DEVICE_CLASS, ())),
        resource_claims=tuple(objects.get(Kind.RESOURCE_CLAIM, ())),
        claim_templates=tuple(objects.get(Kind.RESOURCE_CLAIM_TEMPLATE, ())),
    )
    snapshot = _with_chosen_volumes(snapshot, [b for b in overlay.placed.values() if b.volumes])
    snapshot = _with_allocated_claims(snapshot, [b for b in overlay.placed.values() if b.devices])
    if projects:  # a cluster without Projects: the snapshot it always had
        snapshot = dataclasses.replace(snapshot, projects=tuple(projects))
    if flavors:
        snapshot = dataclasses.replace(snapshot, flavors=tuple(flavors))
    return SnapshotView(snapshot, pods, groups, queue_of, rejected, tuple(out_problems))


def _default_queues(projects: list[Project], namespaces: list[Namespace],
                    default: QueueName) -> Callable[[str], QueueName]:
    """namespace -> the queue of its pods that name none: its Project's defaultQueue, else
    ``default`` (the engine's rule, docs/semantics-notes.md "Projects")."""
    if not any(p.default_queue for p in projects):
        return lambda _namespace: default
    index = ProjectIndex.build(projects, namespace_labels(namespaces))
    return lambda namespace: queue_for(index.project_of(namespace), default)


def _with_chosen_volumes(snapshot: Snapshot, placed: list[Binding]) -> Snapshot:
    """``snapshot`` with the volumes that pods held in place (in flight, planned) chose written as
    the API server will soon show them: a chosen PV's claimRef names its claim, a claim to
    provision has its selected node. Other pods naming those claims are then restricted as by a
    bound claim, and no other claim is offered those PVs (docs/semantics-notes.md, "Volumes")."""
    if not placed:
        return snapshot
    pv_claims: dict[str, str] = {}
    selected: dict[str, NodeName] = {}
    for binding in placed:
        namespace = str(binding.pod).partition("/")[0]
        for chosen in binding.volumes:
            if chosen.volume is not None:
                pv_claims.setdefault(chosen.volume, f"{namespace}/{chosen.claim}")
            else:
                selected.setdefault(f"{namespace}/{chosen.claim}", NodeName(binding.node))
    volumes = tuple(
        dataclasses.replace(pv, claim=pv_claims[pv.name]) if pv.claim is None and pv.name in pv_claims else pv
        for pv in snapshot.volumes
    )
    claims = tuple(
        dataclasses.replace(c, selected_node=selected[c.key]) if c.selected_node is None and c.key in selected else c
        for c in snapshot.claims
    )
    return dataclasses.replace(snapshot, claims=claims, volumes=volumes)


def _with_allocated_claims(snapshot: Snapshot, placed: list[Binding]) -> Snapshot:
    """``snapshot`` with the DRA claims that pods held in place (in flight, planned) allocate written
    as the API server will soon show them (the allocation, its node, the pod in reservedFor): their
    devices are then held by those pods, as after the writes (docs/semantics-notes.md, "Held devices")."""
    if not placed:
        return snapshot
    allocating: dict[str, tuple[Binding, ClaimAllocation]] = {}  # claim -> the binding that allocates it
    joining: dict[str, list[str]] = {}  # claim -> the pods it is to be reserved for
    for binding in placed:
        namespace, _, pod_name = str(binding.pod).partition("/")
        for allocation in binding.devices:
            key = f"{namespace}/{allocation.claim}"
            if not allocation.shared:
                allocating.setdefault(key, (binding, allocation))
            joining.setdefault(key, []).append(pod_name)
    claims: list[ResourceClaim] = []
    for claim in snapshot.resource_claims:
        names = joining.get(claim.key)
        if names is None:
            claims.append(claim)
            continue
        reserved = list(claim.reserved_for)
        hit = allocating.get(claim.key)
        if hit is not None:  # a new allocation: its pod is the first to hold it
            binding, allocation = hit
            claim = dataclasses.replace(claim, allocation=allocation.results, allocated_node=NodeName(binding.node))
            reserved = []
        for name in names:
            if name not in reserved:
                reserved.append(name)
        claims.append(dataclasses.replace(claim, reserved_for=tuple(reserved)))
    return dataclasses.replace(snapshot, resource_claims=tuple(claims))


def check_snapshot(view: SnapshotView) -> str | None:
    """The replay loader's cross-object checks as a last safety net: None, or the problem."""
    try:
        validate_snapshot(view.snapshot, "cluster", projects=False, flavors=False)
    except InputError as err:
        return str(err)
    return None


# ------------------------------------------------------------------------ change relevance


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if obj is None:
        return {}
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _ours(annotations: Any) -> dict[str, Any]:
    if not isinstance(annotations, Mapping):
        return {}
    return {k: v for k, v in annotations.items() if isinstance(k, str) and k.startswith(LABEL_PREFIX)}


def _annotation(meta: Mapping[str, Any], key: str) -> Any:
    annotations = meta.get("annotations")
    return annotations.get(key) if isinstance(annotations, Mapping) else None


def _projection(kind: Kind, obj: Mapping[str, Any] | None) -> Any:
    """The part of an object a scheduling decision can depend on."""
    if obj is None:
        return None
    meta = _meta(obj)
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    assert isinstance(spec, Mapping) and isinstance(status, Mapping)
    if kind is Kind.POD:
        return (
            wanted_pod(obj), spec.get("nodeName"), status.get("phase"), status.get("startTime"),
            meta.get("labels"), _ours(meta.get("annotations")), meta.get("deletionTimestamp"),
            spec.get("schedulingGates"), spec.get("resourceClaims"), status.get("resourceClaimStatuses"),
        )
    if kind is Kind.NODE:
        return (
            meta.get("labels"), _ours(meta.get("annotations")), spec.get("unschedulable"), spec.get("taints"),
            status.get("allocatable"),
        )
    if kind in (Kind.QUEUE, Kind.POD_GROUP, Kind.SCHEDULER_CONFIG, Kind.PROJECT, Kind.RESOURCE_FLAVOR):
        return (meta.get("labels"), spec)  # status is ours: writing it must not start a cycle
    if kind is Kind.NAMESPACE:
        return meta.get("labels")  # what Project namespace selectors and namespaceSelectors read
    if kind is Kind.PRIORITY_CLASS:
        return (obj.get("value"), obj.get("globalDefault"))
    if kind is Kind.PERSISTENT_VOLUME_CLAIM:
        return (spec, meta.get("deletionTimestamp"), _annotation(meta, ANNOTATION_SELECTED_NODE))
    if kind is Kind.PERSISTENT_VOLUME:
        return (meta.get("labels"), spec, status.get("phase"))
    if kind is Kind.STORAGE_CLASS:
        return (_annotation(meta, ANNOTATION_DEFAULT_CLASS), meta.get("creationTimestamp"), obj.get("provisioner"),
                obj.get("volumeBindingMode"), obj.get("allowedTopologies"))
    if kind in (Kind.RESOURCE_SLICE, Kind.DEVICE_CLASS, Kind.RESOURCE_CLAIM_TEMPLATE):
        return spec
    if kind is Kind.RESOURCE_CLAIM:  # its allocation and reservations decide what its devices hold
        return (spec, status.get("allocation"), status.get("reservedFor"), meta.get("deletionTimestamp"))
    return None  # PodDisruptionBudgets: read for messages only


def relevant_change(kind: Kind, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """Whether a change of an object may change a scheduling decision (and so needs a cycle).

    Node heartbeats, status writes of our own resources and pods of other schedulers that are
    not on a node do not."""
    if kind not in CONVERTED_KINDS:
        return False
    before, after = _projection(kind, old), _projection(kind, new)
    if kind is Kind.POD and not (before and before[0]) and not (after and after[0]):
        return False  # a pod no snapshot holds, before or after
    return bool(before != after)
