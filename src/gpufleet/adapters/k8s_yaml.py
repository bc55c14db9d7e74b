"""Read a cluster snapshot (Kubernetes YAML or JSON) into a :class:`~gpufleet.domain.Snapshot`.

Accepts what ``kubectl get nodes,pods,priorityclasses,queues,podgroups -A -o yaml`` (or ``-o json``)
prints: any number of YAML documents, each an object or a ``kind: List`` of ``items``; or JSON, one
object (often a ``List``), an array of objects or several JSON values one after another. JSON is
read for a ``.json`` file, or one whose first character is ``{`` or ``[`` (:mod:`._input`). Objects read: v1 Node,
v1 Pod, v1 Namespace, v1 PersistentVolumeClaim and PersistentVolume, storage.k8s.io/v1 StorageClass,
scheduling.k8s.io PriorityClass, resource.k8s.io/v1 ResourceSlice, DeviceClass, ResourceClaim and
ResourceClaimTemplate, gpufleet.dev/v1alpha1 Queue, PodGroup and SchedulerConfig;
other kinds are skipped. Every problem is reported as one :class:`InputError` line naming the
file, the document (1-based), the object and the field::

    snap.yaml: document 7 (Queue team-a): spec.resources.nvidia.com/gpu.quota: negative quantity "-1"
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpufleet.adapters._fields import FieldError
from gpufleet.adapters._input import parse_input
from gpufleet.adapters._k8s_core import (
    claim_from_dict,
    namespace_from_dict,
    node_from_dict,
    persistent_volume_from_dict,
    pod_from_dict,
    priority_class_from_dict,
    storage_class_from_dict,
)
from gpufleet.adapters._k8s_dra import (
    DRA_API_VERSION,
    claim_template_from_dict,
    device_class_from_dict,
    resource_claim_from_dict,
    resource_slice_from_dict,
)
from gpufleet.adapters._k8s_models import (
    pod_group_from_dict,
    project_from_dict,
    queue_from_dict,
    resource_flavor_from_dict,
    scheduler_config_from_dict,
)
from gpufleet.adapters.errors import InputError, describe
from gpufleet.domain import API_GROUP as GPUFLEET_GROUP
from gpufleet.domain import API_VERSION as GPUFLEET_VERSION
from gpufleet.domain import (
    LABEL_QUEUE,
    ClaimTemplate,
    Pod,
    PodGroup,
    Project,
    QueueName,
    ResourceClaim,
    SchedulerConfig,
    Snapshot,
    VolumeClaim,
)
from gpufleet.domain.flavors import flavor_problem
from gpufleet.domain.queues import (
    NotALeaf,
    QueueCycle,
    QueueSource,
    QueueTree,
    UnknownParent,
    UnknownQueue,
    pod_group_of,
    queue_source,
    resolve_queue,
)
from gpufleet.domain.selectors import namespace_labels
from gpufleet.policy import ProjectIndex, namespace_problem, queue_for

__all__ = [
    "InputError",
    "Locations",
    "load_config_file",
    "load_config_text",
    "load_snapshot_documents",
    "load_snapshot_file",
    "load_snapshot_text",
    "reader_for",
    "validate_snapshot",
]

_OUR_KINDS = ("Queue", "PodGroup", "SchedulerConfig", "Project", "ResourceFlavor")

# (kind, name) -> where each object of that kind and name was read ("document 4",
# "document 1, item 3"), in input order; names of namespaced objects are "namespace/name".
Locations = Mapping[tuple[str, str], list[str]]


# ------------------------------------------------------------------------------------ parsing


def _iter_objects(docs: list[Any], source: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, object) for every object, ``kind: List`` expanded; empty documents skipped."""
    for index, doc in enumerate(docs, 1):
        if doc is None:
            continue
        yield from _expand(doc, f"document {index}", source)


def _expand(obj: Any, where: str, source: str, depth: int = 0) -> Iterator[tuple[str, dict[str, Any]]]:
    if not isinstance(obj, dict):
        raise InputError(f"{source}: {where}: expected a Kubernetes object (a mapping), got {describe(obj)}")
    if obj.get("kind") == "List" and depth < 8:
        items = obj.get("items")
        if items is None:
            return
        if not isinstance(items, list):
            raise InputError(f"{source}: {where} (List): items: must be a list, got {describe(items)}")
        for i, item in enumerate(items, 1):
            yield from _expand(item, f"{where}, item {i}", source, depth + 1)
        return
    yield where, obj


