"""Kubernetes core objects (v1 Node, v1 Pod, v1 Namespace, scheduling.k8s.io PriorityClass) -> domain objects.

Hand-written field access rather than pydantic: a snapshot may hold tens of thousands of pods,
and reading one must cost a few microseconds. Unknown fields are ignored, as Kubernetes clients
do; fields that gpufleet reads are checked and reported with their full path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from gpufleet.adapters._fields import (
    FieldError,
    join,
    mapping,
    mapping_items,
    opt_bool,
    opt_int32,
    opt_str,
    quantity,
    req_str,
    scalar_text,
    sequence,
    str_map,
    timestamp,
)
from gpufleet.adapters._k8s_dra import pod_resource_claims
from gpufleet.adapters.errors import describe
from gpufleet.adapters.quantity import QuantityError, to_milli
from gpufleet.domain import (
    ANNOTATION_GPU_BLOCKS,
    ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_NVLINK_DOMAINS,
    ANNOTATION_UNHEALTHY_GPUS,
    BLOCKS_PER_GPU,
    GPU,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRODUCT,
    LABEL_POD_GROUP,
    LABEL_PREEMPTIBLE,
    LABEL_QUEUE,
    MILLI,
    PODS,
    WILDCARD_IP,
    HostPort,
    LabelSelector,
    Namespace,
    Node,
    NodeName,
    PersistentVolume,
    Pod,
    PodAffinityTerm,
    PriorityClass,
    QueueName,
    SelectorRequirement,
    SelectorTerm,
    SpreadConstraint,
    StorageClass,
    Taint,
    TaintEffect,
    Toleration,
    VolumeClaim,
)
from gpufleet.domain.wire import (
    ANNOTATION_DEFAULT_CLASS,
    ANNOTATION_QUEUE_GRANT,
    ANNOTATION_SELECTED_NODE,
    ANNOTATION_SUBMITTED_BY,
    RESOURCE_MPS_SHARE,
)

__all__ = [
    "claim_from_dict",
    "namespace_from_dict",
    "node_from_dict",
    "persistent_volume_from_dict",
    "pod_from_dict",
    "priority_class_from_dict",
    "storage_class_from_dict",
]

_EFFECTS = {effect.value: effect for effect in TaintEffect}
_EFFECT_NAMES = ", ".join(_EFFECTS)
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_INDEX = re.compile(r"\s*(\d{1,6})\s*")
_RANGE = re.compile(r"\s*(\d{1,6})\s*-\s*(\d{1,6})\s*")
_BLOCKS = re.compile(r"\s*\d{1,3}\s*")
_MIB = re.compile(r"\s*\d{1,9}\s*")
_INTEGER = re.compile(r"[+-]?\d{1,18}")


def _meta_path(field: str, key: str) -> str:
    return f"metadata.{field}.{key}"


# ----------------------------------------------------------------------------------------- Node


def _index_list(text: str, path: str) -> list[int]:
    """ "0,1,3" -> [0, 1, 3]; "" -> []."""
    if not text.strip():
        return []
    out: list[int] = []
    for part in text.split(","):
        match = _INDEX.fullmatch(part)
        if match is None:
            raise FieldError(path, f'must be GPU indices such as "0,1", got {describe(text)}')
        out.append(int(match.group(1)))
    if len(set(out)) != len(out):
        raise FieldError(path, f"repeats a GPU index: {describe(text)}")
    return out


def _nvlink_domains(text: str, path: str) -> tuple[tuple[int, ...], ...]:
    """ "0-3;4-7" or "0,1;2,3" (ranges and lists may be mixed) -> ((0, 1, 2, 3), (4, 5, 6, 7))."""
    domains: list[tuple[int, ...]] = []
    seen: set[int] = set()
    for group in text.split(";"):
        if not group.strip():
            continue
        members: list[int] = []
        for part in group.split(","):
            single = _INDEX.fullmatch(part)
            if single is not None:
                members.append(int(single.group(1)))
                continue
            span = _RANGE.fullmatch(part)
            if span is None or int(span.group(1)) > int(span.group(2)):
                raise FieldError(
                    path, f'must be GPU index groups such as "0-3;4-7" or "0,1;2,3", got {describe(text)}'
                )
            members.extend(range(int(span.group(1)), int(span.group(2)) + 1))
        for index in members:
            if index in seen:
                raise FieldError(path, f"GPU {index} appears twice in {describe(text)}")
            seen.add(index)
        domains.append(tuple(sorted(members)))
    return tuple(domains)


_mappings = mapping_items  # the items of a list of mappings, each with its path


def _taints(value: object, path: str) -> tuple[Taint, ...]:
    out: list[Taint] = []
    for item_path, item in _mappings(value, path):
        key = req_str(item.get("key"), join(item_path, "key"))
        taint_value = scalar_text(item.get("value"), join(item_path, "value"))
        effect_raw = item.get("effect")
        effect = _EFFECTS.get(effect_raw) if isinstance(effect_raw, str) else None
        if effect is None:
            if effect_raw is None:
                raise FieldError(join(item_path, "effect"), "required field missing")
            raise FieldError(
                join(item_path, "effect"), f"must be one of {_EFFECT_NAMES}, got {describe(effect_raw)}"
            )
        out.append(Taint(key=key, value=taint_value, effect=effect))
    return tuple(out)


def node_from_dict(doc: dict[str, Any]) -> Node:
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    labels = str_map(meta.get("labels"), "metadata.labels")
    annotations = str_map(meta.get("annotations"), "metadata.annotations")
    spec = mapping(doc.get("spec"), "spec")
    status = mapping(doc.get("status"), "status")
    raw_alloc = status.get("allocatable")
    if raw_alloc is None:
        allocatable = _node_resources(status.get("capacity"), "status.capacity")
    else:
        allocatable = _node_resources(raw_alloc, "status.allocatable")

    unhealthy: frozenset[int] = frozenset()
    text = annotations.get(ANNOTATION_UNHEALTHY_GPUS)
    if text is not None:
        unhealthy = frozenset(_index_list(text, _meta_path("annotations", ANNOTATION_UNHEALTHY_GPUS)))
    nvlink: tuple[tuple[int, ...], ...] = ()
    text = annotations.get(ANNOTATION_NVLINK_DOMAINS)
    if text is not None:
        nvlink = _nvlink_domains(text, _meta_path("annotations", ANNOTATION_NVLINK_DOMAINS))
    memory_mib: int | None = None
    text = labels.get(LABEL_GPU_MEMORY)
    if text is not None:
        if _MIB.fullmatch(text) is None or int(text) <= 0:
            raise FieldError(
                _meta_path("labels", LABEL_GPU_MEMORY),
                f"must be the memory of one GPU in MiB (a positive integer), got {describe(text)}",
            )
        memory_mib = int(text)
    return Node(
        name=NodeName(name),
        labels=labels,
        annotations=annotations,
        allocatable=allocatable,
        taints=_taints(spec.get("taints"), "spec.taints"),
        unschedulable=opt_bool(spec.get("unschedulable"), "spec.unschedulable", False),
        unhealthy_gpus=unhealthy,
        nvlink_domains=nvlink,
        gpu_memory_mib=memory_mib,
        gpu_product=labels.get(LABEL_GPU_PRODUCT),
    )


def _node_resources(value: object, path: str) -> dict[str, int]:
    raw = mapping(value, path)
    out: dict[str, int] = {}
    for key, item in raw.items():
        if not isinstance(key, str):
            raise FieldError(path, f"resource names must be strings, got {describe(key)}")
        out[key] = quantity(item, join(path, key))
    return out


# ------------------------------------------------------------------------------------------ Pod


_extended_cache: dict[str, bool] = {}


def _is_extended(name: str) -> bool:
    """Extended resources (nvidia.com/gpu, nvidia.com/mig-*, ...): a domain-prefixed name outside
    kubernetes.io. Kubernetes takes them from limits and requires whole numbers."""
    known = _extended_cache.get(name)
    if known is None:
        known = "/" in name and not name.startswith("kubernetes.io/") and ".kubernetes.io/" not in name
        if len(_extended_cache) < 4096:
            _extended_cache[name] = known
    return known


def _container_requests(raw: object, path: str) -> dict[str, int]:
    """One container's effective requests: request if given, else limit; extended resources
    from limits, else requests. "pods" is never a container resource and is skipped, nor is
    ``gpufleet.dev/mps-share``.

    This runs for every container of every pod: paths are only built when something is wrong."""
    if not isinstance(raw, dict):
        raise FieldError(path, f"must be a mapping, got {describe(raw)}")
    resources = raw.get("resources")
    if resources is None:
        return {}
    if not isinstance(resources, dict):
        raise FieldError(f"{path}.resources", f"must be a mapping, got {describe(resources)}")
    out: dict[str, int] = {}
    for section in ("limits", "requests"):
        entries = resources.get(section)
        if entries is None:
            continue
        if not isinstance(entries, dict):
            raise FieldError(f"{path}.resources.{section}", f"must be a mapping, got {describe(entries)}")
        for name, value in entries.items():
            if name in (PODS, RESOURCE_MPS_SHARE):
                # mps-share is how a fractional pod's container asks gpufleet's device plugin for
                # its GPU (the webhook adds it): a token, not capacity; the pod's blocks are counted.
                continue
            try:
                amount = to_milli(value)
                extended = _is_extended(name)
            except (QuantityError, TypeError) as err:
                if not isinstance(name, str):
                    raise FieldError(
                        f"{path}.resources.{section}", f"resource names must be strings, got {describe(name)}"
                    ) from None
                raise FieldError(f"{path}.resources.{section}.{name}", str(err)) from None
            if extended:
                if amount % MILLI:
                    hint = (
                        f"; use the {ANNOTATION_GPU_BLOCKS} annotation for a fraction" if name == GPU else ""
                    )
                    raise FieldError(
                        f"{path}.resources.{section}.{name}",
                        f"extended resource must be a whole number, got {describe(value)}{hint}",
                    )
                if section == "requests" and name in out:
                    continue  # limits win for extended resources
            out[name] = amount  # requests (second) win for the others
    return out


def _add(into: dict[str, int], other: dict[str, int]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def _max_into(into: dict[str, int], other: dict[str, int]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount


def _pod_requests(spec: dict[str, Any]) -> dict[str, int]:
    containers_raw = spec.get("containers")
    if containers_raw is None:
        raise FieldError("spec.containers", "required field missing")
    containers = sequence(containers_raw, "spec.containers")
    if not containers:
        raise FieldError("spec.containers", "must list at least one container")
    total: dict[str, int] = {}
    for i, raw in enumerate(containers):
        _add(total, _container_requests(raw, f"spec.containers[{i}]"))
    init_raw = spec.get("initContainers")
    if init_raw is not None:
        # Kubernetes rules, sidecars included: restartable init containers keep running and add up.
        sidecars: dict[str, int] = {}
        init_peak: dict[str, int] = {}
        for i, raw in enumerate(sequence(init_raw, "spec.initContainers")):
            path = f"spec.initContainers[{i}]"
            requests = _container_requests(raw, path)
            policy = opt_str(mapping(raw, path).get("restartPolicy"), join(path, "restartPolicy"))
            if policy == "Always":
                _add(sidecars, requests)
                _max_into(init_peak, sidecars)
            else:
                step = dict(sidecars)
                _add(step, requests)
                _max_into(init_peak, step)
        _add(total, sidecars)
        _max_into(total, init_peak)
    overhead = spec.get("overhead")
    if overhead is not None:
        for name, amount in _node_resources(overhead, "spec.overhead").items():
            if name != PODS:
                total[name] = total.get(name, 0) + amount
    return total


def _requirements(value: object, path: str, fields: bool,
                  operators: tuple[str, ...] = _SELECTOR_OPERATORS) -> tuple[SelectorRequirement, ...]:
    out: list[SelectorRequirement] = []
    for i, raw in enumerate(sequence(value, path)):
        item_path = f"{path}[{i}]"
        if raw is None:
            raise FieldError(item_path, "must be a mapping, got null")
        item = mapping(raw, item_path)
        key = req_str(item.get("key"), join(item_path, "key"))
        op_path = join(item_path, "operator")
        operator = item.get("operator")
        allowed = ("In", "NotIn") if fields else operators
        if operator is None:
            raise FieldError(op_path, "required field missing")
        if operator not in allowed:
            raise FieldError(op_path, f"must be one of {', '.join(allowed)}, got {describe(operator)}")
        values_path = join(item_path, "values")
        values = tuple(
            scalar_text(v, f"{values_path}[{j}]")
            for j, v in enumerate(sequence(item.get("values"), values_path))
        )
        if fields and key != "metadata.name":
            raise FieldError(
                join(item_path, "key"), f'only "metadata.name" is supported, got {describe(key)}'
            )
        if operator in ("In", "NotIn") and not values:
            raise FieldError(values_path, f"must list at least one value for operator {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            raise FieldError(values_path, f"must be empty for operator {operator}")
        if operator in ("Gt", "Lt") and (len(values) != 1 or _INTEGER.fullmatch(values[0]) is None):
            raise FieldError(values_path, f"must be exactly one integer for operator {operator}")
        out.append(SelectorRequirement(key=key, operator=str(operator), values=values))
    return tuple(out)


def _node_term(raw_term: object, term_path: str) -> SelectorTerm:
    """One nodeSelectorTerm (required terms and preferred terms' ``preference`` alike)."""
    if raw_term is None:
        raise FieldError(term_path, "must be a mapping, got null")
    term = mapping(raw_term, term_path)
    return SelectorTerm(
        expressions=_requirements(term.get("matchExpressions"), join(term_path, "matchExpressions"), False),
        fields=_requirements(term.get("matchFields"), join(term_path, "matchFields"), True),
    )


def _affinity(spec: dict[str, Any]) -> tuple[SelectorTerm, ...]:
    raw = spec.get("affinity")
    if raw is None:
        return ()
    path = "spec.affinity"
    node_affinity = mapping(mapping(raw, path).get("nodeAffinity"), join(path, "nodeAffinity"))
    path = join(path, "nodeAffinity")
    required_raw = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required_raw is None:
        return ()
    path = join(path, "requiredDuringSchedulingIgnoredDuringExecution")
    required = mapping(required_raw, path)
    return _node_selector_terms(required.get("nodeSelectorTerms"), join(path, "nodeSelectorTerms"))


def _node_selector_terms(value: object, path: str) -> tuple[SelectorTerm, ...]:
    """A NodeSelector's nodeSelectorTerms (pod node affinity, PV node affinity): any one term."""
    terms_raw = sequence(value, path)
    if not terms_raw:
        raise FieldError(path, "must list at least one term")
    return tuple(_node_term(raw_term, f"{path}[{i}]") for i, raw_term in enumerate(terms_raw))


def _weighted(value: object, path: str) -> Iterator[tuple[str, dict[str, Any], int]]:
    """The items of a preferredDuringScheduling... list: (path, the item, its weight 1..100)."""
    for item_path, weighted in _mappings(value, path):
        weight = opt_int32(weighted.get("weight"), join(item_path, "weight"))
        if weight is None or not 1 <= weight <= 100:
            raise FieldError(join(item_path, "weight"), f"must be an integer 1..100, got {describe(weight)}")
        yield item_path, weighted, weight


def _preferred_node_affinity(spec: dict[str, Any]) -> tuple[tuple[int, SelectorTerm], ...]:
    """nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution: (weight 1..100, preference)."""
    path = "spec.affinity"
    node_affinity = mapping(mapping(spec.get("affinity"), path).get("nodeAffinity"), join(path, "nodeAffinity"))
    path = join(join(path, "nodeAffinity"), _PREFERRED)
    out: list[tuple[int, SelectorTerm]] = []
    for item_path, weighted, weight in _weighted(node_affinity.get(_PREFERRED), path):
        preference = weighted.get("preference")
        if preference is None:
            raise FieldError(join(item_path, "preference"), "required field missing")
        out.append((weight, _node_term(preference, join(item_path, "preference"))))
    return tuple(out)


_POD_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _label_selector(value: object, path: str) -> LabelSelector | None:
    """A metav1.LabelSelector; missing or null: None (matches no pod)."""
    if value is None:
        return None
    raw = mapping(value, path)
    labels = str_map(raw.get("matchLabels"), join(path, "matchLabels"))
    expressions = _requirements(raw.get("matchExpressions"), join(path, "matchExpressions"), False, _POD_OPERATORS)
    return LabelSelector(tuple(sorted(labels.items())), expressions)


def _label_keys(value: object, path: str) -> tuple[str, ...]:
    return tuple(req_str(v, f"{path}[{i}]") for i, v in enumerate(sequence(value, path)))


def _merge_label_keys(selector: LabelSelector | None, labels: dict[str, str], match: tuple[str, ...],
                      mismatch: tuple[str, ...] = ()) -> LabelSelector | None:
    """matchLabelKeys / mismatchLabelKeys folded into the selector as kube-apiserver does: each key
    the pod has adds `key In (its value)` (or NotIn); keys the pod lacks are ignored."""
    extra = [SelectorRequirement(k, "In", (labels[k],)) for k in match if k in labels]
    extra += [SelectorRequirement(k, "NotIn", (labels[k],)) for k in mismatch if k in labels]
    if not extra or selector is None:
        return selector
    return LabelSelector(selector.match_labels, selector.match_expressions + tuple(extra))


def _affinity_term(raw: object, path: str, labels: dict[str, str], weight: int) -> PodAffinityTerm:
    if raw is None:
        raise FieldError(path, "must be a mapping, got null")
    term = mapping(raw, path)
    namespaces = tuple(
        req_str(v, f"{join(path, 'namespaces')}[{i}]")
        for i, v in enumerate(sequence(term.get("namespaces"), join(path, "namespaces")))
    )
    selector = _merge_label_keys(
        _label_selector(term.get("labelSelector"), join(path, "labelSelector")), labels,
        _label_keys(term.get("matchLabelKeys"), join(path, "matchLabelKeys")),
        _label_keys(term.get("mismatchLabelKeys"), join(path, "mismatchLabelKeys")),
    )
    return PodAffinityTerm(
        topology_key=req_str(term.get("topologyKey"), join(path, "topologyKey")),
        selector=selector,
        namespaces=namespaces,
        namespace_selector=_label_selector(term.get("namespaceSelector"), join(path, "namespaceSelector")),
        weight=weight,
    )


def _pod_affinity(spec: dict[str, Any], kind: str, labels: dict[str, str]) -> tuple[PodAffinityTerm, ...]:
    """Required (weight 0) then preferred terms of spec.affinity.podAffinity / podAntiAffinity."""
    affinity = mapping(spec.get("affinity"), "spec.affinity")
    path = join("spec.affinity", kind)
    raw = mapping(affinity.get(kind), path)
    if not raw:
        return ()
    out: list[PodAffinityTerm] = []
    req_path = join(path, _REQUIRED)
    for i, item in enumerate(sequence(raw.get(_REQUIRED), req_path)):
        out.append(_affinity_term(item, f"{req_path}[{i}]", labels, 0))
    for item_path, weighted, weight in _weighted(raw.get(_PREFERRED), join(path, _PREFERRED)):
        out.append(_affinity_term(weighted.get("podAffinityTerm"), join(item_path, "podAffinityTerm"), labels, weight))
    return tuple(out)


def _choice(value: object, path: str, allowed: tuple[str, ...], default: str | None) -> str:
    if value is None and default is not None:
        return default
    if value is None:
        raise FieldError(path, "required field missing")
    if value not in allowed:
        raise FieldError(path, f"must be one of {', '.join(allowed)}, got {describe(value)}")
    return str(value)


def _spread_constraints(spec: dict[str, Any], labels: dict[str, str]) -> tuple[SpreadConstraint, ...]:
    path = "spec.topologySpreadConstraints"
    out: list[SpreadConstraint] = []
    for i, raw in enumerate(sequence(spec.get("topologySpreadConstraints"), path)):
        item_path = f"{path}[{i}]"
        if raw is None:
            raise FieldError(item_path, "must be a mapping, got null")
        item = mapping(raw, item_path)
        skew = opt_int32(item.get("maxSkew"), join(item_path, "maxSkew"))
        if skew is None:
            raise FieldError(join(item_path, "maxSkew"), "required field missing")
        if skew < 1:
            raise FieldError(join(item_path, "maxSkew"), f"must be at least 1, got {skew}")
        when = _choice(item.get("whenUnsatisfiable"), join(item_path, "whenUnsatisfiable"),
                       ("DoNotSchedule", "ScheduleAnyway"), None)
        min_domains = opt_int32(item.get("minDomains"), join(item_path, "minDomains"))
        if min_domains is not None:
            if min_domains < 1:
                raise FieldError(join(item_path, "minDomains"), f"must be at least 1, got {min_domains}")
            if when != "DoNotSchedule":
                raise FieldError(join(item_path, "minDomains"), "may only be set with whenUnsatisfiable DoNotSchedule")
        selector = _merge_label_keys(
            _label_selector(item.get("labelSelector"), join(item_path, "labelSelector")), labels,
            _label_keys(item.get("matchLabelKeys"), join(item_path, "matchLabelKeys")),
        )
        out.append(SpreadConstraint(
            max_skew=skew,
            topology_key=req_str(item.get("topologyKey"), join(item_path, "topologyKey")),
            when_unsatisfiable=when,
            selector=selector,
            min_domains=min_domains,
            node_affinity_policy=_choice(item.get("nodeAffinityPolicy"), join(item_path, "nodeAffinityPolicy"),
                                         ("Honor", "Ignore"), "Honor"),
            node_taints_policy=_choice(item.get("nodeTaintsPolicy"), join(item_path, "nodeTaintsPolicy"),
                                       ("Honor", "Ignore"), "Ignore"),
        ))
    return tuple(out)


def _tolerations(value: object) -> tuple[Toleration, ...]:
    path = "spec.tolerations"
    out: list[Toleration] = []
    for i, raw in enumerate(sequence(value, path)):
        item_path = f"{path}[{i}]"
        if raw is None:
            raise FieldError(item_path, "must be a mapping, got null")
        item = mapping(raw, item_path)
        key = opt_str(item.get("key"), join(item_path, "key")) or None
        operator = item.get("operator")
        if operator is None or operator == "":
            operator = "Equal"
        if operator not in ("Equal", "Exists"):
            raise FieldError(
                join(item_path, "operator"), f"must be Equal or Exists, got {describe(operator)}"
            )
        value_text = scalar_text(item.get("value"), join(item_path, "value"))
        if operator == "Exists" and value_text:
            raise FieldError(join(item_path, "value"), "must be empty when operator is Exists")
        if key is None and operator != "Exists":
            raise FieldError(join(item_path, "operator"), "must be Exists when key is empty")
        effect_raw = item.get("effect")
        effect: TaintEffect | None = None
        if effect_raw is not None and effect_raw != "":
            effect = _EFFECTS.get(effect_raw) if isinstance(effect_raw, str) else None
            if effect is None:
                raise FieldError(
                    join(item_path, "effect"), f"must be one of {_EFFECT_NAMES}, got {describe(effect_raw)}"
                )
        out.append(Toleration(key=key, operator=str(operator), value=value_text, effect=effect))
    return tuple(out)


_PROTOCOLS = ("TCP", "UDP", "SCTP")


def _host_ports(containers: list[Any]) -> tuple[HostPort, ...]:
    """(protocol, host IP, port) of every containers[].ports[] entry with a hostPort: the NodePorts
    filter's view. An empty hostIP is every address (0.0.0.0); protocol defaults to TCP."""
    out: set[HostPort] = set()
    for i, container in enumerate(containers):
        raw_ports = container.get("ports") if isinstance(container, dict) else None
        if raw_ports is None:
            continue
        path = f"spec.containers[{i}].ports"
        for j, raw in enumerate(sequence(raw_ports, path)):
            item_path = f"{path}[{j}]"
            if raw is None:
                raise FieldError(item_path, "must be a mapping, got null")
            item = mapping(raw, item_path)
            number = item.get("hostPort")
            if number is None or number == 0:
                continue
            if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= 65535:
                raise FieldError(join(item_path, "hostPort"), f"must be a port number 1..65535, got {describe(number)}")
            protocol = opt_str(item.get("protocol"), join(item_path, "protocol")) or "TCP"
            if protocol not in _PROTOCOLS:
                raise FieldError(
                    join(item_path, "protocol"), f"must be one of {', '.join(_PROTOCOLS)}, got {describe(protocol)}"
                )
            ip = opt_str(item.get("hostIP"), join(item_path, "hostIP")) or WILDCARD_IP
            out.add((protocol, ip, number))
    return tuple(sorted(out))


def _any_ports(containers: list[Any]) -> bool:
    """Whether any container lists ports (most pods of a GPU cluster do not: no further work)."""
    return any(isinstance(c, dict) and c.get("ports") is not None for c in containers)


def _scheduling_gates(value: object) -> tuple[str, ...]:
    """spec.schedulingGates: [{name: ...}] -> the names, sorted and without repeats."""
    path = "spec.schedulingGates"
    names: set[str] = set()
    for i, raw in enumerate(sequence(value, path)):
        item_path = f"{path}[{i}]"
        if raw is None:
            raise FieldError(item_path, "must be a mapping, got null")
        names.add(req_str(mapping(raw, item_path).get("name"), join(item_path, "name")))
    return tuple(sorted(names))


def pod_from_dict(doc: dict[str, Any]) -> Pod:
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    namespace_raw = meta.get("namespace")
    namespace = opt_str(namespace_raw, "metadata.namespace") or "default"
    labels = str_map(meta.get("labels"), "metadata.labels")
    annotations = str_map(meta.get("annotations"), "metadata.annotations")
    spec_raw = doc.get("spec")
    if spec_raw is None:
        raise FieldError("spec", "required field missing")
    spec = mapping(spec_raw, "spec")
    status = mapping(doc.get("status"), "status")

    requests = _pod_requests(spec)

    gpu_blocks: int | None = None
    text = annotations.get(ANNOTATION_GPU_BLOCKS)
    if text is not None:
        if _BLOCKS.fullmatch(text) is None or not 1 <= int(text) <= BLOCKS_PER_GPU:
            raise FieldError(
                _meta_path("annotations", ANNOTATION_GPU_BLOCKS),
                f"must be an integer 1..{BLOCKS_PER_GPU}, got {describe(text)}",
            )
        gpu_blocks = int(text)
    gpu_memory: int | None = None
    text = annotations.get(ANNOTATION_GPU_MEMORY)
    if text is not None:
        path = _meta_path("annotations", ANNOTATION_GPU_MEMORY)
        milli = quantity(text, path)
        if milli <= 0:
            raise FieldError(path, f"must be a positive amount of memory, got {describe(text)}")
        gpu_memory = -(-milli // MILLI)
    if (gpu_blocks is not None or gpu_memory is not None) and requests.get(GPU, 0) > 0:
        key = ANNOTATION_GPU_BLOCKS if gpu_blocks is not None else ANNOTATION_GPU_MEMORY
        raise FieldError(
            _meta_path("annotations", key),
            f"a fractional GPU annotation cannot be combined with a {GPU} request "
            f"({requests[GPU] // MILLI} GPUs)",
        )

    preemptible: bool | None = None
    text = labels.get(LABEL_PREEMPTIBLE)
    if text is not None:
        if text not in ("true", "false"):
            raise FieldError(
                _meta_path("labels", LABEL_PREEMPTIBLE), f'must be "true" or "false", got {describe(text)}'
            )
        preemptible = text == "true"

    scheduler = opt_str(spec.get("schedulerName"), "spec.schedulerName") or "default-scheduler"
    node_name = opt_str(spec.get("nodeName"), "spec.nodeName") or None
    phase = opt_str(status.get("phase"), "status.phase") or "Pending"

    gpu_index: tuple[int, ...] = ()
    text = annotations.get(ANNOTATION_GPU_INDEX)
    if text is not None and node_name is not None:
        gpu_index = tuple(_index_list(text, _meta_path("annotations", ANNOTATION_GPU_INDEX)))

    queue = labels.get(LABEL_QUEUE)
    node_selector_raw = spec.get("nodeSelector")
    tolerations_raw = spec.get("tolerations")
    gates_raw = spec.get("schedulingGates")
    containers = spec["containers"]  # checked by _pod_requests
    return Pod(
        namespace=namespace,
        name=name,
        labels=labels,
        annotations=annotations,
        scheduler_name=scheduler,
        requests=requests,
        gpu_blocks=gpu_blocks,
        gpu_memory_bytes=gpu_memory,
        priority=opt_int32(spec.get("priority"), "spec.priority"),
        priority_class_name=opt_str(spec.get("priorityClassName"), "spec.priorityClassName") or None,
        preemptible_label=preemptible,
        queue_label=QueueName(queue) if queue else None,
        group_label=labels.get(LABEL_POD_GROUP) or None,
        node_name=None if node_name is None else NodeName(node_name),
        phase=phase,
        creation_time=timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp") or 0.0,
        start_time=timestamp(status.get("startTime"), "status.startTime"),
        node_selector={} if node_selector_raw is None else str_map(node_selector_raw, "spec.nodeSelector"),
        affinity=_affinity(spec),
        tolerations=() if tolerations_raw is None else _tolerations(tolerations_raw),
        gpu_index=gpu_index,
        scheduling_gates=() if gates_raw is None else _scheduling_gates(gates_raw),
        host_ports=_host_ports(containers) if _any_ports(containers) else (),
        affinity_terms=_pod_affinity(spec, "podAffinity", labels) if "affinity" in spec else (),
        anti_affinity_terms=_pod_affinity(spec, "podAntiAffinity", labels) if "affinity" in spec else (),
        spread_constraints=_spread_constraints(spec, labels) if "topologySpreadConstraints" in spec else (),
        **(_pod_claims(spec.get("volumes"), name) if "volumes" in spec else {}),
        preferred_affinity=_preferred_node_affinity(spec) if "affinity" in spec else (),
        submitted_by=annotations.get(ANNOTATION_SUBMITTED_BY) or None,
        queue_grant=QueueName(grant) if (grant := annotations.get(ANNOTATION_QUEUE_GRANT)) else None,
        resource_claims=pod_resource_claims(spec, status) if "resourceClaims" in spec else (),
    )


def _pod_claims(value: object, pod_name: str) -> dict[str, Any]:
    """Pod.claims and Pod.ephemeral_claims from spec.volumes (docs/semantics-notes.md, "Volumes"):
    persistentVolumeClaim.claimName, and "<pod>-<volume>" for each generic ephemeral volume."""
    path = "spec.volumes"
    claims: dict[str, None] = {}
    ephemeral: set[str] = set()
    for i, raw in enumerate(sequence(value, path)):
        item_path = f"{path}[{i}]"
        if raw is None:
            raise FieldError(item_path, "must be a mapping, got null")
        item = mapping(raw, item_path)
        pvc = item.get("persistentVolumeClaim")
        if pvc is not None:
            pvc_path = join(item_path, "persistentVolumeClaim")
            claims[req_str(mapping(pvc, pvc_path).get("claimName"), join(pvc_path, "claimName"))] = None
        elif item.get("ephemeral") is not None:
            mapping(item.get("ephemeral"), join(item_path, "ephemeral"))
            claim = f"{pod_name}-{req_str(item.get('name'), join(item_path, 'name'))}"
            claims[claim] = None
            ephemeral.add(claim)
    if not claims:
        return {}
    return {"claims": tuple(claims), "ephemeral_claims": frozenset(ephemeral)}


# -------------------------------------------------------------------------------- PriorityClass


def priority_class_from_dict(doc: dict[str, Any]) -> PriorityClass:
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    raw_value = doc.get("value")
    if raw_value is None:
        raise FieldError("value", "required field missing")
    value = opt_int32(raw_value, "value")
    if value is None:  # pragma: no cover - raw_value is not None here
        raise FieldError("value", "required field missing")
    return PriorityClass(
        name=name,
        value=value,
        global_default=opt_bool(doc.get("globalDefault"), "globalDefault", False),
    )


# ------------------------------------------------------------- PersistentVolumeClaim, PV, StorageClass

_ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
_VOLUME_MODES = ("Filesystem", "Block")
_BINDING_MODES = ("Immediate", "WaitForFirstConsumer")


def _storage_bytes(value: object, path: str) -> int:
    """A storage quantity ("10Gi") in bytes (rounded up); missing: 0."""
    if value is None:
        return 0
    return -(-quantity(value, path) // MILLI)


def _access_modes(value: object, path: str) -> tuple[str, ...]:
    out: list[str] = []
    for i, raw in enumerate(sequence(value, path)):
        mode = _choice(raw, f"{path}[{i}]", _ACCESS_MODES, None)
        if mode not in out:
            out.append(mode)
    return tuple(out)


def _deleting(meta: dict[str, Any]) -> bool:
    return timestamp(meta.get("deletionTimestamp"), "metadata.deletionTimestamp") is not None


def claim_from_dict(doc: dict[str, Any]) -> VolumeClaim:
    """A v1 PersistentVolumeClaim."""
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    namespace = opt_str(meta.get("namespace"), "metadata.namespace") or "default"
    annotations = str_map(meta.get("annotations"), "metadata.annotations")
    spec = mapping(doc.get("spec"), "spec")
    requests = mapping(mapping(spec.get("resources"), "spec.resources").get("requests"), "spec.resources.requests")
    selected = annotations.get(ANNOTATION_SELECTED_NODE)
    return VolumeClaim(
        namespace=namespace,
        name=name,
        uid=opt_str(meta.get("uid"), "metadata.uid") or "",
        storage_class=opt_str(spec.get("storageClassName"), "spec.storageClassName"),
        volume_name=opt_str(spec.get("volumeName"), "spec.volumeName") or None,
        request_bytes=_storage_bytes(requests.get("storage"), "spec.resources.requests.storage"),
        access_modes=_access_modes(spec.get("accessModes"), "spec.accessModes"),
        volume_mode=_choice(spec.get("volumeMode"), "spec.volumeMode", _VOLUME_MODES, "Filesystem"),
        selector=_label_selector(spec.get("selector"), "spec.selector"),
        selected_node=NodeName(selected) if selected else None,
        deleting=_deleting(meta),
    )


def persistent_volume_from_dict(doc: dict[str, Any]) -> PersistentVolume:
    """A v1 PersistentVolume."""
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    spec = mapping(doc.get("spec"), "spec")
    status = mapping(doc.get("status"), "status")
    capacity = mapping(spec.get("capacity"), "spec.capacity")
    affinity = mapping(spec.get("nodeAffinity"), "spec.nodeAffinity")
    required = affinity.get("required")
    terms: tuple[SelectorTerm, ...] = ()
    if required is not None:
        path = "spec.nodeAffinity.required"
        terms = _node_selector_terms(mapping(required, path).get("nodeSelectorTerms"), join(path, "nodeSelectorTerms"))
    claim: str | None = None
    ref_raw = spec.get("claimRef")
    if ref_raw is not None:
        ref = mapping(ref_raw, "spec.claimRef")
        ref_ns = opt_str(ref.get("namespace"), "spec.claimRef.namespace") or "default"
        claim = f"{ref_ns}/{req_str(ref.get('name'), 'spec.claimRef.name')}"
    return PersistentVolume(
        name=name,
        labels=str_map(meta.get("labels"), "metadata.labels"),
        storage_class=opt_str(spec.get("storageClassName"), "spec.storageClassName") or "",
        capacity_bytes=_storage_bytes(capacity.get("storage"), "spec.capacity.storage"),
        access_modes=_access_modes(spec.get("accessModes"), "spec.accessModes"),
        volume_mode=_choice(spec.get("volumeMode"), "spec.volumeMode", _VOLUME_MODES, "Filesystem"),
        node_affinity=terms,
        claim=claim,
        phase=opt_str(status.get("phase"), "status.phase") or "Available",
    )


def _allowed_topologies(value: object, path: str) -> tuple[SelectorTerm, ...]:
    """allowedTopologies: [{matchLabelExpressions: [{key, values}]}] -> terms of "key In values"."""
    terms: list[SelectorTerm] = []
    for i, raw in enumerate(sequence(value, path)):
        term_path = f"{path}[{i}]"
        if raw is None:
            raise FieldError(term_path, "must be a mapping, got null")
        exprs_path = join(term_path, "matchLabelExpressions")
        expressions: list[SelectorRequirement] = []
        for j, raw_expr in enumerate(sequence(mapping(raw, term_path).get("matchLabelExpressions"), exprs_path)):
            expr_path = f"{exprs_path}[{j}]"
            if raw_expr is None:
                raise FieldError(expr_path, "must be a mapping, got null")
            expr = mapping(raw_expr, expr_path)
            values_path = join(expr_path, "values")
            values = tuple(
                scalar_text(v, f"{values_path}[{k}]") for k, v in enumerate(sequence(expr.get("values"), values_path))
            )
            if not values:
                raise FieldError(values_path, "must list at least one value")
            expressions.append(SelectorRequirement(req_str(expr.get("key"), join(expr_path, "key")), "In", values))
        terms.append(SelectorTerm(expressions=tuple(expressions)))
    return tuple(terms)


def storage_class_from_dict(doc: dict[str, Any]) -> StorageClass:
    """A storage.k8s.io/v1 StorageClass."""
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    annotations = str_map(meta.get("annotations"), "metadata.annotations")
    mode = _choice(doc.get("volumeBindingMode"), "volumeBindingMode", _BINDING_MODES, "Immediate")
    return StorageClass(
        name=name,
        provisioner=opt_str(doc.get("provisioner"), "provisioner") or "",
        wait_for_first_consumer=mode == "WaitForFirstConsumer",
        allowed_topologies=_allowed_topologies(doc.get("allowedTopologies"), "allowedTopologies"),
        is_default=annotations.get(ANNOTATION_DEFAULT_CLASS) == "true",
        creation_time=timestamp(meta.get("creationTimestamp"), "metadata.creationTimestamp") or 0.0,
    )


# ------------------------------------------------------------------------------------ Namespace


def namespace_from_dict(doc: dict[str, Any]) -> Namespace:
    """A v1 Namespace: its name and labels (what a namespaceSelector matches)."""
    meta = mapping(doc.get("metadata"), "metadata")
    return Namespace(
        name=req_str(meta.get("name"), "metadata.name"),
        labels=str_map(meta.get("labels"), "metadata.labels"),
    )
