"""A live cluster's state as a replay snapshot (the multi-document YAML ``gpufleet replay`` reads).

What is read: Nodes, PriorityClasses, gpufleet's Queues, PodGroups and SchedulerConfig, and the
Pods that matter to a scheduling pass: gpufleet's pending pods, and every pod bound to a node that
has not finished (those hold capacity, whoever scheduled them). Each object is cut down to the
fields the loader reads (:mod:`gpufleet.adapters.k8s_yaml`), so ``managedFields``, statuses,
``kubectl``'s last-applied copies and other annotations that are not gpufleet's do not bloat the
file. Objects are sorted by kind and name, so two snapshots of the same state are byte-identical.

The API is reached through the small :class:`ClusterReader` protocol: :class:`LightkubeCluster`
talks to a real API server, tests use an in-memory fake.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

import yaml

from gpufleet.domain import API_GROUP_VERSION, LABEL_PREFIX, SCHEDULER_NAME

__all__ = [
    "ClusterAccessError",
    "ClusterReader",
    "ClusterSnapshot",
    "ObjectKind",
    "ResourceNotServed",
    "read_cluster",
    "strip_object",
    "wanted_pod",
]

FINISHED_PHASES = ("Succeeded", "Failed")


class ObjectKind(Enum):
    """The kinds a snapshot holds, in the order they are written: (apiVersion, kind, plural, namespaced)."""

    SCHEDULER_CONFIG = (API_GROUP_VERSION, "SchedulerConfig", "schedulerconfigs", False)
    PRIORITY_CLASS = ("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", False)
    QUEUE = (API_GROUP_VERSION, "Queue", "queues", False)
    NODE = ("v1", "Node", "nodes", False)
    POD_GROUP = (API_GROUP_VERSION, "PodGroup", "podgroups", True)
    POD = ("v1", "Pod", "pods", True)

    @property
    def api_version(self) -> str:
        return self.value[0]

    @property
    def kind(self) -> str:
        return self.value[1]

    @property
    def plural(self) -> str:
        return self.value[2]

    @property
    def namespaced(self) -> bool:
        return self.value[3]


class ClusterAccessError(Exception):
    """The cluster cannot be read, in one line. ``exit_code`` 2: the user's input is wrong (a bad
    kubeconfig path, a pod that does not exist); 1: the cluster or the network failed."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        line = " ".join(part.strip() for part in message.splitlines() if part.strip())
        super().__init__(line)
        self.exit_code = exit_code


class ResourceNotServed(Exception):
    """The API server does not serve this kind (gpufleet's CRDs are not installed)."""


class ClusterReader(Protocol):
    """Read access to the Kubernetes API, as much as snapshots and explanations need."""

    @property
    def default_namespace(self) -> str:
        """The namespace of the current context (what ``kubectl`` uses without ``-n``)."""
        ...

    def list_objects(self, kind: ObjectKind) -> Iterable[Mapping[str, Any]]:
        """All objects of ``kind`` in all namespaces, as plain JSON-like dicts.

        Raises :class:`ResourceNotServed` or :class:`ClusterAccessError`."""
        ...

    def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """One pod (None when it does not exist); raises :class:`ClusterAccessError`."""
        ...


# --------------------------------------------------------------------------------- stripping


def _canonical(value: Any) -> Any:
    """``value`` with every mapping's keys sorted: clients and API servers order fields differently,
    and a snapshot should not change when only the order did."""
    if isinstance(value, Mapping):
        return {key: _canonical(value[key]) for key in sorted(value, key=str)}
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return value


def _pick(source: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """The ``keys`` of ``source`` that are set, in the order of ``keys``, their values canonical."""
    return {key: _canonical(source[key]) for key in keys if source.get(key) is not None}


def _metadata(obj: Mapping[str, Any], namespaced: bool, timestamps: bool = False) -> dict[str, Any]:
    raw = obj.get("metadata")
    meta: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    out = _pick(meta, ("name", "namespace") if namespaced else ("name",))
    labels = meta.get("labels")
    if isinstance(labels, Mapping) and labels:
        out["labels"] = _canonical(labels)
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping):
        ours = {k: v for k, v in annotations.items() if isinstance(k, str) and k.startswith(LABEL_PREFIX)}
        if ours:
            out["annotations"] = _canonical(ours)
    if timestamps and meta.get("creationTimestamp") is not None:
        out["creationTimestamp"] = meta["creationTimestamp"]
    return out


_CONTAINER_FIELDS = ("name", "resources", "restartPolicy")
_POD_SPEC_FIELDS = (
    "schedulerName", "priority", "priorityClassName", "nodeName", "nodeSelector", "tolerations", "overhead",
)


