"""Write a :class:`~gpufleet.domain.Snapshot` as multi-document Kubernetes YAML, or as JSON.

The output has the shape ``kubectl get nodes,pods,priorityclasses,queues,podgroups -A -o yaml``
(or ``-o json``: a ``List``) prints (see ``api.md``), so that ``load_snapshot_text(dump_snapshot(s))``
and ``load_snapshot_text(dump_snapshot_json(s), "s.json")`` give back ``s`` for every field the loader
reads. Quantities in milli-units are turned back into Kubernetes quantity strings
("64", "500m", "512Gi"); the typed fields of the domain objects (queue label, gpu-index, unhealthy
GPUs, ...) win over whatever the raw ``labels``/``annotations`` mappings say about the same keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec
import yaml

from gpufleet.domain import (
    ANNOTATION_GPU_BLOCKS,
    ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_NVLINK_DOMAINS,
    ANNOTATION_UNHEALTHY_GPUS,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRODUCT,
    LABEL_POD_GROUP,
    LABEL_PREEMPTIBLE,
    LABEL_QUEUE,
    MILLI,
    WILDCARD_IP,
    ClaimTemplate,
    DeviceClass,
    DeviceConfig,
    DeviceRequest,
    FlavorChoice,
    LabelSelector,
    Namespace,
    Node,
    PersistentVolume,
    Pod,
    PodAffinityTerm,
    PodGroup,
    PriorityClass,
    Queue,
    QueueResource,
    ResourceClaim,
    ResourceFlavor,
    ResourceSlice,
    SchedulerConfig,
    SelectorRequirement,
    SelectorTerm,
    Snapshot,
    SpreadConstraint,
    StorageClass,
    Taint,
    Toleration,
    VolumeClaim,
)
from gpufleet.domain import API_GROUP_VERSION as GPUFLEET_API
from gpufleet.domain.wire import ANNOTATION_DEFAULT_CLASS, ANNOTATION_SELECTED_NODE

__all__ = [
    "device_config_document",
    "dump_documents_json",
    "dump_snapshot",
    "dump_snapshot_json",
    "format_quantity",
    "format_time",
    "snapshot_to_documents",
]

CONTAINER_NAME = "main"
CONTAINER_IMAGE = "trainer:1"

_BINARY_SUFFIXES: tuple[tuple[str, int], ...] = (
    ("Ei", 1 << 60),
    ("Pi", 1 << 50),
    ("Ti", 1 << 40),
    ("Gi", 1 << 30),
    ("Mi", 1 << 20),
    ("Ki", 1 << 10),
)

try:  # the C dumper is an order of magnitude faster on large snapshots
    _Dumper: type[yaml.SafeDumper] = yaml.CSafeDumper  # type: ignore[assignment]
except AttributeError:  # pragma: no cover - PyYAML built without libyaml
    _Dumper = yaml.SafeDumper


def _is_byte_resource(resource: str) -> bool:
    return resource in ("memory", "ephemeral-storage", "storage") or resource.startswith("hugepages-")


def format_bytes(amount: int) -> str:
    """Whole bytes as a quantity: the largest binary suffix that divides it, else plain bytes."""
    if amount > 0:
        for suffix, factor in _BINARY_SUFFIXES:
            if amount % factor == 0:
                return f"{amount // factor}{suffix}"
    return str(amount)


def format_quantity(resource: str, milli: int) -> str:
    """A milli-unit amount of ``resource`` as a Kubernetes quantity string.

    Whole units print plainly ("64", "8"), byte resources with the largest binary suffix that
    divides them ("512Gi"), and anything else in milli-units ("500m").
    """
    if milli % MILLI != 0:
        return f"{milli}m"
    units = milli // MILLI
    if _is_byte_resource(resource):
        return format_bytes(units)
    return str(units)


def format_time(seconds: float) -> str:
    """Seconds since the epoch as RFC 3339 in UTC with a "Z" (fractions only when present)."""
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    if moment.microsecond:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _format_indices(indices: Iterable[int]) -> str:
    return ",".join(str(i) for i in indices)


def _parse_indices(text: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        return None


def _format_ranges(group: tuple[int, ...]) -> str:
    """A GPU index group as "0-3" when contiguous and ascending, else "0,2,5"."""
    if len(group) > 1 and list(group) == list(range(group[0], group[0] + len(group))):
        return f"{group[0]}-{group[-1]}"
    return _format_indices(group)


def _parse_ranges(text: str) -> tuple[tuple[int, ...], ...] | None:
    try:
        domains: list[tuple[int, ...]] = []
        for chunk in text.split(";"):
            if not chunk.strip():
                continue
            members: list[int] = []
            for part in chunk.split(","):
                if "-" in part:
                    low, high = part.split("-", 1)
                    members.extend(range(int(low), int(high) + 1))
                elif part.strip():
                    members.append(int(part))
            domains.append(tuple(members))
        return tuple(domains)
    except ValueError:
        return None


def _parse_bytes(text: str) -> int | None:
    """Just enough of the quantity syntax to tell whether a raw annotation still says ``value``."""
    text = text.strip()
    for suffix, factor in _BINARY_SUFFIXES:
        if text.endswith(suffix):
            try:
                return int(text[: -len(suffix)]) * factor
            except ValueError:
                return None
    decimal = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
    if text and text[-1] in decimal:
        try:
            return int(text[:-1]) * decimal[text[-1]]
        except ValueError:
            return None
    try:
        return int(text)
    except ValueError:
        return None


def _overlay(
    raw: dict[str, str],
    key: str,
    value: object | None,
    fmt: Callable[[Any], str],
    parse: Callable[[str], object | None],
) -> None:
    """Make ``raw[key]`` say ``value``: drop it when ``value`` is None, keep an equivalent raw text."""
    if value is None:
        raw.pop(key, None)
        return
    current = raw.get(key)
    if current is not None and parse(current) == value:
        return
    raw[key] = fmt(value)


def _parse_int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


def _parse_bool(text: str) -> bool | None:
    lowered = text.strip().lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    return None


def _identity(text: str) -> str:
    return text


def _resources(requests: Mapping[str, int]) -> dict[str, str]:
    return {name: format_quantity(name, amount) for name, amount in requests.items()}


def _taint(taint: Taint) -> dict[str, Any]:
    doc: dict[str, Any] = {"key": taint.key}
    if taint.value:
        doc["value"] = taint.value
    doc["effect"] = taint.effect.value
    return doc


def _toleration(toleration: Toleration) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if toleration.key is not None:
        doc["key"] = toleration.key
    doc["operator"] = toleration.operator
    if toleration.value:
        doc["value"] = toleration.value
    if toleration.effect is not None:
        doc["effect"] = toleration.effect.value
    return doc


def _requirement(requirement: SelectorRequirement) -> dict[str, Any]:
    doc: dict[str, Any] = {"key": requirement.key, "operator": requirement.operator}
    if requirement.values:
        doc["values"] = list(requirement.values)
    return doc


def _term(term: SelectorTerm) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if term.expressions:
        doc["matchExpressions"] = [_requirement(r) for r in term.expressions]
    if term.fields:
        doc["matchFields"] = [_requirement(r) for r in term.fields]
    return doc


def _label_selector(selector: LabelSelector) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if selector.match_labels:
        doc["matchLabels"] = dict(selector.match_labels)
    if selector.match_expressions:
        doc["matchExpressions"] = [_requirement(r) for r in selector.match_expressions]
    return doc


def _affinity_term(term: PodAffinityTerm) -> dict[str, Any]:
    doc: dict[str, Any] = {"topologyKey": term.topology_key}
    if term.selector is not None:
        doc["labelSelector"] = _label_selector(term.selector)
    if term.namespaces:
        doc["namespaces"] = list(term.namespaces)
    if term.namespace_selector is not None:
        doc["namespaceSelector"] = _label_selector(term.namespace_selector)
    return doc


def _pod_affinity(terms: tuple[PodAffinityTerm, ...]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    required = [_affinity_term(t) for t in terms if t.weight == 0]
    preferred = [{"weight": t.weight, "podAffinityTerm": _affinity_term(t)} for t in terms if t.weight > 0]
    if required:
        doc["requiredDuringSchedulingIgnoredDuringExecution"] = required
    if preferred:
        doc["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return doc


def _spread_constraint(c: SpreadConstraint) -> dict[str, Any]:
    doc: dict[str, Any] = {"maxSkew": c.max_skew, "topologyKey": c.topology_key,
                           "whenUnsatisfiable": c.when_unsatisfiable}
    if c.selector is not None:
        doc["labelSelector"] = _label_selector(c.selector)
    if c.min_domains is not None:
        doc["minDomains"] = c.min_domains
    if c.node_affinity_policy != "Honor":
        doc["nodeAffinityPolicy"] = c.node_affinity_policy
    if c.node_taints_policy != "Ignore":
        doc["nodeTaintsPolicy"] = c.node_taints_policy
    return doc


def node_document(node: Node) -> dict[str, Any]:
    labels = dict(node.labels)
    _overlay(labels, LABEL_GPU_PRODUCT, node.gpu_product, str, _identity)
    _overlay(labels, LABEL_GPU_MEMORY, node.gpu_memory_mib, str, _parse_int)
    annotations = dict(node.annotations)
    _overlay(
        annotations,
        ANNOTATION_UNHEALTHY_GPUS,
        tuple(sorted(node.unhealthy_gpus)) or None,
        _format_indices,
        lambda text: None if (parsed := _parse_indices(text)) is None else tuple(sorted(set(parsed))),
    )
    _overlay(
        annotations,
        ANNOTATION_NVLINK_DOMAINS,
        node.nvlink_domains or None,
        lambda domains: ";".join(_format_ranges(d) for d in domains),
        _parse_ranges,
    )
    spec: dict[str, Any] = {}
    if node.unschedulable:
        spec["unschedulable"] = True
    spec["taints"] = [_taint(t) for t in node.taints]
    allocatable = _resources(node.allocatable)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels, "annotations": annotations},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }


def pod_document(pod: Pod) -> dict[str, Any]:
    labels = dict(pod.labels)
    _overlay(labels, LABEL_QUEUE, pod.queue_label, str, _identity)
    _overlay(labels, LABEL_POD_GROUP, pod.group_label, str, _identity)
    _overlay(
        labels,
        LABEL_PREEMPTIBLE,
        pod.preemptible_label,
        lambda flag: "true" if flag else "false",
        _parse_bool,
    )
    annotations = dict(pod.annotations)
    _overlay(annotations, ANNOTATION_GPU_BLOCKS, pod.gpu_blocks, str, _parse_int)
    _overlay(annotations, ANNOTATION_GPU_MEMORY, pod.gpu_memory_bytes, format_bytes, _parse_bytes)
    _overlay(annotations, ANNOTATION_GPU_INDEX, pod.gpu_index or None, _format_indices, _parse_indices)

    metadata: dict[str, Any] = {
        "name": pod.name,
        "namespace": pod.namespace,
        "labels": labels,
        "annotations": annotations,
    }
    if pod.creation_time:
        metadata["creationTimestamp"] = format_time(pod.creation_time)

    resources = _resources(pod.requests)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": CONTAINER_IMAGE,
        "resources": {"limits": resources, "requests": dict(resources)} if resources else {},
    }
    spec: dict[str, Any] = {"schedulerName": pod.scheduler_name, "containers": [container]}
    if pod.node_selector:
        spec["nodeSelector"] = dict(pod.node_selector)
    if pod.affinity:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [_term(t) for t in pod.affinity]
                }
            }
        }
    if pod.preferred_affinity:
        spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})[
            "preferredDuringSchedulingIgnoredDuringExecution"
        ] = [{"weight": weight, "preference": _term(term)} for weight, term in pod.preferred_affinity]
    for kind, terms in (("podAffinity", pod.affinity_terms), ("podAntiAffinity", pod.anti_affinity_terms)):
        if terms:
            spec.setdefault("affinity", {})[kind] = _pod_affinity(terms)
    if pod.spread_constraints:
        spec["topologySpreadConstraints"] = [_spread_constraint(c) for c in pod.spread_constraints]
    if pod.tolerations:
        spec["tolerations"] = [_toleration(t) for t in pod.tolerations]
    if pod.priority_class_name is not None:
        spec["priorityClassName"] = pod.priority_class_name
    if pod.priority is not None:
        spec["priority"] = pod.priority
    if pod.node_name is not None:
        spec["nodeName"] = pod.node_name
    if pod.scheduling_gates:
        spec["schedulingGates"] = [{"name": name} for name in pod.scheduling_gates]
    if pod.host_ports:
        container["ports"] = [
            {"containerPort": number, "hostPort": number, "protocol": protocol,
             **({} if ip == WILDCARD_IP else {"hostIP": ip})}
            for protocol, ip, number in pod.host_ports
        ]

    if pod.claims:
        spec["volumes"] = [_pod_volume(pod, i, claim) for i, claim in enumerate(pod.claims)]
    if pod.resource_claims:
        spec["resourceClaims"] = [
            {"name": c.name, "resourceClaimName": c.claim} if c.claim is not None else
            {"name": c.name, "resourceClaimTemplateName": c.template}
            for c in pod.resource_claims
        ]

    status: dict[str, Any] = {"phase": pod.phase}
    if pod.start_time is not None:
        status["startTime"] = format_time(pod.start_time)
    generated = [{"name": c.name, "resourceClaimName": c.generated}
                 for c in pod.resource_claims if c.claim is None and c.generated is not None]
    if generated:
        status["resourceClaimStatuses"] = generated
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def _pod_volume(pod: Pod, index: int, claim: str) -> dict[str, Any]:
    prefix = f"{pod.name}-"
    if claim in pod.ephemeral_claims and claim.startswith(prefix) and len(claim) > len(prefix):
        return {"name": claim[len(prefix):], "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
    return {"name": f"claim-{index}", "persistentVolumeClaim": {"claimName": claim}}


def claim_document(claim: VolumeClaim) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": claim.name, "namespace": claim.namespace}
    if claim.uid:
        metadata["uid"] = claim.uid
    if claim.selected_node is not None:
        metadata["annotations"] = {ANNOTATION_SELECTED_NODE: claim.selected_node}
    if claim.deleting:
        metadata["deletionTimestamp"] = format_time(0)
    spec: dict[str, Any] = {
        "accessModes": list(claim.access_modes),
        "resources": {"requests": {"storage": format_bytes(claim.request_bytes)}},
        "volumeMode": claim.volume_mode,
    }
    if claim.storage_class is not None:
        spec["storageClassName"] = claim.storage_class
    if claim.volume_name is not None:
        spec["volumeName"] = claim.volume_name
    if claim.selector is not None:
        spec["selector"] = _label_selector(claim.selector)
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}


def volume_document(volume: PersistentVolume) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "capacity": {"storage": format_bytes(volume.capacity_bytes)},
        "accessModes": list(volume.access_modes),
        "volumeMode": volume.volume_mode,
    }
    if volume.storage_class:
        spec["storageClassName"] = volume.storage_class
    if volume.node_affinity:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [_term(t) for t in volume.node_affinity]}}
    if volume.claim is not None:
        namespace, _, name = volume.claim.partition("/")
        spec["claimRef"] = {"namespace": namespace, "name": name}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume.name, "labels": dict(volume.labels)},
        "spec": spec,
        "status": {"phase": volume.phase},
    }


def storage_class_document(storage_class: StorageClass) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": storage_class.name}
    if storage_class.is_default:
        metadata["annotations"] = {ANNOTATION_DEFAULT_CLASS: "true"}
    if storage_class.creation_time:
        metadata["creationTimestamp"] = format_time(storage_class.creation_time)
    doc: dict[str, Any] = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": metadata,
        "provisioner": storage_class.provisioner,
        "volumeBindingMode": "WaitForFirstConsumer" if storage_class.wait_for_first_consumer else "Immediate",
    }
    if storage_class.allowed_topologies:
        doc["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": r.key, "values": list(r.values)} for r in term.expressions]}
            for term in storage_class.allowed_topologies
        ]
    return doc


def namespace_document(namespace: Namespace) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": namespace.name}
    if namespace.labels:
        meta["labels"] = dict(namespace.labels)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def priority_class_document(priority_class: PriorityClass) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": priority_class.name},
        "value": priority_class.value,
    }
    if priority_class.global_default:
        doc["globalDefault"] = True
    return doc


def _weight(weight: float) -> int | float:
    return int(weight) if float(weight).is_integer() else weight


def _queue_resources(specs: Mapping[str, QueueResource]) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    for name, resource in specs.items():
        entry: dict[str, str] = {}
        if resource.quota is not None:
            entry["quota"] = format_quantity(name, resource.quota)
        if resource.limit is not None:
            entry["limit"] = format_quantity(name, resource.limit)
        if resource.lending_limit is not None:
            entry["lendingLimit"] = format_quantity(name, resource.lending_limit)
        resources[name] = entry
    return resources


def resource_flavor_document(flavor: ResourceFlavor) -> dict[str, Any]:
    return {"apiVersion": GPUFLEET_API, "kind": "ResourceFlavor", "metadata": {"name": flavor.name},
            "spec": {"nodeLabels": dict(flavor.node_labels)}}


def queue_document(queue: Queue) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if queue.parent is not None:
        spec["parent"] = queue.parent
    spec["weight"] = _weight(queue.weight)
    resources = _queue_resources(queue.resources)
    if resources:
        spec["resources"] = resources
    spec["preemption"] = {
        "reclaimBorrowed": queue.reclaim_borrowed,
        "withinQueue": queue.within_queue.value,
    }
    if queue.flavors:
        spec["flavors"] = [{"name": f.name, "resources": _queue_resources(f.resources)} for f in queue.flavors]
    if queue.flavor_choice is not FlavorChoice.IN_ORDER:
        spec["flavorChoice"] = queue.flavor_choice.value
    return {"apiVersion": GPUFLEET_API, "kind": "Queue", "metadata": {"name": queue.name}, "spec": spec}


def pod_group_document(group: PodGroup) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": group.min_member}
    if group.queue is not None:
        spec["queue"] = group.queue
    if group.priority_class_name is not None:
        spec["priorityClassName"] = group.priority_class_name
    topology: dict[str, str] = {}
    if group.topology_required is not None:
        topology["required"] = group.topology_required
    if group.topology_preferred is not None:
        topology["preferred"] = group.topology_preferred
    if topology:
        spec["topology"] = topology
    if group.placement is not None:
        spec["placement"] = group.placement.value
    return {
        "apiVersion": GPUFLEET_API,
        "kind": "PodGroup",
        "metadata": {"name": group.name, "namespace": group.namespace},
        "spec": spec,
    }


def config_document(config: SchedulerConfig) -> dict[str, Any]:
    return {
        "apiVersion": GPUFLEET_API,
        "kind": "SchedulerConfig",
        "metadata": {"name": "default"},
        "spec": {
            "defaultQueue": config.default_queue,
            "topologyLevels": list(config.topology_levels),
            "nonPreemptiblePriority": config.non_preemptible_priority,
            "placement": config.placement.value,
        },
    }


# --- Dynamic Resource Allocation (resource.k8s.io/v1) -------------------------------------------

DRA_API = "resource.k8s.io/v1"


def _local(name: str, driver: str) -> str:
    """A qualified attribute/capacity name as a driver writes it: unqualified in its own domain."""
    prefix = f"{driver}/"
    return name[len(prefix):] if name.startswith(prefix) else name


def _attribute(value: object) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def resource_slice_document(resource_slice: ResourceSlice) -> dict[str, Any]:
    driver = resource_slice.driver
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": resource_slice.pool, "generation": resource_slice.generation, "resourceSliceCount": 1},
    }
    if resource_slice.node is not None:
        spec["nodeName"] = resource_slice.node
    else:
        spec["allNodes"] = True
    devices: list[dict[str, Any]] = []
    for device in resource_slice.devices:
        entry: dict[str, Any] = {"name": device.name}
        if device.attributes:
            entry["attributes"] = {_local(k, driver): _attribute(v) for k, v in device.attributes.items()}
        if device.capacity:
            entry["capacity"] = {_local(k, driver): {"value": v} for k, v in device.capacity.items()}
        devices.append(entry)
    spec["devices"] = devices
    return {"apiVersion": DRA_API, "kind": "ResourceSlice", "metadata": {"name": resource_slice.name}, "spec": spec}


def _selectors(expressions: tuple[str, ...]) -> list[dict[str, Any]]:
    return [{"cel": {"expression": e}} for e in expressions]


def device_config_document(config: DeviceConfig) -> dict[str, Any]:
    """A DRA opaque device configuration as ResourceClaims, templates and DeviceClasses write it
    (the controller's claim allocations too: ``kube.controller.claim_writes``)."""
    doc: dict[str, Any] = {}
    if config.requests:
        doc["requests"] = list(config.requests)
    doc["opaque"] = {"driver": config.driver, "parameters": dict(config.parameters)}
    return doc


def device_class_document(device_class: DeviceClass) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if device_class.selectors:
        spec["selectors"] = _selectors(device_class.selectors)
    if device_class.config:
        spec["config"] = [device_config_document(c) for c in device_class.config]
    return {"apiVersion": DRA_API, "kind": "DeviceClass", "metadata": {"name": device_class.name}, "spec": spec}


def _device_request(request: DeviceRequest) -> dict[str, Any]:
    if request.unsupported == "firstAvailable":
        return {"name": request.name, "firstAvailable": [
            {"name": "first", "deviceClassName": request.device_class or "gpu.nvidia.com"}]}
    exact: dict[str, Any] = {"deviceClassName": request.device_class}
    if request.selectors:
        exact["selectors"] = _selectors(request.selectors)
    if request.unsupported == "allocationMode All":
        exact["allocationMode"] = "All"
    else:
        exact["allocationMode"] = "ExactCount"
        exact["count"] = request.count
    if request.unsupported == "adminAccess":
        exact["adminAccess"] = True
    if request.unsupported == "device tolerations":
        exact["tolerations"] = [{"operator": "Exists"}]
    return {"name": request.name, "exactly": exact}


def _claim_spec(requests: tuple[DeviceRequest, ...], config: tuple[DeviceConfig, ...],
                unsupported: str | None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": [_device_request(r) for r in requests]}
    if config:
        devices["config"] = [device_config_document(c) for c in config]
    if unsupported == "constraints":
        devices["constraints"] = [{"matchAttribute": "gpu.nvidia.com/uuid"}]
    return {"devices": devices}


def resource_claim_document(claim: ResourceClaim) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": claim.name, "namespace": claim.namespace}
    if claim.uid:
        metadata["uid"] = claim.uid
    if claim.deleting:
        metadata["deletionTimestamp"] = format_time(0)
    doc: dict[str, Any] = {"apiVersion": DRA_API, "kind": "ResourceClaim", "metadata": metadata,
                           "spec": _claim_spec(claim.requests, claim.config, claim.unsupported)}
    status: dict[str, Any] = {}
    if claim.allocation or claim.allocated_node is not None:
        allocation: dict[str, Any] = {"devices": {"results": [
            {"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device} for r in claim.allocation
        ]}}
        if claim.allocated_node is not None:
            allocation["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [claim.allocated_node]}]}]}
        status["allocation"] = allocation
    if claim.reserved_for:
        status["reservedFor"] = [{"resource": "pods", "name": name} for name in claim.reserved_for]
    if status:
        doc["status"] = status
    return doc


def claim_template_document(template: ClaimTemplate) -> dict[str, Any]:
    return {
        "apiVersion": DRA_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template.name, "namespace": template.namespace},
        "spec": {"spec": _claim_spec(template.requests, template.config, template.unsupported)},
    }


def snapshot_to_documents(snapshot: Snapshot) -> list[dict[str, Any]]:
    """One plain dict per Kubernetes object, in the order: config, priority classes, queues,
    nodes, pod groups, pods, storage classes, volumes, claims, namespaces, resource slices, device
    classes, resource claim templates, resource claims (the order of each kind in the snapshot is kept)."""
    documents: list[dict[str, Any]] = [config_document(snapshot.config)]
    documents.extend(priority_class_document(pc) for pc in snapshot.priority_classes)
    documents.extend(resource_flavor_document(f) for f in snapshot.flavors)
    documents.extend(queue_document(q) for q in snapshot.queues)
    documents.extend(node_document(n) for n in snapshot.nodes)
    documents.extend(pod_group_document(g) for g in snapshot.pod_groups)
    documents.extend(pod_document(p) for p in snapshot.pods)
    documents.extend(storage_class_document(c) for c in snapshot.storage_classes)
    documents.extend(volume_document(v) for v in snapshot.volumes)
    documents.extend(claim_document(c) for c in snapshot.claims)
    documents.extend(namespace_document(ns) for ns in snapshot.namespaces)
    documents.extend(resource_slice_document(r) for r in snapshot.resource_slices)
    documents.extend(device_class_document(c) for c in snapshot.device_classes)
    documents.extend(claim_template_document(t) for t in snapshot.claim_templates)
    documents.extend(resource_claim_document(c) for c in snapshot.resource_claims)
    return documents


def dump_snapshot(snapshot: Snapshot) -> str:
    """The snapshot as multi-document YAML ("---" between documents)."""
    return yaml.dump_all(
        snapshot_to_documents(snapshot),
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1 << 16,
    )


_JSON_ENCODER = msgspec.json.Encoder()


def dump_documents_json(documents: Iterable[Mapping[str, Any]]) -> str:
    """Kubernetes objects as one ``List`` with the objects as its ``items`` (the shape ``kubectl get
    -o json`` prints for several), encoded by msgspec: compact, one object a line."""
    encode = _JSON_ENCODER.encode
    items = b",\n".join(encode(document) for document in documents)
    head = b'{"apiVersion":"v1","kind":"List","metadata":{},"items":[\n'
    return (head + items + b"\n]}\n" if items else head + b"]}\n").decode("utf-8")


def dump_snapshot_json(snapshot: Snapshot) -> str:
    """The snapshot as JSON: :func:`dump_documents_json` of :func:`snapshot_to_documents`."""
    return dump_documents_json(snapshot_to_documents(snapshot))
