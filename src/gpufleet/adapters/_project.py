"""The Project resource (docs/semantics-notes.md, "Projects"): its ``spec`` read into
:class:`~gpufleet.domain.Project`, strictly (an unknown field, a bad selector, an unusable glob:
one :class:`FieldError` naming the field)."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters._fields import FieldError, join, mapping, req_str, sequence
from gpufleet.adapters._k8s_core import _label_selector
from gpufleet.adapters.errors import describe
from gpufleet.domain import DEFAULT_VOLUME_KINDS, ImagePolicy, NodePool, Project, QueueName, VolumePolicy
from gpufleet.policy.images import pattern_problem

__all__ = ["project_from_dict", "project_namespace_names"]

_SPEC_FIELDS = frozenset({
    "namespaces", "queues", "defaultQueue", "nodePools", "priorityClasses", "allowNonPreemptible",
    "maxGPUsPerUser", "maxPendingGangsPerUser", "images", "volumes",
})


def _only(raw: dict[str, Any], allowed: frozenset[str], path: str) -> None:
    for key in raw:
        if key not in allowed:
            raise FieldError(join(path, str(key)), "unknown field")


def _strings(value: object, path: str, *, globs: bool = False) -> tuple[str, ...]:
    out: list[str] = []
    for i, item in enumerate(sequence(value, path)):
        item_path = f"{path}[{i}]"
        if not isinstance(item, str) or not item:
            raise FieldError(item_path, f"must be a non-empty string, got {describe(item)}")
        if globs:
            problem = pattern_problem(item)
            if problem is not None:
                raise FieldError(item_path, problem)
        out.append(item)
    return tuple(out)


def _optional_strings(spec: dict[str, Any], key: str, path: str, *, globs: bool = False) -> tuple[str, ...] | None:
    return None if spec.get(key) is None else _strings(spec[key], join(path, key), globs=globs)


def _bool(value: object, path: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise FieldError(path, f"must be true or false, got {describe(value)}")
    return value


def _count(value: object, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FieldError(path, f"must be an integer >= 0, got {describe(value)}")
    return value


def project_namespace_names(doc: Any) -> tuple[str, ...]:
    """The namespaces a Project names in ``spec.namespaces.names``, read leniently (strings only),
    for a Project that cannot be read as a whole: its namespaces are then known to be claimed."""
    spec = doc.get("spec") if isinstance(doc, dict) else None
    namespaces = spec.get("namespaces") if isinstance(spec, dict) else None
    names = namespaces.get("names") if isinstance(namespaces, dict) else None
    return tuple(n for n in names if isinstance(n, str) and n) if isinstance(names, list) else ()


def project_from_dict(doc: dict[str, Any]) -> Project:
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    spec = mapping(doc.get("spec"), "spec")
    _only(spec, _SPEC_FIELDS, "spec")

    namespaces = mapping(spec.get("namespaces"), "spec.namespaces")
    _only(namespaces, frozenset({"names", "selector"}), "spec.namespaces")
    queues = tuple(QueueName(q) for q in _strings(spec.get("queues"), "spec.queues"))
    default_queue = spec.get("defaultQueue")
    if default_queue is not None and default_queue not in queues:
        raise FieldError("spec.defaultQueue", f"must be one of spec.queues, got {describe(default_queue)}")

    pools: list[NodePool] = []
    for i, raw in enumerate(sequence(spec.get("nodePools"), "spec.nodePools")):
        path = f"spec.nodePools[{i}]"
        pool = mapping(raw, path)
        _only(pool, frozenset({"name", "nodeSelector"}), path)
        selector = _label_selector(pool.get("nodeSelector") or {}, join(path, "nodeSelector"))
        assert selector is not None
        pools.append(NodePool(req_str(pool.get("name"), join(path, "name")), selector))

    images = mapping(spec.get("images"), "spec.images")
    _only(images, frozenset({"allowed", "denied", "requireDigest"}), "spec.images")
    volumes = mapping(spec.get("volumes"), "spec.volumes")
    _only(volumes, frozenset({"kinds", "storageClasses", "claimNames"}), "spec.volumes")
    kinds = _optional_strings(volumes, "kinds", "spec.volumes")

    return Project(
        name=name,
        namespace_names=_strings(namespaces.get("names"), "spec.namespaces.names"),
        namespace_selector=_label_selector(namespaces.get("selector"), "spec.namespaces.selector"),
        queues=queues,
        default_queue=QueueName(default_queue) if default_queue is not None else None,
        node_pools=tuple(pools),
        priority_classes=_optional_strings(spec, "priorityClasses", "spec"),
        allow_non_preemptible=_bool(spec.get("allowNonPreemptible"), "spec.allowNonPreemptible"),
        max_gpus_per_user=_count(spec.get("maxGPUsPerUser"), "spec.maxGPUsPerUser"),
        max_pending_gangs_per_user=_count(spec.get("maxPendingGangsPerUser"), "spec.maxPendingGangsPerUser"),
        images=ImagePolicy(
            allowed=_strings(images.get("allowed"), "spec.images.allowed", globs=True),
            denied=_strings(images.get("denied"), "spec.images.denied", globs=True),
            require_digest=_bool(images.get("requireDigest"), "spec.images.requireDigest"),
        ),
        volumes=VolumePolicy(
            kinds=DEFAULT_VOLUME_KINDS if kinds is None else kinds,
            storage_classes=_optional_strings(volumes, "storageClasses", "spec.volumes"),
            claim_names=_optional_strings(volumes, "claimNames", "spec.volumes", globs=True),
        ),
    )