def _label(kind: str, obj: dict[str, Any]) -> str:
    """ "Pod ml/nb-1" (or just the kind while the name is unreadable), for messages."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return kind
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return kind
    if kind in ("Pod", "PodGroup", "PersistentVolumeClaim", "ResourceClaim", "ResourceClaimTemplate"):
        namespace = meta.get("namespace")
        namespace = namespace if isinstance(namespace, str) and namespace else "default"
        return f"{kind} {namespace}/{name}"
    return f"{kind} {name}"


_CORE_READERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "Node": node_from_dict,
    "Pod": pod_from_dict,
    "PersistentVolumeClaim": claim_from_dict,
    "PersistentVolume": persistent_volume_from_dict,
    "Namespace": namespace_from_dict,
}
# Dynamic Resource Allocation (docs/semantics-notes.md): resource.k8s.io/v1 only.
_DRA_READERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "ResourceSlice": resource_slice_from_dict,
    "DeviceClass": device_class_from_dict,
    "ResourceClaim": resource_claim_from_dict,
    "ResourceClaimTemplate": claim_template_from_dict,
}


def reader_for(api_version: str, kind: str) -> Callable[[dict[str, Any]], Any] | None:
    """The converter for a known (apiVersion, kind), None for kinds gpufleet does not read.

    Raises FieldError for one of gpufleet's own kinds at an unsupported version."""
    group, _, version = api_version.rpartition("/")
    if group == "" and version == "v1":
        return _CORE_READERS.get(kind)
    if api_version == DRA_API_VERSION:
        return _DRA_READERS.get(kind)
    if group == "scheduling.k8s.io" and kind == "PriorityClass":
        return priority_class_from_dict
    if group == "storage.k8s.io" and version == "v1" and kind == "StorageClass":
        return storage_class_from_dict
    if group == GPUFLEET_GROUP:
        if kind not in _OUR_KINDS:
            raise FieldError(
                "kind",
                f"unknown kind {describe(kind)} in {GPUFLEET_GROUP} (expected one of {', '.join(_OUR_KINDS)})",
            )
        if version != GPUFLEET_VERSION:
            raise FieldError(
                "apiVersion",
                f"unsupported version {describe(api_version)} (expected {GPUFLEET_GROUP}/{GPUFLEET_VERSION})",
            )
        return {
            "Queue": queue_from_dict,
            "PodGroup": pod_group_from_dict,
            "SchedulerConfig": scheduler_config_from_dict,
            "Project": project_from_dict,
            "ResourceFlavor": resource_flavor_from_dict,
        }[kind]
    return None


def _read_objects(docs: list[Any], source: str) -> tuple[dict[str, list[Any]], dict[tuple[str, str], list[str]]]:
    """Domain objects by kind, in input order, and where each was read."""
    by_kind: dict[str, list[Any]] = {
        "Node": [],
        "Pod": [],
        "PriorityClass": [],
        "Queue": [],
        "PodGroup": [],
        "SchedulerConfig": [],
        "PersistentVolumeClaim": [],
        "PersistentVolume": [],
        "StorageClass": [],
        "Project": [],
        "ResourceFlavor": [],
        "Namespace": [],
        **{kind: [] for kind in _DRA_READERS},
    }
    locations: dict[tuple[str, str], list[str]] = {}
    for where, obj in _iter_objects(docs, source):
        kind = obj.get("kind")
        api_version = obj.get("apiVersion")
        label = f"{where} ({kind})" if isinstance(kind, str) and kind else where
        if kind is None or kind == "":
            raise InputError(f"{source}: {where}: kind: required field missing")
        if not isinstance(kind, str):
            raise InputError(f"{source}: {where}: kind: must be a string, got {describe(kind)}")
        if api_version is None or api_version == "":
            raise InputError(f"{source}: {label}: apiVersion: required field missing")
        if not isinstance(api_version, str):
            raise InputError(f"{source}: {label}: apiVersion: must be a string, got {describe(api_version)}")
        label = f"{where} ({_label(kind, obj)})"
        try:
            reader = reader_for(api_version, kind)
            if reader is None:
                continue
            value = reader(obj)
        except FieldError as err:
            raise InputError(
                f"{source}: {label}: {err.path}: {err.message}" if err.path else f"{source}: {label}: {err.message}"
            ) from None
        except InputError:
            raise
        except Exception as err:  # a safety net: never let anything else out
            raise InputError(f"{source}: {label}: invalid object ({type(err).__name__}: {err})") from None
        by_kind[kind].append(value)
        locations.setdefault((kind, _key(value)), []).append(where)
    return by_kind, locations


