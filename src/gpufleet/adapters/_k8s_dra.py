"""Dynamic Resource Allocation objects (``resource.k8s.io/v1``) -> domain objects.

ResourceSlice, DeviceClass, ResourceClaim, ResourceClaimTemplate, and a Pod's ``spec.resourceClaims``
with ``status.resourceClaimStatuses`` (docs/semantics-notes.md, "Dynamic Resource Allocation").
Written as the core objects are (:mod:`gpufleet.adapters._k8s_core`): hand-written field access,
unknown fields ignored as Kubernetes clients do, the fields gpufleet reads checked and reported with
their full path. What gpufleet reads but does not allocate (``firstAvailable``, ``allocationMode:
All``, ``adminAccess``, device tolerations, constraints) is read into ``unsupported``, so that the pod
waits with a reason instead of the snapshot being refused.
"""

from __future__ import annotations

from typing import Any

from gpufleet.adapters._fields import (
    FieldError,
    join,
    mapping,
    mapping_items,
    opt_bool,
    opt_str,
    quantity,
    req_str,
    sequence,
    timestamp,
)
from gpufleet.adapters.errors import describe
from gpufleet.domain import (
    AttributeValue,
    ClaimTemplate,
    Device,
    DeviceClass,
    DeviceConfig,
    DeviceRequest,
    DeviceResult,
    NodeName,
    PodClaim,
    ResourceClaim,
    ResourceSlice,
)

__all__ = [
    "DRA_API_VERSION",
    "UNSUPPORTED_ADMIN_ACCESS",
    "UNSUPPORTED_ALL",
    "UNSUPPORTED_CONSTRAINTS",
    "UNSUPPORTED_FIRST_AVAILABLE",
    "UNSUPPORTED_TOLERATIONS",
    "claim_template_from_dict",
    "device_class_from_dict",
    "pod_resource_claims",
    "resource_claim_from_dict",
    "resource_slice_from_dict",
]

DRA_API_VERSION = "resource.k8s.io/v1"

# The words of DeviceRequest.unsupported / ResourceClaim.unsupported (docs/semantics-notes.md).
UNSUPPORTED_FIRST_AVAILABLE = "firstAvailable"
UNSUPPORTED_ALL = "allocationMode All"
UNSUPPORTED_ADMIN_ACCESS = "adminAccess"
UNSUPPORTED_TOLERATIONS = "device tolerations"
UNSUPPORTED_CONSTRAINTS = "constraints"

_ALLOCATION_MODES = ("ExactCount", "All")
_ATTRIBUTE_TYPES = ("int", "bool", "string", "version")


def _qualified(name: object, driver: str, path: str) -> str:
    if not isinstance(name, str) or not name:
        raise FieldError(path, f"names must be non-empty strings, got {describe(name)}")
    return name if "/" in name else f"{driver}/{name}"


def _attribute(raw: object, path: str) -> AttributeValue:
    item = mapping(raw, path)
    given = [key for key in _ATTRIBUTE_TYPES if item.get(key) is not None]
    if len(given) != 1:
        raise FieldError(path, f"must set exactly one of {', '.join(_ATTRIBUTE_TYPES)}")
    key = given[0]
    value = item[key]
    if key == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise FieldError(join(path, key), f"must be an integer, got {describe(value)}")
        return value
    if key == "bool":
        return opt_bool(value, join(path, key), False)
    return req_str(value, join(path, key))


