"""Roles, ClusterRoles, RoleBindings and ClusterRoleBindings (``rbac.authorization.k8s.io/v1``) read into
:mod:`gpufleet.policy.rbac`'s types, with the loader's error paths (:class:`FieldError`)."""

from __future__ import annotations

from typing import Any

from gpufleet.adapters._fields import FieldError, join, mapping, opt_str, req_str, sequence
from gpufleet.adapters.errors import describe
from gpufleet.policy import PolicyRule, Role, RoleBinding, Subject

__all__ = ["RBAC_API_VERSION", "RBAC_KINDS", "binding_from_dict", "rbac_object_from_dict", "role_from_dict"]

RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"
RBAC_KINDS = ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
_SUBJECT_KINDS = ("User", "Group", "ServiceAccount")


def _strings(value: object, path: str) -> tuple[str, ...]:
    items = sequence(value, path)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise FieldError(f"{path}[{i}]", f"must be a string, got {describe(item)}")
    return tuple(items)


def _namespace(meta: dict[str, Any], namespaced: bool) -> str | None:
    if not namespaced:
        return None
    return opt_str(meta.get("namespace"), "metadata.namespace") or "default"


def role_from_dict(doc: dict[str, Any], namespaced: bool) -> Role:
    """A Role (``namespaced``) or ClusterRole; ``aggregationRule`` is left to the cluster (see
    :mod:`gpufleet.policy.rbac`)."""
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    rules = []
    for i, raw in enumerate(sequence(doc.get("rules"), "rules")):
        path = f"rules[{i}]"
        rule = mapping(raw, path)
        rules.append(PolicyRule(
            api_groups=_strings(rule.get("apiGroups"), join(path, "apiGroups")),
            resources=_strings(rule.get("resources"), join(path, "resources")),
            verbs=_strings(rule.get("verbs"), join(path, "verbs")),
            resource_names=_strings(rule.get("resourceNames"), join(path, "resourceNames")),
        ))
        _strings(rule.get("nonResourceURLs"), join(path, "nonResourceURLs"))
    return Role(name=name, namespace=_namespace(meta, namespaced), rules=tuple(rules))


def binding_from_dict(doc: dict[str, Any], namespaced: bool) -> RoleBinding:
    """A RoleBinding (``namespaced``) or ClusterRoleBinding."""
    meta = mapping(doc.get("metadata"), "metadata")
    name = req_str(meta.get("name"), "metadata.name")
    if doc.get("roleRef") is None:
        raise FieldError("roleRef", "required field missing")
    ref = mapping(doc.get("roleRef"), "roleRef")
    role_kind = req_str(ref.get("kind"), "roleRef.kind")
    allowed_kinds = ("Role", "ClusterRole") if namespaced else ("ClusterRole",)
    if role_kind not in allowed_kinds:
        raise FieldError("roleRef.kind", f"must be one of {', '.join(allowed_kinds)}, got {describe(role_kind)}")
    subjects = []
    for i, raw in enumerate(sequence(doc.get("subjects"), "subjects")):
        path = f"subjects[{i}]"
        subject = mapping(raw, path)
        kind = req_str(subject.get("kind"), join(path, "kind"))
        if kind not in _SUBJECT_KINDS:
            raise FieldError(join(path, "kind"), f"must be one of {', '.join(_SUBJECT_KINDS)}, got {describe(kind)}")
        subjects.append(Subject(kind=kind, name=req_str(subject.get("name"), join(path, "name")),
                                namespace=opt_str(subject.get("namespace"), join(path, "namespace")) or ""))
    return RoleBinding(name=name, namespace=_namespace(meta, namespaced), role_kind=role_kind,
                       role_name=req_str(ref.get("name"), "roleRef.name"), subjects=tuple(subjects))


def rbac_object_from_dict(doc: dict[str, Any]) -> Role | RoleBinding:
    """Any of the four kinds, by its ``kind``."""
    kind = doc.get("kind")
    if kind in ("Role", "ClusterRole"):
        return role_from_dict(doc, namespaced=kind == "Role")
    if kind in ("RoleBinding", "ClusterRoleBinding"):
        return binding_from_dict(doc, namespaced=kind == "RoleBinding")
    raise FieldError("kind", f"must be one of {', '.join(RBAC_KINDS)}, got {describe(kind)}")