def _containers(value: object) -> list[Any]:
    if not isinstance(value, list):
        return []
    return [_pick(c, _CONTAINER_FIELDS) if isinstance(c, Mapping) else c for c in value]


def _pod(obj: Mapping[str, Any]) -> dict[str, Any]:
    raw_spec = obj.get("spec")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    out_spec: dict[str, Any] = {"containers": _containers(spec.get("containers"))}
    if spec.get("initContainers"):
        out_spec["initContainers"] = _containers(spec.get("initContainers"))
    out_spec.update(_pick(spec, _POD_SPEC_FIELDS))
    affinity = spec.get("affinity")
    if isinstance(affinity, Mapping):
        node_affinity = affinity.get("nodeAffinity")
        required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") \
            if isinstance(node_affinity, Mapping) else None
        if required is not None:
            out_spec["affinity"] = {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": _canonical(required)}
            }
    raw_status = obj.get("status")
    status = _pick(raw_status, ("phase", "startTime")) if isinstance(raw_status, Mapping) else {}
    doc: dict[str, Any] = {"metadata": _metadata(obj, namespaced=True, timestamps=True), "spec": out_spec}
    if status:
        doc["status"] = status
    return doc


def _node(obj: Mapping[str, Any]) -> dict[str, Any]:
    raw_spec = obj.get("spec")
    raw_status = obj.get("status")
    return {
        "metadata": _metadata(obj, namespaced=False),
        "spec": _pick(raw_spec, ("unschedulable", "taints")) if isinstance(raw_spec, Mapping) else {},
        "status": _pick(raw_status, ("allocatable", "capacity")) if isinstance(raw_status, Mapping) else {},
    }


def strip_object(kind: ObjectKind, obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` cut down to what the snapshot loader reads, with apiVersion and kind first."""
    head: dict[str, Any] = {"apiVersion": kind.api_version, "kind": kind.kind}
    if kind is ObjectKind.POD:
        return head | _pod(obj)
    if kind is ObjectKind.NODE:
        return head | _node(obj)
    if kind is ObjectKind.PRIORITY_CLASS:
        return head | {"metadata": _metadata(obj, namespaced=False)} | _pick(obj, ("value", "globalDefault"))
    body: dict[str, Any] = {"metadata": _metadata(obj, namespaced=kind.namespaced)}
    if obj.get("spec") is not None:
        body["spec"] = _canonical(obj["spec"])
    return head | body


def wanted_pod(obj: Mapping[str, Any]) -> bool:
    """Pods a scheduling pass needs: gpufleet's pending ones, and all that hold a node."""
    raw_spec = obj.get("spec")
    raw_status = obj.get("status")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    phase = raw_status.get("phase") if isinstance(raw_status, Mapping) else None
    if phase in FINISHED_PHASES:
        return False
    if spec.get("nodeName"):
        return True
    return spec.get("schedulerName") == SCHEDULER_NAME


# --------------------------------------------------------------------------------- snapshot


def _sort_key(doc: Mapping[str, Any]) -> tuple[str, str]:
    meta = doc.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """The stripped objects, in writing order, and lines worth telling the user."""

    documents: tuple[dict[str, Any], ...]
    warnings: tuple[str, ...] = ()

    def to_yaml(self) -> str:
        header = "# A gpufleet snapshot of a live cluster; replay it with: gpufleet replay FILE\n"
        return header + yaml.safe_dump_all(
            self.documents, sort_keys=False, default_flow_style=False, allow_unicode=True, explicit_start=True
        )


def read_cluster(reader: ClusterReader) -> ClusterSnapshot:
    """Read every kind through ``reader`` (see the module docstring). gpufleet's own kinds may be
    missing (CRDs not installed): the snapshot goes on without them and says so."""
    documents: list[dict[str, Any]] = []
    warnings: list[str] = []
    for kind in ObjectKind:
        try:
            objects = list(reader.list_objects(kind))
        except ResourceNotServed:
            if kind.api_version != API_GROUP_VERSION:
                raise ClusterAccessError(f"the API server does not serve {kind.api_version} {kind.kind}") from None
            warnings.append(f"the API server does not serve {kind.api_version} {kind.kind} "
                            "(are gpufleet's CRDs installed?); the snapshot has none")
            continue
        if kind is ObjectKind.POD:
            objects = [obj for obj in objects if wanted_pod(obj)]
        stripped = sorted((strip_object(kind, obj) for obj in objects), key=_sort_key)
        documents.extend(stripped)
    return ClusterSnapshot(documents=tuple(documents), warnings=tuple(warnings))