def _device(raw: dict[str, Any], path: str, driver: str) -> Device:
    name = req_str(raw.get("name"), join(path, "name"))
    attributes: dict[str, AttributeValue] = {}
    attrs_path = join(path, "attributes")
    for key, value in mapping(raw.get("attributes"), attrs_path).items():
        qualified = _qualified(key, driver, attrs_path)
        attributes[qualified] = _attribute(value, join(attrs_path, str(key)))
    capacity: dict[str, str] = {}
    cap_path = join(path, "capacity")
    for key, value in mapping(raw.get("capacity"), cap_path).items():
        qualified = _qualified(key, driver, cap_path)
        value_path = join(join(cap_path, str(key)), "value")
        amount = mapping(value, join(cap_path, str(key))).get("value")
        if amount is None:
            raise FieldError(value_path, "required field missing")
        quantity(amount, value_path)  # checked; kept as written
        capacity[qualified] = amount if isinstance(amount, str) else str(amount)
    return Device(name=name, attributes=attributes, capacity=capacity)


def resource_slice_from_dict(doc: dict[str, Any]) -> ResourceSlice:
    """A resource.k8s.io/v1 ResourceSlice; a slice not local to one node (``allNodes``,
    ``nodeSelector``, ``perDeviceNodeSelection``) has no node."""
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    spec = mapping(doc.get("spec"), "spec")
    driver = req_str(spec.get("driver"), "spec.driver")
    pool = mapping(spec.get("pool"), "spec.pool")
    generation = pool.get("generation")
    if generation is not None and (isinstance(generation, bool) or not isinstance(generation, int)
                                   or generation < 0):
        raise FieldError("spec.pool.generation", f"must be a non-negative integer, got {describe(generation)}")
    node = opt_str(spec.get("nodeName"), "spec.nodeName") or None
    names: set[str] = set()
    devices: list[Device] = []
    for path, raw in mapping_items(spec.get("devices"), "spec.devices"):
        device = _device(raw, path, driver)
        if device.name in names:
            raise FieldError(join(path, "name"), f"duplicate device {describe(device.name)}")
        names.add(device.name)
        devices.append(device)
    return ResourceSlice(
        name=name,
        driver=driver,
        pool=req_str(pool.get("name"), "spec.pool.name"),
        node=NodeName(node) if node else None,
        generation=generation or 0,
        devices=tuple(devices),
    )


def _selectors(value: object, path: str) -> tuple[str, ...]:
    out: list[str] = []
    for item_path, item in mapping_items(value, path):
        cel_path = join(item_path, "cel")
        cel = item.get("cel")
        if cel is None:
            raise FieldError(cel_path, "required field missing")
        out.append(req_str(mapping(cel, cel_path).get("expression"), join(cel_path, "expression")))
    return tuple(out)


def _opaque(item: dict[str, Any], path: str, requests: tuple[str, ...] = ()) -> DeviceConfig:
    opaque_path = join(path, "opaque")
    raw = item.get("opaque")
    if raw is None:
        raise FieldError(opaque_path, "required field missing")
    opaque = mapping(raw, opaque_path)
    parameters = opaque.get("parameters")
    params_path = join(opaque_path, "parameters")
    if parameters is None:
        raise FieldError(params_path, "required field missing")
    return DeviceConfig(
        driver=req_str(opaque.get("driver"), join(opaque_path, "driver")),
        parameters=mapping(parameters, params_path),
        requests=requests,
    )


def device_class_from_dict(doc: dict[str, Any]) -> DeviceClass:
    """A resource.k8s.io/v1 DeviceClass: its CEL selectors and opaque configs."""
    meta = mapping(doc.get("metadata"), "metadata")
    spec = mapping(doc.get("spec"), "spec")
    return DeviceClass(
        name=req_str(meta.get("name"), "metadata.name"),
        selectors=_selectors(spec.get("selectors"), "spec.selectors"),
        config=tuple(_opaque(item, path) for path, item in mapping_items(spec.get("config"), "spec.config")),
    )


