"""A live cluster's state as a replay snapshot (the multi-document YAML ``gpufleet replay`` reads).

What is read: Nodes, Namespaces (name and labels), PriorityClasses, gpufleet's Queues, PodGroups,
SchedulerConfig and Projects, the PersistentVolumeClaims, PersistentVolumes and StorageClasses that
volume binding reads, the ResourceSlices, DeviceClasses, ResourceClaimTemplates and ResourceClaims
of Dynamic Resource Allocation (none when the API server does not serve resource.k8s.io/v1), and the
Pods that matter to a scheduling pass: gpufleet's pending pods, and every pod bound to a node that
has not finished (those hold capacity, whoever scheduled them). For tenancy (docs/tenancy.md): the
RBAC objects that concern gpufleet's API group (Roles and ClusterRoles with a rule on
``gpufleet.dev`` or ``*``, and the bindings of those roles), which ``gpufleet policy check``
evaluates ``use`` of a queue with. A reader not allowed to list those is told so, and the snapshot
goes on without them. Each object is cut down to the fields the loader reads
(:mod:`gpufleet.adapters.k8s_yaml`), so ``managedFields``, statuses, ``kubectl``'s last-applied
copies and other annotations that are not gpufleet's do not bloat the file. Objects are sorted by
kind and name, so two snapshots of the same state are byte-identical.

The API is read through the one port, :class:`~gpufleet.kube.client.port.ClusterApi` (the
controller's): :func:`read_cluster` is a coroutine, run under ``asyncio.run`` by the commands.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from gpufleet.domain import API_GROUP, LABEL_PREFIX, SCHEDULER_NAME
from gpufleet.domain.wire import ANNOTATION_DEFAULT_CLASS, ANNOTATION_SELECTED_NODE
from gpufleet.kube.client.port import ApiError, ClusterAccessError, ClusterApi, Kind, access_error

__all__ = [
    "FINISHED_PHASES",
    "SNAPSHOT_KINDS",
    "TENANCY_KINDS",
    "ClusterSnapshot",
    "list_kinds",
    "list_tenancy",
    "read_cluster",
    "snapshot_of",
    "strip_object",
    "wanted_pod",
]

FINISHED_PHASES = ("Succeeded", "Failed")
# The kinds a snapshot holds, in the order they are written.
SNAPSHOT_KINDS = (Kind.SCHEDULER_CONFIG, Kind.PRIORITY_CLASS, Kind.QUEUE, Kind.NODE, Kind.POD_GROUP, Kind.POD,
                  Kind.STORAGE_CLASS, Kind.PERSISTENT_VOLUME, Kind.PERSISTENT_VOLUME_CLAIM, Kind.NAMESPACE,
                  Kind.PROJECT, Kind.RESOURCE_SLICE, Kind.DEVICE_CLASS, Kind.RESOURCE_CLAIM_TEMPLATE,
                  Kind.RESOURCE_CLAIM, Kind.RESOURCE_FLAVOR)  # fmt: skip
# Dynamic Resource Allocation: a cluster that does not serve resource.k8s.io/v1 simply has none.
_DRA_KINDS = (Kind.RESOURCE_SLICE, Kind.DEVICE_CLASS, Kind.RESOURCE_CLAIM_TEMPLATE, Kind.RESOURCE_CLAIM)
# Read after them, where the API server lets the reader (see the module docstring), in this order.
TENANCY_KINDS = (Kind.CLUSTER_ROLE, Kind.ROLE, Kind.CLUSTER_ROLE_BINDING, Kind.ROLE_BINDING)
_ROLES = (Kind.ROLE, Kind.CLUSTER_ROLE)


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


def _metadata(obj: Mapping[str, Any], namespaced: bool, timestamps: bool = False,
              annotations_kept: tuple[str, ...] = ()) -> dict[str, Any]:
    """name (namespace), labels, gpufleet's annotations and those named in ``annotations_kept``,
    and with ``timestamps`` the creation time."""
    raw = obj.get("metadata")
    meta: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    out = _pick(meta, ("name", "namespace") if namespaced else ("name",))
    labels = meta.get("labels")
    if isinstance(labels, Mapping) and labels:
        out["labels"] = _canonical(labels)
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping):
        ours = {k: v for k, v in annotations.items()
                if isinstance(k, str) and (k.startswith(LABEL_PREFIX) or k in annotations_kept)}
        if ours:
            out["annotations"] = _canonical(ours)
    if timestamps and meta.get("creationTimestamp") is not None:
        out["creationTimestamp"] = meta["creationTimestamp"]
    return out


_CONTAINER_FIELDS = ("name", "resources", "restartPolicy")
_POD_SPEC_FIELDS = (
    "schedulerName", "priority", "priorityClassName", "nodeName", "nodeSelector", "tolerations", "overhead",
    "topologySpreadConstraints",
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
    out_spec.update(_pick(spec, (*_POD_SPEC_FIELDS, "resourceClaims")))
    affinity = spec.get("affinity")
    if isinstance(affinity, Mapping):
        node_affinity = affinity.get("nodeAffinity")
        kept: dict[str, Any] = {}
        if isinstance(node_affinity, Mapping):  # required and preferred (scored) terms
            node_kept = _pick(node_affinity, ("requiredDuringSchedulingIgnoredDuringExecution",
                                              "preferredDuringSchedulingIgnoredDuringExecution"))
            if node_kept:
                kept["nodeAffinity"] = node_kept
        kept.update(_pick(affinity, ("podAffinity", "podAntiAffinity")))  # inter-pod terms, preferred ones too
        if kept:
            out_spec["affinity"] = kept
    volumes = _claim_volumes(spec.get("volumes"))
    if volumes:
        out_spec["volumes"] = volumes
    raw_status = obj.get("status")
    status = (_pick(raw_status, ("phase", "startTime", "resourceClaimStatuses")) if isinstance(raw_status, Mapping)
              else {})
    doc: dict[str, Any] = {"metadata": _metadata(obj, namespaced=True, timestamps=True), "spec": out_spec}
    if status:
        doc["status"] = status
    return doc


def _claim_volumes(value: object) -> list[Any]:
    """A pod's volumes that name claims (persistentVolumeClaim, ephemeral); other volume types
    (configMap, secret, emptyDir, ...) do not matter to scheduling."""
    if not isinstance(value, list):
        return []
    kept = ("persistentVolumeClaim", "ephemeral")
    return [_pick(v, ("name", *kept)) for v in value
            if isinstance(v, Mapping) and any(v.get(source) is not None for source in kept)]


_CLAIM_SPEC_FIELDS = ("storageClassName", "volumeName", "accessModes", "volumeMode", "resources", "selector")
_VOLUME_SPEC_FIELDS = ("storageClassName", "capacity", "accessModes", "volumeMode", "nodeAffinity", "claimRef")
_CLASS_FIELDS = ("provisioner", "volumeBindingMode", "allowedTopologies")


def _claim(obj: Mapping[str, Any]) -> dict[str, Any]:
    raw_spec = obj.get("spec")
    meta = _metadata(obj, namespaced=True, annotations_kept=(ANNOTATION_SELECTED_NODE,))
    raw_meta = obj.get("metadata")
    if isinstance(raw_meta, Mapping) and raw_meta.get("deletionTimestamp") is not None:
        meta["deletionTimestamp"] = raw_meta["deletionTimestamp"]
    spec = _pick(raw_spec, _CLAIM_SPEC_FIELDS) if isinstance(raw_spec, Mapping) else {}
    resources = spec.get("resources")
    if isinstance(resources, Mapping):  # the requested size only (limits do not matter to binding)
        spec["resources"] = _pick(resources, ("requests",))
    return {"metadata": meta, "spec": spec}


def _volume(obj: Mapping[str, Any]) -> dict[str, Any]:
    raw_spec = obj.get("spec")
    raw_status = obj.get("status")
    spec = _pick(raw_spec, _VOLUME_SPEC_FIELDS) if isinstance(raw_spec, Mapping) else {}
    ref = spec.get("claimRef")
    if isinstance(ref, Mapping):  # which claim, not which version of it
        spec["claimRef"] = _pick(ref, ("namespace", "name"))
    doc: dict[str, Any] = {"metadata": _metadata(obj, namespaced=False), "spec": spec}
    status = _pick(raw_status, ("phase",)) if isinstance(raw_status, Mapping) else {}
    if status:
        doc["status"] = status
    return doc


def _resource_claim(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A ResourceClaim: its spec, uid and deletion, and the status gpufleet reads (allocation, reservedFor)."""
    meta = _metadata(obj, namespaced=True)
    raw_meta = obj.get("metadata")
    if isinstance(raw_meta, Mapping):
        meta.update(_pick(raw_meta, ("uid", "deletionTimestamp")))
    doc: dict[str, Any] = {"metadata": meta, "spec": _canonical(obj.get("spec") or {})}
    raw_status = obj.get("status")
    status = _pick(raw_status, ("allocation", "reservedFor")) if isinstance(raw_status, Mapping) else {}
    if status:
        doc["status"] = status
    return doc