def _key(value: Any) -> str:
    if isinstance(value, Pod | PodGroup | VolumeClaim | ResourceClaim | ClaimTemplate):
        return f"{value.namespace}/{value.name}"
    if isinstance(value, SchedulerConfig):
        return ""
    name: str = value.name
    return name


def _check_single_config(
    configs: list[SchedulerConfig], locations: dict[tuple[str, str], list[str]], source: str
) -> None:
    if len(configs) > 1:
        where = locations[("SchedulerConfig", "")]
        raise InputError(
            f"{source}: {where[1]} (SchedulerConfig): a second SchedulerConfig "
            f"(the first is in {where[0]}); there may be only one"
        )


def _snapshot(docs: list[Any], source: str) -> tuple[Snapshot, dict[tuple[str, str], list[str]]]:
    by_kind, locations = _read_objects(docs, source)
    configs: list[SchedulerConfig] = by_kind["SchedulerConfig"]
    _check_single_config(configs, locations, source)
    snapshot = Snapshot(
        nodes=tuple(by_kind["Node"]),
        pods=tuple(by_kind["Pod"]),
        priority_classes=tuple(by_kind["PriorityClass"]),
        queues=tuple(by_kind["Queue"]),
        pod_groups=tuple(by_kind["PodGroup"]),
        config=configs[0] if configs else SchedulerConfig(),
        claims=tuple(by_kind["PersistentVolumeClaim"]),
        volumes=tuple(by_kind["PersistentVolume"]),
        storage_classes=tuple(by_kind["StorageClass"]),
        namespaces=tuple(by_kind["Namespace"]),
        projects=tuple(by_kind["Project"]),
        resource_slices=tuple(by_kind["ResourceSlice"]),
        device_classes=tuple(by_kind["DeviceClass"]),
        resource_claims=tuple(by_kind["ResourceClaim"]),
        claim_templates=tuple(by_kind["ResourceClaimTemplate"]),
        flavors=tuple(by_kind["ResourceFlavor"]),
    )
    return snapshot, locations


# --------------------------------------------------------------------------------- public API


def load_snapshot_text(text: str, source: str, *, config: SchedulerConfig | None = None,
                       json: bool | None = None) -> Snapshot:
    """Parse and validate a snapshot. ``source`` names the input in error messages.

    ``config`` (from ``--config``) replaces a SchedulerConfig found in the snapshot; without
    either, the defaults apply. ``json`` True or False says which format the text is in; None
    (the default) tells by ``source``'s extension and the text's first character. Raises
    :class:`InputError` on any invalid input.
    """
    # A snapshot is hundreds of thousands of small dicts, strings and frozen dataclasses, none in a
    # cycle: the cyclic collector's repeated passes over them were two fifths of loading 16,000
    # objects. Paused while they are built (as the engine pauses it for a call); reference
    # counting still frees what dies.
    paused = gc.isenabled()
    gc.disable()
    try:
        snapshot, locations = _snapshot(parse_input(text, source, json=json), source)
    finally:
        if paused:
            gc.enable()
    if config is not None:
        snapshot = dataclasses.replace(snapshot, config=config)
    validate_snapshot(snapshot, source, locations=locations)
    return snapshot


def load_snapshot_documents(documents: Sequence[Mapping[str, Any]], source: str) -> Snapshot:
    """:func:`load_snapshot_text` of objects already parsed (as an API client hands them over):
    the same converters, checks and messages, without a trip through YAML text. "document N" in
    messages is the object's position in ``documents``, from 1."""
    snapshot, locations = _snapshot([dict(doc) for doc in documents], source)
    validate_snapshot(snapshot, source, locations=locations)
    return snapshot


def _read_text(path: str | Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror or err}") from None


def load_snapshot_file(path: str | Path, *, config: SchedulerConfig | None = None) -> Snapshot:
    """:func:`load_snapshot_text` on a file; messages name the file as given."""
    return load_snapshot_text(_read_text(path), str(path), config=config)


def load_objects_file(path: str | Path) -> list[dict[str, Any]]:
    """The objects of a snapshot file as parsed, ``kind: List`` expanded, for what the domain does
    not keep (a PodGroup's ownerReferences: the workload ``gpufleet explain`` names)."""
    source = str(path)
    return [obj for _, obj in _iter_objects(parse_input(_read_text(path), source), source)]


