"""Kubernetes RBAC, evaluated offline: may a user (with groups) do a verb on a resource?

What ``gpufleet policy check`` answers the tenancy admission's SubjectAccessReview with (``use`` on
``queues/Q`` in ``gpufleet.dev``, in the pod's namespace), from the Roles, ClusterRoles, RoleBindings
and ClusterRoleBindings of a snapshot, as the API server's RBAC authorizer decides
(k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac):

- a rule matches when its ``verbs``, ``apiGroups`` and ``resources`` hold the request's (``*`` matches
  any; ``*/sub`` any resource's subresource ``sub``) and, when it lists ``resourceNames``, the name;
- a ClusterRoleBinding grants its ClusterRole everywhere; a RoleBinding grants its Role or ClusterRole
  in its own namespace only (so a RoleBinding in ``ml`` lets its subjects use a queue for pods of ``ml``);
- subjects: ``User`` (the user name), ``Group`` (one of the groups), ``ServiceAccount`` (the user
  ``system:serviceaccount:<namespace>:<name>``, the namespace defaulting to the binding's);
- the group ``system:masters`` may do anything (the API server lets it through before RBAC);
- aggregation (``aggregationRule``) is not re-computed: a ClusterRole's stored ``rules`` are what the
  cluster's aggregation controller already filled in, and that is what a snapshot holds.

Pure: no I/O. The adapters read the objects into these types (``gpufleet.adapters.rbac_objects``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.domain import API_GROUP

__all__ = [
    "PolicyRule",
    "RbacAuthorizer",
    "Role",
    "RoleBinding",
    "Subject",
]

SUPERUSER_GROUP = "system:masters"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
USE = "use"


@dataclass(frozen=True, slots=True)
class PolicyRule:
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()

    def allows(self, verb: str, api_group: str, resource: str, subresource: str, name: str) -> bool:
        if "*" not in self.verbs and verb not in self.verbs:
            return False
        if "*" not in self.api_groups and api_group not in self.api_groups:
            return False
        combined = f"{resource}/{subresource}" if subresource else resource
        if not any(r == "*" or r == combined or (subresource and r == f"*/{subresource}") for r in self.resources):
            return False
        return not self.resource_names or name in self.resource_names


@dataclass(frozen=True, slots=True)
class Role:
    """A Role (``namespace`` set) or a ClusterRole (``namespace`` None)."""

    name: str
    namespace: str | None
    rules: tuple[PolicyRule, ...] = ()


@dataclass(frozen=True, slots=True)
class Subject:
    kind: str  # User | Group | ServiceAccount
    name: str
    namespace: str = ""  # ServiceAccount only

    def matches(self, user: str, groups: frozenset[str], binding_namespace: str | None) -> bool:
        if self.kind == "User":
            return self.name == user
        if self.kind == "Group":
            return self.name in groups
        if self.kind == "ServiceAccount":
            namespace = self.namespace or binding_namespace or ""
            return user == f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{self.name}"
        return False


@dataclass(frozen=True, slots=True)
class RoleBinding:
    """A RoleBinding (``namespace`` set) or a ClusterRoleBinding (``namespace`` None)."""

    name: str
    namespace: str | None
    role_kind: str  # Role | ClusterRole
    role_name: str
    subjects: tuple[Subject, ...] = ()


class RbacAuthorizer:
    """The RBAC decisions over a fixed set of roles and bindings."""

    def __init__(self, roles: Iterable[Role], bindings: Iterable[RoleBinding]) -> None:
        self._cluster_roles = {r.name: r for r in roles if r.namespace is None}
        self._roles = {(r.namespace, r.name): r for r in roles if r.namespace is not None}
        self._bindings = tuple(bindings)

    def _role_of(self, binding: RoleBinding) -> Role | None:
        if binding.role_kind == "ClusterRole":
            return self._cluster_roles.get(binding.role_name)
        if binding.role_kind == "Role" and binding.namespace is not None:
            return self._roles.get((binding.namespace, binding.role_name))
        return None

    def allowed(self, user: str, groups: Iterable[str], verb: str, api_group: str, resource: str,
                name: str = "", namespace: str = "", subresource: str = "") -> bool:
        """Whether ``user`` with ``groups`` may ``verb`` the resource (``namespace`` "" for a request
        without one: only ClusterRoleBindings then apply)."""
        member_of = frozenset(groups)
        if SUPERUSER_GROUP in member_of:
            return True
        for binding in self._bindings:
            if binding.namespace is not None and binding.namespace != namespace:
                continue
            if not any(s.matches(user, member_of, binding.namespace) for s in binding.subjects):
                continue
            role = self._role_of(binding)
            if role is not None and any(rule.allows(verb, api_group, resource, subresource, name)
                                        for rule in role.rules):  # fmt: skip
                return True
        return False

    def can_use_queue(self, user: str, groups: Iterable[str], queue: str, namespace: str) -> bool:
        """``use`` of ``queues/<queue>`` in ``gpufleet.dev`` for a pod of ``namespace``."""
        return self.allowed(user, groups, USE, API_GROUP, "queues", name=queue, namespace=namespace)
