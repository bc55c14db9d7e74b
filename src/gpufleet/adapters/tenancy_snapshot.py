"""What ``gpufleet policy check`` reads: one pod, and a snapshot with its RBAC objects (Roles,
ClusterRoles, RoleBindings, ClusterRoleBindings; ``gpufleet snapshot`` writes them).

Everything else in the snapshot (Projects and Namespaces included) goes through the replay loader
(:mod:`gpufleet.adapters.k8s_yaml`), with its checks and messages; the RBAC documents are read here and
left out of it (as empty documents, so that "document N" still counts every document). Bad input raises
:class:`InputError` naming the file, the document and the field (exit 2 in the commands).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.adapters._fields import FieldError
from gpufleet.adapters._input import parse_input
from gpufleet.adapters._k8s_core import pod_from_dict
from gpufleet.adapters.errors import InputError, describe
from gpufleet.adapters.k8s_yaml import _read_text, _snapshot, validate_snapshot
from gpufleet.adapters.rbac_objects import RBAC_API_VERSION, RBAC_KINDS, rbac_object_from_dict
from gpufleet.domain import Pod, Snapshot
from gpufleet.policy import Role, RoleBinding

__all__ = ["TenancySnapshot", "load_pod_file", "load_tenancy_snapshot_file", "load_tenancy_snapshot_text"]


@dataclass(frozen=True)
class TenancySnapshot:
    snapshot: Snapshot
    roles: tuple[Role, ...] = ()
    bindings: tuple[RoleBinding, ...] = ()


def _is_rbac(doc: object) -> bool:
    return isinstance(doc, dict) and doc.get("apiVersion") == RBAC_API_VERSION and doc.get("kind") in RBAC_KINDS


def _label(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        return str(doc.get("kind"))
    if isinstance(namespace, str) and namespace:
        return f"{doc.get('kind')} {namespace}/{name}"
    return f"{doc.get('kind')} {name}"


def _read(reader: Callable[[dict[str, Any]], Any], doc: dict[str, Any], source: str, where: str) -> Any:
    try:
        return reader(doc)
    except FieldError as err:
        detail = f"{err.path}: {err.message}" if err.path else err.message
        raise InputError(f"{source}: {where} ({_label(doc)}): {detail}") from None


def load_tenancy_snapshot_text(text: str, source: str) -> TenancySnapshot:
    docs = parse_input(text, source)
    rest: list[Any] = []
    roles: list[Role] = []
    bindings: list[RoleBinding] = []
    seen: dict[tuple[str, str], str] = {}
    for index, doc in enumerate(docs, 1):
        if not _is_rbac(doc):
            rest.append(doc)
            continue
        assert isinstance(doc, dict)
        rest.append(None)
        where = f"document {index}"
        value = _read(rbac_object_from_dict, doc, source, where)
        key = (str(doc["kind"]), _label(doc))
        if key in seen:
            raise InputError(f"{source}: {where} ({_label(doc)}): a second {doc['kind']} of this name "
                             f"(the first is in {seen[key]})")
        seen[key] = where
        if isinstance(value, Role):
            roles.append(value)
        else:
            bindings.append(value)
    snapshot, locations = _snapshot(rest, source)
    validate_snapshot(snapshot, source, locations=locations)
    return TenancySnapshot(snapshot, tuple(roles), tuple(bindings))


def load_tenancy_snapshot_file(path: str | Path) -> TenancySnapshot:
    return load_tenancy_snapshot_text(_read_text(path), str(path))


def load_pod_file(path: str | Path) -> tuple[Pod, dict[str, Any]]:
    """The one Pod (``v1``) of a file, read (checked as replay reads pods) and as written."""
    source = str(path)
    docs = [(i, doc) for i, doc in enumerate(parse_input(_read_text(path), source), 1) if doc is not None]
    if len(docs) != 1:
        raise InputError(f"{source}: expected one Pod document, found {len(docs)} documents")
    index, doc = docs[0]
    where = f"document {index}"
    if not isinstance(doc, dict):
        raise InputError(f"{source}: {where}: expected a Kubernetes object (a mapping), got {describe(doc)}")
    if doc.get("kind") != "Pod" or doc.get("apiVersion") != "v1":
        raise InputError(f"{source}: {where}: expected apiVersion v1, kind Pod, got "
                         f"{describe(doc.get('apiVersion'))} {describe(doc.get('kind'))}")
    pod: Pod = _read(pod_from_dict, doc, source, where)
    return pod, doc