def load_config_text(text: str, source: str) -> SchedulerConfig:
    """The one SchedulerConfig among the documents of ``text``, YAML or JSON (other kinds are read and
    ignored)."""
    by_kind, locations = _read_objects(parse_input(text, source), source)
    configs: list[SchedulerConfig] = by_kind["SchedulerConfig"]
    if not configs:
        raise InputError(f"{source}: no SchedulerConfig document found")
    _check_single_config(configs, locations, source)
    return configs[0]


def load_config_file(path: str | Path) -> SchedulerConfig:
    """Read a file holding one SchedulerConfig document (as ``--config`` gives)."""
    return load_config_text(_read_text(path), str(path))


# ------------------------------------------------------------------------- cross-object checks


def validate_snapshot(snapshot: Snapshot, source: str, *, locations: Locations | None = None,
                      projects: bool = True, flavors: bool = True) -> None:
    """Checks that span objects; raises :class:`InputError` for the first problem found.

    - no two objects of one kind share a name (namespace/name for pods and pod groups);
    - every queue's parent exists and the queues form a forest (no cycle);
    - every pod of gpufleet's that is pending or bound lands in an existing leaf queue, whether
      named by its ``gpufleet.dev/queue`` label or by its PodGroup's ``spec.queue``. The
      SchedulerConfig's default queue may be missing (the engine then creates it), but when it
      exists and a pod falls back to it, it must be a leaf;
    - at most one PriorityClass is the global default;
    - (``flavors``) every flavor a Queue lists is a ResourceFlavor, listed once, and no node is of two
      flavors. The controller leaves this out: it reports them and the engine leaves them out;
    - (``projects``) every queue a Project lists exists and is a leaf, and no namespace is claimed
      by two Projects. The controller leaves these out: a live cluster reports such Projects on
      their status and keeps their pods pending, and goes on scheduling everything else.

    A PodGroup with fewer pods than its ``minMember`` is valid (it stays pending). ``locations``
    (from the loader) lets messages name the document of each object.
    """
    _Validator(snapshot, source, locations or {}, projects, flavors).run()