def _exact_request(name: str, raw: object, path: str) -> DeviceRequest:
    exact = mapping(raw, path)
    mode_path = join(path, "allocationMode")
    mode = opt_str(exact.get("allocationMode"), mode_path) or "ExactCount"
    if mode not in _ALLOCATION_MODES:
        raise FieldError(mode_path, f"must be one of {', '.join(_ALLOCATION_MODES)}, got {describe(mode)}")
    count = exact.get("count")
    count_path = join(path, "count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise FieldError(count_path, f"must be a positive integer, got {describe(count)}")
    admin = opt_bool(exact.get("adminAccess"), join(path, "adminAccess"), False)
    tolerations = sequence(exact.get("tolerations"), join(path, "tolerations"))
    unsupported: str | None = None
    if mode == "All":
        unsupported = UNSUPPORTED_ALL
    elif admin:
        unsupported = UNSUPPORTED_ADMIN_ACCESS
    elif tolerations:
        unsupported = UNSUPPORTED_TOLERATIONS
    return DeviceRequest(
        name=name,
        device_class=req_str(exact.get("deviceClassName"), join(path, "deviceClassName")),
        count=count if count is not None and mode == "ExactCount" else 1,
        selectors=_selectors(exact.get("selectors"), join(path, "selectors")),
        unsupported=unsupported,
    )


def _claim_spec(spec: dict[str, Any], path: str) -> tuple[tuple[DeviceRequest, ...], tuple[DeviceConfig, ...],
                                                           str | None]:
    """(requests, config, unsupported) of a ResourceClaimSpec at ``path``."""
    devices_path = join(path, "devices")
    devices = mapping(spec.get("devices"), devices_path)
    requests: list[DeviceRequest] = []
    names: set[str] = set()
    for item_path, item in mapping_items(devices.get("requests"), join(devices_path, "requests")):
        name = req_str(item.get("name"), join(item_path, "name"))
        if name in names:
            raise FieldError(join(item_path, "name"), f"duplicate request {describe(name)}")
        names.add(name)
        exact, first = item.get("exactly"), item.get("firstAvailable")
        if (exact is None) == (first is None):
            raise FieldError(item_path, "must set exactly one of exactly, firstAvailable")
        if first is not None:
            sequence(first, join(item_path, "firstAvailable"))
            requests.append(DeviceRequest(name=name, unsupported=UNSUPPORTED_FIRST_AVAILABLE))
        else:
            requests.append(_exact_request(name, exact, join(item_path, "exactly")))
    config: list[DeviceConfig] = []
    for item_path, item in mapping_items(devices.get("config"), join(devices_path, "config")):
        names_path = join(item_path, "requests")
        wanted = tuple(req_str(r, f"{names_path}[{i}]") for i, r in enumerate(sequence(item.get("requests"),
                                                                                         names_path)))
        config.append(_opaque(item, item_path, wanted))
    constraints = sequence(devices.get("constraints"), join(devices_path, "constraints"))
    return tuple(requests), tuple(config), UNSUPPORTED_CONSTRAINTS if constraints else None


def _allocated_node(value: object, path: str) -> NodeName | None:
    """The node of ``status.allocation.nodeSelector`` when it is one ``metadata.name In [node]``
    field term (as gpufleet and kube-scheduler write it for node-local devices); else None."""
    selector = mapping(value, path)
    terms = sequence(selector.get("nodeSelectorTerms"), join(path, "nodeSelectorTerms"))
    if len(terms) != 1 or not isinstance(terms[0], dict):
        return None
    fields = terms[0].get("matchFields")
    if not isinstance(fields, list) or len(fields) != 1 or not isinstance(fields[0], dict):
        return None
    field = fields[0]
    values = field.get("values")
    if (field.get("key") != "metadata.name" or field.get("operator") != "In" or not isinstance(values, list)
            or len(values) != 1 or not isinstance(values[0], str) or not values[0]):
        return None
    return NodeName(values[0])


def resource_claim_from_dict(doc: dict[str, Any]) -> ResourceClaim:
    """A resource.k8s.io/v1 ResourceClaim: its requests, configs, allocation and reservations."""
    meta = mapping(doc.get("metadata"), "metadata")
    spec = mapping(doc.get("spec"), "spec")
    status = mapping(doc.get("status"), "status")
    requests, config, unsupported = _claim_spec(spec, "spec")
    allocation_path = "status.allocation"
    allocation = mapping(status.get("allocation"), allocation_path)
    results_path = join(allocation_path, "devices.results")
    devices = mapping(allocation.get("devices"), join(allocation_path, "devices"))
    results = tuple(
        DeviceResult(
            request=req_str(item.get("request"), join(path, "request")),
            driver=req_str(item.get("driver"), join(path, "driver")),
            pool=req_str(item.get("pool"), join(path, "pool")),
            device=req_str(item.get("device"), join(path, "device")),
        )
        for path, item in mapping_items(devices.get("results"), results_path)
    )
    reserved: list[str] = []
    for path, item in mapping_items(status.get("reservedFor"), "status.reservedFor"):
        resource = opt_str(item.get("resource"), join(path, "resource"))
        group = opt_str(item.get("apiGroup"), join(path, "apiGroup")) or ""
        name = req_str(item.get("name"), join(path, "name"))
        if resource == "pods" and group == "" and name not in reserved:
            reserved.append(name)
    return ResourceClaim(
        namespace=opt_str(meta.get("namespace"), "metadata.namespace") or "default",
        name=req_str(meta.get("name"), "metadata.name"),
        uid=opt_str(meta.get("uid"), "metadata.uid") or "",
        requests=requests,
        config=config,
        unsupported=unsupported,
        allocation=results,
        allocated_node=_allocated_node(allocation.get("nodeSelector"), join(allocation_path, "nodeSelector")),
        reserved_for=tuple(reserved),
        deleting=timestamp(meta.get("deletionTimestamp"), "metadata.deletionTimestamp") is not None,
    )


def claim_template_from_dict(doc: dict[str, Any]) -> ClaimTemplate:
    """A resource.k8s.io/v1 ResourceClaimTemplate (the claim spec is its ``spec.spec``)."""
    meta = mapping(doc.get("metadata"), "metadata")
    spec = mapping(doc.get("spec"), "spec")
    requests, config, unsupported = _claim_spec(mapping(spec.get("spec"), "spec.spec"), "spec.spec")
    return ClaimTemplate(
        namespace=opt_str(meta.get("namespace"), "metadata.namespace") or "default",
        name=req_str(meta.get("name"), "metadata.name"),
        requests=requests,
        config=config,
        unsupported=unsupported,
    )


def pod_resource_claims(spec: dict[str, Any], status: dict[str, Any]) -> tuple[PodClaim, ...]:
    """Pod.resource_claims from ``spec.resourceClaims`` and ``status.resourceClaimStatuses``."""
    generated: dict[str, str] = {}
    for path, item in mapping_items(status.get("resourceClaimStatuses"), "status.resourceClaimStatuses"):
        entry = req_str(item.get("name"), join(path, "name"))
        claim = opt_str(item.get("resourceClaimName"), join(path, "resourceClaimName"))
        if claim:
            generated[entry] = claim
    out: list[PodClaim] = []
    names: set[str] = set()
    for path, item in mapping_items(spec.get("resourceClaims"), "spec.resourceClaims"):
        name = req_str(item.get("name"), join(path, "name"))
        if name in names:
            raise FieldError(join(path, "name"), f"duplicate entry {describe(name)}")
        names.add(name)
        claim = opt_str(item.get("resourceClaimName"), join(path, "resourceClaimName")) or None
        template = opt_str(item.get("resourceClaimTemplateName"), join(path, "resourceClaimTemplateName")) or None
        if (claim is None) == (template is None):
            raise FieldError(path, "must set exactly one of resourceClaimName, resourceClaimTemplateName")
        out.append(PodClaim(name=name, claim=claim, template=template,
                            generated=generated.get(name) if template is not None else None))
    return tuple(out)
