"""The offline RBAC evaluator (`use` of queues for `gpufleet policy check`), and the reading of RBAC objects."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.adapters._fields import FieldError
from gpufleet.adapters.rbac_objects import binding_from_dict, rbac_object_from_dict, role_from_dict
from gpufleet.policy import PolicyRule, RbacAuthorizer, Role, RoleBinding, Subject

USE_B = PolicyRule(("gpufleet.dev",), ("queues",), ("use",), ("team-b",))


def _crb(role: str, *subjects: Subject, name: str = "b") -> RoleBinding:
    return RoleBinding(name, None, "ClusterRole", role, subjects)


def _rb(namespace: str, role: str, *subjects: Subject, kind: str = "ClusterRole") -> RoleBinding:
    return RoleBinding("b", namespace, kind, role, subjects)


def test_a_cluster_role_binding_grants_the_named_queue_everywhere() -> None:
    rbac = RbacAuthorizer([Role("use-b", None, (USE_B,))], [_crb("use-b", Subject("User", "alice"))])
    assert rbac.can_use_queue("alice", (), "team-b", "ml")
    assert rbac.can_use_queue("alice", (), "team-b", "other")
    assert not rbac.can_use_queue("alice", (), "team-c", "ml")  # resourceNames
    assert not rbac.can_use_queue("bob", (), "team-b", "ml")


def test_a_role_binding_grants_only_in_its_namespace() -> None:
    rbac = RbacAuthorizer([Role("use-b", None, (USE_B,))], [_rb("ml", "use-b", Subject("Group", "vision"))])
    assert rbac.can_use_queue("alice", ("vision",), "team-b", "ml")
    assert not rbac.can_use_queue("alice", ("vision",), "team-b", "nlp")
    assert not rbac.can_use_queue("alice", ("nlp",), "team-b", "ml")
    assert not rbac.can_use_queue("alice", ("vision",), "team-b", "")  # a request without a namespace


def test_a_namespaced_role_counts_only_through_a_binding_in_its_namespace() -> None:
    roles = [Role("use-b", "ml", (USE_B,))]
    rbac = RbacAuthorizer(roles, [_rb("ml", "use-b", Subject("User", "alice"), kind="Role"),
                                  _rb("nlp", "use-b", Subject("User", "bob"), kind="Role")])  # fmt: skip
    assert rbac.can_use_queue("alice", (), "team-b", "ml")
    assert not rbac.can_use_queue("bob", (), "team-b", "nlp")  # nlp has no Role use-b
    # a ClusterRoleBinding cannot name a Role; nor a binding a role that does not exist
    assert not RbacAuthorizer(roles, [RoleBinding("x", None, "Role", "use-b", (Subject("User", "alice"),))]
                              ).can_use_queue("alice", (), "team-b", "ml")  # fmt: skip
    assert not RbacAuthorizer([], [_crb("missing", Subject("User", "alice"))]).can_use_queue("alice", (), "team-b", "ml")


def test_service_accounts_and_their_default_namespace() -> None:
    rbac = RbacAuthorizer([Role("use-b", None, (USE_B,))], [
        _rb("ml", "use-b", Subject("ServiceAccount", "trainer")),
        _crb("use-b", Subject("ServiceAccount", "ci", "build")),
    ])
    assert rbac.can_use_queue("system:serviceaccount:ml:trainer", (), "team-b", "ml")
    assert not rbac.can_use_queue("system:serviceaccount:other:trainer", (), "team-b", "ml")
    assert rbac.can_use_queue("system:serviceaccount:build:ci", (), "team-b", "anywhere")
    assert not rbac.can_use_queue("trainer", (), "team-b", "ml")


@pytest.mark.parametrize(("rule", "allowed"), [
    (PolicyRule(("*",), ("*",), ("*",)), True),
    (PolicyRule(("gpufleet.dev",), ("queues",), ("*",)), True),
    (PolicyRule(("gpufleet.dev",), ("*",), ("use",)), True),
    (PolicyRule(("*",), ("queues",), ("use",), ("team-a", "team-b")), True),
    (PolicyRule(("gpufleet.dev",), ("queues",), ("get", "list")), False),
    (PolicyRule(("",), ("queues",), ("use",)), False),
    (PolicyRule(("gpufleet.dev",), ("queues/status",), ("use",)), False),
    (PolicyRule(("gpufleet.dev",), ("*/status",), ("use",)), False),
    (PolicyRule(("gpufleet.dev",), ("podgroups",), ("use",)), False),
    (PolicyRule(("gpufleet.dev",), ("queues",), ("use",), ("team-a",)), False),
])  # fmt: skip
def test_wildcards_and_resource_names(rule: PolicyRule, allowed: bool) -> None:
    rbac = RbacAuthorizer([Role("r", None, (rule,))], [_crb("r", Subject("User", "alice"))])
    assert rbac.can_use_queue("alice", (), "team-b", "ml") is allowed


def test_subresources() -> None:
    rule = PolicyRule(("gpufleet.dev",), ("*/status",), ("patch",))
    rbac = RbacAuthorizer([Role("r", None, (rule,))], [_crb("r", Subject("User", "ctl"))])
    assert rbac.allowed("ctl", (), "patch", "gpufleet.dev", "projects", name="p", subresource="status")
    assert not rbac.allowed("ctl", (), "patch", "gpufleet.dev", "projects", name="p")


def test_system_masters_may_do_anything_and_nobody_else_without_a_binding() -> None:
    rbac = RbacAuthorizer([], [])
    assert rbac.can_use_queue("root", ("system:masters",), "team-b", "ml")
    assert not rbac.can_use_queue("alice", ("system:authenticated",), "team-b", "ml")


def test_a_role_binding_grants_use_in_its_namespace_only() -> None:
    rbac = RbacAuthorizer([Role("use-b", None, (USE_B,))], [_rb("ml", "use-b", Subject("User", "alice"))])
    assert rbac.can_use_queue("alice", [], "team-b", "ml")
    assert not rbac.can_use_queue("alice", [], "team-b", "nlp")


# A tenant cannot gain a queue: whatever other roles and bindings exist, a user is granted `use` of
# a queue only by a binding that names it (or one of its groups) of a role whose rule covers the queue.
_names = st.sampled_from(["alice", "bob", "g1", "g2"])
_rules = st.builds(PolicyRule, st.sampled_from([("gpufleet.dev",), ("",), ("*",)]),
                   st.sampled_from([("queues",), ("podgroups",), ("*",), ("queues/status",)]),
                   st.sampled_from([("use",), ("get",), ("*",)]),
                   st.sampled_from([(), ("team-a",), ("team-b",)]))  # fmt: skip
_subjects = st.builds(Subject, st.sampled_from(["User", "Group"]), _names)
_bindings = st.builds(RoleBinding, st.just("b"), st.sampled_from([None, "ml", "nlp"]), st.just("ClusterRole"),
                      st.sampled_from(["r0", "r1"]), st.lists(_subjects, max_size=3).map(tuple))  # fmt: skip


@given(st.lists(_rules, max_size=3), st.lists(_rules, max_size=3), st.lists(_bindings, max_size=4))
def test_use_is_granted_exactly_by_a_binding_of_a_covering_rule(r0: list[PolicyRule], r1: list[PolicyRule],
                                                                bindings: list[RoleBinding]) -> None:
    rbac = RbacAuthorizer([Role("r0", None, tuple(r0)), Role("r1", None, tuple(r1))], bindings)
    rules = {"r0": r0, "r1": r1}
    for user, groups in (("alice", ("g1",)), ("bob", ())):
        expected = any(
            (b.namespace in (None, "ml"))
            and any((s.kind == "User" and s.name == user) or (s.kind == "Group" and s.name in groups) for s in b.subjects)
            and any(("use" in r.verbs or "*" in r.verbs) and set(r.api_groups) & {"gpufleet.dev", "*"}
                    and set(r.resources) & {"queues", "*"} and (not r.resource_names or "team-b" in r.resource_names)
                    for r in rules[b.role_name])
            for b in bindings)  # fmt: skip
        assert rbac.can_use_queue(user, groups, "team-b", "ml") is expected


# --- reading the objects ------------------------------------------------------------------------


def test_reading_roles_and_bindings() -> None:
    role = role_from_dict({"metadata": {"name": "use-b"}, "rules": [
        {"apiGroups": ["gpufleet.dev"], "resources": ["queues"], "resourceNames": ["team-b"], "verbs": ["use"]},
        {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]}, namespaced=False)
    assert role == Role("use-b", None, (USE_B, PolicyRule((), (), ("get",))))
    binding = binding_from_dict({"metadata": {"name": "x", "namespace": "ml"},
                                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "use-b"},
                                 "subjects": [{"kind": "Group", "name": "vision"},
                                              {"kind": "ServiceAccount", "name": "ci", "namespace": "build"}]},
                                namespaced=True)  # fmt: skip
    assert binding == RoleBinding("x", "ml", "ClusterRole", "use-b",
                                  (Subject("Group", "vision"), Subject("ServiceAccount", "ci", "build")))
    assert role_from_dict({"metadata": {"name": "r"}}, namespaced=True).namespace == "default"


@pytest.mark.parametrize(("doc", "error"), [
    ({"kind": "ClusterRole", "metadata": {}}, "metadata.name: required field missing"),
    ({"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": [{"verbs": "use"}]},
     'rules[0].verbs: must be a list, got "use"'),
    ({"kind": "Role", "metadata": {"name": "r"}, "rules": [{"verbs": [1]}]}, "rules[0].verbs[0]: must be a string, got 1"),
    ({"kind": "ClusterRoleBinding", "metadata": {"name": "b"}}, "roleRef: required field missing"),
    ({"kind": "ClusterRoleBinding", "metadata": {"name": "b"}, "roleRef": {"kind": "Role", "name": "r"}},
     'roleRef.kind: must be one of ClusterRole, got "Role"'),
    ({"kind": "RoleBinding", "metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "r"},
      "subjects": [{"kind": "Robot", "name": "x"}]}, 'subjects[0].kind: must be one of User, Group, ServiceAccount, got "Robot"'),
    ({"kind": "RoleBinding", "metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole"}},
     "roleRef.name: required field missing"),
    ({"kind": "Secret", "metadata": {"name": "b"}}, 'kind: must be one of Role, ClusterRole, RoleBinding, ClusterRoleBinding, got "Secret"'),
])  # fmt: skip
def test_bad_rbac_objects_name_the_field(doc: dict[str, Any], error: str) -> None:
    with pytest.raises(FieldError) as caught:
        rbac_object_from_dict(doc)
    assert str(caught.value) == error