def _storage_class(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = _metadata(obj, namespaced=False, timestamps=True, annotations_kept=(ANNOTATION_DEFAULT_CLASS,))
    return {"metadata": meta} | _pick(obj, _CLASS_FIELDS)


def _node(obj: Mapping[str, Any]) -> dict[str, Any]:
    raw_spec = obj.get("spec")
    raw_status = obj.get("status")
    return {
        "metadata": _metadata(obj, namespaced=False),
        "spec": _pick(raw_spec, ("unschedulable", "taints")) if isinstance(raw_spec, Mapping) else {},
        "status": _pick(raw_status, ("allocatable", "capacity")) if isinstance(raw_status, Mapping) else {},
    }


def strip_object(kind: Kind, obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` cut down to what the snapshot loader reads, with apiVersion and kind first."""
    head: dict[str, Any] = {"apiVersion": kind.api_version, "kind": kind.kind}
    if kind is Kind.POD:
        return head | _pod(obj)
    if kind is Kind.NODE:
        return head | _node(obj)
    if kind is Kind.PRIORITY_CLASS:
        return head | {"metadata": _metadata(obj, namespaced=False)} | _pick(obj, ("value", "globalDefault"))
    if kind is Kind.PERSISTENT_VOLUME_CLAIM:
        return head | _claim(obj)
    if kind is Kind.PERSISTENT_VOLUME:
        return head | _volume(obj)
    if kind is Kind.STORAGE_CLASS:
        return head | _storage_class(obj)
    if kind is Kind.RESOURCE_CLAIM:
        return head | _resource_claim(obj)
    if kind is Kind.NAMESPACE:  # name and labels (what namespaceSelectors match)
        return head | {"metadata": _metadata(obj, namespaced=False)}
    rbac = {Kind.ROLE: ("rules", "aggregationRule"), Kind.CLUSTER_ROLE: ("rules", "aggregationRule"),
            Kind.ROLE_BINDING: ("roleRef", "subjects"), Kind.CLUSTER_ROLE_BINDING: ("roleRef", "subjects")}
    if kind in rbac:
        return head | {"metadata": _metadata(obj, namespaced=kind.namespaced)} | _pick(obj, rbac[kind])
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


async def list_kinds(api: ClusterApi, kinds: Iterable[Kind]) -> dict[Kind, list[dict[str, Any]] | None]:
    """Every object of each of ``kinds``, listed one kind after the other through ``api``; None for
    a kind the API server does not serve (404: its CRD is not installed).

    Raises :class:`ClusterAccessError` (exit 1) for any other failure."""
    listed: dict[Kind, list[dict[str, Any]] | None] = {}
    for kind in kinds:
        try:
            listed[kind] = (await api.list(kind)).items
        except ApiError as err:
            if err.status == 404:
                listed[kind] = None
                continue
            raise access_error(api.server, f"listing {kind.kind} objects", err) from None
        except Exception as err:  # a reply the client cannot decode: still one line, never a traceback
            raise access_error(api.server, f"listing {kind.kind} objects", err) from None
    return listed


async def list_tenancy(api: ClusterApi) -> tuple[dict[Kind, list[dict[str, Any]] | None], list[str]]:
    """The RBAC objects (see the module docstring); a kind the reader may not list (403) or the API
    server does not serve (404) is None, with a warning for the former. Other failures raise
    :class:`ClusterAccessError` (exit 1)."""
    out: dict[Kind, list[dict[str, Any]] | None] = {}
    warnings: list[str] = []
    for kind in TENANCY_KINDS:
        try:
            out[kind] = (await api.list(kind)).items
        except ApiError as err:
            if err.status not in (403, 404):
                raise access_error(api.server, f"listing {kind.kind} objects", err) from None
            out[kind] = None
            if err.status == 403:
                warnings.append(f"not allowed to list {kind.kind} objects ({err.message or err.reason}); "
                                "the snapshot has none")
        except Exception as err:
            raise access_error(api.server, f"listing {kind.kind} objects", err) from None
    return out, warnings


def _concerns_gpufleet(role: Mapping[str, Any]) -> bool:
    rules = role.get("rules")
    return isinstance(rules, list) and any(
        isinstance(rule, Mapping) and isinstance(rule.get("apiGroups"), list)
        and (API_GROUP in rule["apiGroups"] or "*" in rule["apiGroups"])
        for rule in rules
    )


def _tenancy_documents(listed: Mapping[Kind, Iterable[Mapping[str, Any]] | None]) -> list[dict[str, Any]]:
    """The RBAC objects that concern gpufleet.dev."""
    documents: list[dict[str, Any]] = []
    roles = {kind: [obj for obj in listed.get(kind) or () if _concerns_gpufleet(obj)] for kind in _ROLES}
    wanted_roles = {(kind.kind, *reversed(_sort_key(obj))) for kind in _ROLES for obj in roles[kind]}

    def binds_one(binding: Mapping[str, Any]) -> bool:
        ref = binding.get("roleRef") if isinstance(binding.get("roleRef"), Mapping) else {}
        assert isinstance(ref, Mapping)
        namespace = _sort_key(binding)[0] if ref.get("kind") == "Role" else ""
        return (ref.get("kind"), ref.get("name"), namespace) in wanted_roles

    for kind in TENANCY_KINDS:
        objects: Iterable[Mapping[str, Any]] = listed.get(kind) or ()
        if kind in _ROLES:
            objects = roles[kind]
        elif kind in (Kind.ROLE_BINDING, Kind.CLUSTER_ROLE_BINDING):
            objects = [obj for obj in objects if binds_one(obj)]
        documents.extend(sorted((strip_object(kind, obj) for obj in objects), key=_sort_key))
    return documents


def snapshot_of(listed: Mapping[Kind, Iterable[Mapping[str, Any]] | None],
                warnings: Iterable[str] = ()) -> ClusterSnapshot:
    """The snapshot of the objects :func:`list_kinds` (and :func:`list_tenancy`) read (see the module
    docstring). gpufleet's own kinds may be missing (CRDs not installed): the snapshot goes on without
    them and says so."""
    documents: list[dict[str, Any]] = []
    warnings = list(warnings)
    for kind in SNAPSHOT_KINDS:
        objects = listed.get(kind)
        if objects is None:
            if kind in _DRA_KINDS:
                continue
            if kind.group != API_GROUP:
                raise ClusterAccessError(f"the API server does not serve {kind.api_version} {kind.kind}")
            warnings.append(f"the API server does not serve {kind.api_version} {kind.kind} "
                            "(are gpufleet's CRDs installed?); the snapshot has none")
            continue
        if kind is Kind.POD:
            objects = [obj for obj in objects if wanted_pod(obj)]
        documents.extend(sorted((strip_object(kind, obj) for obj in objects), key=_sort_key))
    documents.extend(_tenancy_documents(listed))
    return ClusterSnapshot(documents=tuple(documents), warnings=tuple(warnings))


async def read_cluster(api: ClusterApi) -> ClusterSnapshot:
    """Read every kind of :data:`SNAPSHOT_KINDS` (and of :data:`TENANCY_KINDS`, see
    :func:`list_tenancy`) through ``api`` into a snapshot."""
    listed = await list_kinds(api, SNAPSHOT_KINDS)
    tenancy, warnings = await list_tenancy(api)
    return snapshot_of({**listed, **tenancy}, warnings)