class _Validator:
    def __init__(self, snapshot: Snapshot, source: str, locations: Locations, projects: bool = True,
                 flavors: bool = True) -> None:
        self.snapshot = snapshot
        self.check_flavor_objects = flavors
        self.check_project_objects = projects
        self.source = source
        self.locations = locations
        self.tree = QueueTree.of(snapshot.queues)
        self.default_queue: QueueName = snapshot.config.default_queue
        self.projects = ProjectIndex.build(
            snapshot.projects, namespace_labels(snapshot.namespaces), {p.namespace for p in snapshot.pods}
        ) if snapshot.projects else ProjectIndex()

    def fail(self, kind: str, name: str, path: str, message: str, occurrence: int = 0) -> InputError:
        entries = self.locations.get((kind, name)) or []
        label = f"{kind} {name}"
        where = f"{entries[occurrence]} ({label})" if len(entries) > occurrence else label
        return InputError(f"{self.source}: {where}: {path}: {message}")

    def run(self) -> None:
        self.check_duplicates()
        self.check_queue_tree()
        if self.check_flavor_objects:
            self.check_flavors()
        if self.check_project_objects:
            self.check_projects()
        self.check_pod_queues()
        self.check_priority_classes()

    def check_duplicates(self) -> None:
        s = self.snapshot
        groups: tuple[tuple[str, list[str]], ...] = (
            ("Node", [n.name for n in s.nodes]),
            ("PriorityClass", [c.name for c in s.priority_classes]),
            ("Queue", [q.name for q in s.queues]),
            ("PodGroup", [g.key for g in s.pod_groups]),
            ("Pod", [p.key for p in s.pods]),
            ("PersistentVolumeClaim", [c.key for c in s.claims]),
            ("PersistentVolume", [v.name for v in s.volumes]),
            ("StorageClass", [c.name for c in s.storage_classes]),
            ("Namespace", [ns.name for ns in s.namespaces]),
            ("Project", [p.name for p in s.projects]),
            ("ResourceFlavor", [f.name for f in s.flavors]),
            ("ResourceSlice", [r.name for r in s.resource_slices]),
            ("DeviceClass", [c.name for c in s.device_classes]),
            ("ResourceClaim", [c.key for c in s.resource_claims]),
            ("ResourceClaimTemplate", [f"{t.namespace}/{t.name}" for t in s.claim_templates]),
        )
        for kind, names in groups:
            seen: set[str] = set()
            for name in names:
                if name in seen:
                    entries = self.locations.get((kind, name)) or []
                    first = f" (first in {entries[0]})" if entries else ""
                    raise self.fail(kind, name, "metadata.name", f"duplicate {kind} {name}{first}", occurrence=1)
                seen.add(name)

    def check_queue_tree(self) -> None:
        broken = self.tree.broken.items()
        for name, problem in broken:  # a queue's own unknown parent first, in the order given
            if isinstance(problem, UnknownParent) and problem.queue == name:
                raise self.fail("Queue", name, "spec.parent", f"unknown queue {describe(problem.parent)}")
        for _, problem in broken:
            if isinstance(problem, QueueCycle):
                loop = problem.loop
                raise self.fail("Queue", loop[0], "spec.parent", "cycle in the queue tree: " + " -> ".join(loop))

    def check_flavors(self) -> None:
        """Queue flavors name ResourceFlavors, each once; no node is of two flavors."""
        s = self.snapshot
        problem = flavor_problem(s.flavors, s.queues, s.nodes)
        if problem is not None:
            raise self.fail(problem.kind, problem.name, problem.path, problem.message)

    def queue_problem(self, name: QueueName) -> str | None:
        """Why pods may not go to queue ``name`` (None: they may), in the loader's words."""
        problem = self.tree.use_problem(name, self.default_queue)
        if isinstance(problem, UnknownQueue):
            return f"unknown queue {describe(problem.queue)}"
        if isinstance(problem, NotALeaf):
            return f"queue {describe(problem.queue)} is not a leaf (it is the parent of {describe(problem.child)})"
        return None  # the tree itself was checked first: no broken ancestry is left here

    def check_projects(self) -> None:
        """Every queue a Project lists may take pods (it exists and is a leaf); no namespace is
        claimed by two Projects (named by the last of them, in name order)."""
        for project in self.snapshot.projects:
            for i, name in enumerate(project.queues):
                problem = self.queue_problem(name)
                if problem is not None:
                    raise self.fail("Project", project.name, f"spec.queues[{i}]", problem)
        for namespace, claimants in sorted(self.projects.conflicts.items()):
            raise self.fail("Project", claimants[-1], "spec.namespaces",
                            namespace_problem(self.projects, namespace, False) or "")

    def default_queue_of(self, namespace: str) -> QueueName:
        """The queue of a pod of ``namespace`` that names none: its Project's, else the config's."""
        if self.projects.empty:
            return self.default_queue
        project: Project | None = self.projects.project_of(namespace)
        return queue_for(project, self.default_queue)

    def check_pod_queues(self) -> None:
        groups: dict[str, PodGroup] = {g.key: g for g in self.snapshot.pod_groups}
        checked_groups: set[str] = set()
        for pod in self.snapshot.pods:
            if not pod.ours or pod.finished:
                continue
            group = pod_group_of(pod, groups)
            source = queue_source(pod, group)
            queue = resolve_queue(pod, group, self.default_queue_of(pod.namespace))
            if source is QueueSource.LABEL:
                problem = self.queue_problem(queue)
                if problem is not None:
                    raise self.fail("Pod", pod.key, f"metadata.labels.{LABEL_QUEUE}", problem)
            elif source is QueueSource.POD_GROUP:
                assert group is not None
                if group.key not in checked_groups:
                    checked_groups.add(group.key)
                    problem = self.queue_problem(queue)
                    if problem is not None:
                        raise self.fail("PodGroup", group.key, "spec.queue", problem)
            else:
                problem = self.queue_problem(queue)
                if problem is not None:
                    raise self.fail(
                        "Pod",
                        pod.key,
                        f"metadata.labels.{LABEL_QUEUE}",
                        f"no queue given, and the default queue: {problem}",
                    )

    def check_priority_classes(self) -> None:
        first: str | None = None
        for priority_class in self.snapshot.priority_classes:
            if not priority_class.global_default:
                continue
            if first is not None:
                raise self.fail(
                    "PriorityClass",
                    priority_class.name,
                    "globalDefault",
                    f"only one PriorityClass may be the global default ({describe(first)} is too)",
                )
            first = priority_class.name
