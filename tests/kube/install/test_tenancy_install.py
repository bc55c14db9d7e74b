"""Tenancy in the install: the roles, the ValidatingAdmissionPolicy on gpufleet's pod annotations (its
CEL evaluated with cel-python against sample admission requests) and the tenancy webhook entry, in
`gpufleet manifests` and in the chart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpufleet.kube.install.manifests import InstallOptions, install_objects
from gpufleet.kube.install.tenancy import GUARDED_ANNOTATIONS, policy_spec

from .test_chart import NAMESPACE, render

TENANCY_CONFIG = "gpufleet-webhook"  # the tenancy ValidatingWebhookConfiguration (not -gpu-visibility)

try:  # cel-python (the dev extra) evaluates the CEL; the tests that do not need it run without it
    import celpy
    from celpy import celtypes
except ImportError:  # pragma: no cover - the dev extra installs it
    celpy = None

needs_cel = pytest.mark.skipif(celpy is None, reason="cel-python (the dev extra) evaluates the policy's CEL")

CONTROLLER = "system:serviceaccount:gpufleet-system:gpufleet-controller"


def _objects(**options: Any) -> list[dict[str, Any]]:
    return install_objects(InstallOptions(examples=False, **options))


def _role(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    [role] = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == name]
    return role


# --- roles ----------------------------------------------------------------------------------------


def _grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}  # fmt: skip


def test_the_four_roles_and_their_aggregation() -> None:
    docs = _objects()
    labels = {name: {k: v for k, v in _role(docs, name)["metadata"]["labels"].items() if "aggregate-to" in k}
              for name in ("gpufleet-platform-admin", "gpufleet-project-admin", "gpufleet-member", "gpufleet-viewer")}
    assert labels == {
        "gpufleet-platform-admin": {},
        "gpufleet-project-admin": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"},
        "gpufleet-member": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"},
        "gpufleet-viewer": {"rbac.authorization.k8s.io/aggregate-to-view": "true"},
    }
    assert _role(docs, "gpufleet-platform-admin")["rules"] == [
        {"apiGroups": ["gpufleet.dev"], "resources": ["*"], "verbs": ["*"]},
        {"apiGroups": ["gpufleet.dev"], "resources": ["simulations"], "verbs": ["create"]}]  # the dashboard's what-if


def test_no_shipped_role_but_the_platform_admin_grants_use_of_a_queue_or_writes_queues_or_projects() -> None:
    docs = _objects()
    for name in ("gpufleet-project-admin", "gpufleet-member", "gpufleet-viewer"):
        grants = _grants(_role(docs, name))
        assert not any(verb in ("use", "*") for _, _, verb in grants), name
        assert not any(resource in ("queues", "projects", "schedulerconfigs", "*") and verb not in ("get", "list", "watch")
                       for _, resource, verb in grants), name  # fmt: skip
        assert all(group == "gpufleet.dev" for group, _, _ in grants)
    member = _grants(_role(docs, "gpufleet-member"))
    assert {("gpufleet.dev", "podgroups", "create"), ("gpufleet.dev", "queues", "list")} <= member
    assert {verb for _, _, verb in _grants(_role(docs, "gpufleet-viewer"))} == {"get", "list", "watch"}


def test_the_controller_reads_projects_and_namespaces_and_writes_project_status() -> None:
    grants = _grants(_role(_objects(), "gpufleet-controller"))
    assert {("gpufleet.dev", "projects", "list"), ("gpufleet.dev", "projects", "watch"),
            ("gpufleet.dev", "projects/status", "patch"), ("", "namespaces", "list"),
            ("", "namespaces", "watch")} <= grants  # fmt: skip
    assert ("gpufleet.dev", "projects", "patch") not in grants and ("", "namespaces", "get") not in grants


def test_the_chart_ships_the_roles_under_rbac_create() -> None:
    names = {d["metadata"]["name"] for d in render() if d["kind"] == "ClusterRole"}
    assert {"gpufleet-platform-admin", "gpufleet-project-admin", "gpufleet-member", "gpufleet-viewer"} <= names
    assert not [d for d in render({"rbac": {"create": False}}) if d["kind"] == "ClusterRole"]


# --- the ValidatingAdmissionPolicy: structure -------------------------------------------------------


def _policy(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    [policy] = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    [binding] = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    return policy, binding


def test_the_policy_and_its_binding() -> None:
    policy, binding = _policy(_objects())
    spec = policy["spec"]
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == "gpufleet-pod-annotations"
    assert binding["spec"] == {"policyName": "gpufleet-pod-annotations", "validationActions": ["Deny"]}
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"] == {"resourceRules": [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]},
        {"apiGroups": ["gpufleet.dev"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"],
         "resources": ["podgroups"]},
        *({"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": [resource]}
          for group, resource in (("batch", "jobs"), ("batch", "cronjobs"), ("apps", "deployments"),
                                  ("apps", "replicasets"), ("apps", "statefulsets")))]}
    assert [v["name"] for v in spec["variables"]] == [
        "controller", "trusted", "annotations", "oldAnnotations", "guarded", "workload"]
    assert spec["variables"][0]["expression"] == f"'{CONTROLLER}'"
    assert len(spec["validations"]) == 5  # submitted-by, queue-grant, the guarded ones, the operator marks, queued-at
    assert all(v["reason"] == "Forbidden" for v in spec["validations"])
    assert "authorizer.group('gpufleet.dev').resource('queues').namespace(request.namespace)" in (
        spec["validations"][1]["expression"])
    assert ".check('use').allowed()" in spec["validations"][1]["expression"]
    assert _policy(_objects(namespace="sched"))[0]["spec"]["variables"][0]["expression"] == (
        "'system:serviceaccount:sched:gpufleet-controller'")
    assert [d for d in _objects(admission_policy=False) if d["kind"].startswith("ValidatingAdmissionPolicy")] == []


def test_the_chart_names_its_own_service_account_and_can_leave_the_policy_out() -> None:
    policy, _ = _policy(render({"serviceAccount": {"name": "sched-sa"}}))
    assert policy["spec"]["variables"][0] == {
        "name": "controller", "expression": f"'system:serviceaccount:{NAMESPACE}:sched-sa'"}
    assert policy["spec"] == policy_spec(f"system:serviceaccount:{NAMESPACE}:sched-sa")
    for off in ({"admissionPolicy": {"enabled": False}},):
        assert [d for d in render(off) if d["kind"].startswith("ValidatingAdmissionPolicy")] == []
    assert len([d for d in render({"admissionPolicy": {"enabled": True}}) if "AdmissionPolicy" in d["kind"]]) == 2


# --- the ValidatingAdmissionPolicy: its CEL against admission requests -----------------------------

# (user, namespace, queue) the sample authorizer lets `use` a queue
GRANTS = {("alice", "ml", "team-b")}
OPERATORS = {"ops"}  # the users the sample authorizer lets `operate` on queues


def _authorizer_functions(user: str) -> dict[str, Callable[..., Any]]:
    """The Kubernetes CEL authorizer library, enough for the policy: a check is a map of what it asks."""

    def setter(key: str) -> Callable[[Any, Any], Any]:
        return lambda check, value: celtypes.MapType({**check, celtypes.StringType(key): value})

    def allowed(check: Any) -> Any:
        asked = {str(k): str(v) for k, v in check.items()}
        if asked["verb"] == "operate":  # cluster-wide: the gpufleet-operator role
            assert (asked["group"], asked["resource"]) == ("gpufleet.dev", "queues") and "namespace" not in asked
            return celtypes.BoolType(user in OPERATORS)
        assert asked["group"] == "gpufleet.dev" and asked["resource"] == "queues" and asked["verb"] == "use"
        return celtypes.BoolType((user, asked["namespace"], asked["name"]) in GRANTS)

    return {"group": setter("group"), "resource": setter("resource"), "namespace": setter("namespace"),
            "name": setter("name"), "check": setter("verb"), "allowed": allowed}  # fmt: skip


def _evaluate(expression: str, activation: dict[str, Any], functions: dict[str, Callable[..., Any]]) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expression), functions=functions).evaluate(activation)


def admit(operation: str, user: str, annotations: dict[str, str] | None,
          old: dict[str, str] | None = None, spec: dict[str, Any] | None = None) -> str | None:
    """What the API server does with the policy: None (allowed or not matched) or the denial message."""
    spec = spec or policy_spec(CONTROLLER)
    meta: dict[str, Any] = {"name": "p", "namespace": "ml"}
    if annotations is not None:
        meta["annotations"] = annotations
    old_object = None
    if operation == "UPDATE":
        old_object = {"metadata": {"name": "p", "namespace": "ml", **({"annotations": old} if old is not None else {})}}
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel({"metadata": meta, "spec": {"schedulerName": "gpufleet"}}),
        "oldObject": celpy.json_to_cel(old_object),
        "request": celpy.json_to_cel({"operation": operation, "namespace": "ml", "userInfo": {"username": user}}),
        "authorizer": celtypes.MapType({}),
    }
    return decide(spec, activation, user)


def decide(spec: dict[str, Any], activation: dict[str, Any], user: str) -> str | None:
    """The policy ``spec`` on one request (``activation``): None or the denial message."""
    functions = _authorizer_functions(user)
    for condition in spec["matchConditions"]:
        if not _evaluate(condition["expression"], activation, functions):
            return None
    variables: dict[str, Any] = {}
    for variable in spec["variables"]:
        activation["variables"] = celtypes.MapType(variables)
        variables[celtypes.StringType(variable["name"])] = _evaluate(variable["expression"], activation, functions)
    activation["variables"] = celtypes.MapType(variables)
    for validation in spec["validations"]:
        if not _evaluate(validation["expression"], activation, functions):
            if "messageExpression" in validation:
                return str(_evaluate(validation["messageExpression"], activation, functions))
            return str(validation["message"])
    return None


SUBMITTED, GRANT, INDEX = "gpufleet.dev/submitted-by", "gpufleet.dev/queue-grant", "gpufleet.dev/gpu-index"
ONLY_CONTROLLER = ("only gpufleet's controller may set, change or remove the annotations gpufleet.dev/submitted-by, "
                   "gpufleet.dev/queue-grant, gpufleet.dev/gpu-index, gpufleet.dev/gpu-blocks, "
                   "gpufleet.dev/mps-mem-limit, gpufleet.dev/bound-at, gpufleet.dev/queued-at after creation")
QUEUED = "gpufleet.dev/queued-at"  # a drained gang's age, on its PodGroup
EVICTED, OPERATOR_CLASS = "gpufleet.dev/evicted-by", "gpufleet.dev/operator-priority-class"
ONLY_OPERATOR = ("only an operator (verb operate on gpufleet.dev queues: the gpufleet-operator role) or gpufleet's "
                 "controller may set, change or remove gpufleet.dev/evicted-by, gpufleet.dev/operator-priority-class")


@needs_cel
@pytest.mark.parametrize(("operation", "user", "annotations", "old", "denial"), [
    # CREATE: the submitter is the creator; a grant needs `use` on the queue in the pod's namespace
    ("CREATE", "alice", None, None, None),
    ("CREATE", "alice", {"team": "x"}, None, None),
    ("CREATE", "alice", {SUBMITTED: "alice"}, None, None),
    ("CREATE", "mallory", {SUBMITTED: "alice"}, None,
     "gpufleet.dev/submitted-by must be the creator mallory, not alice"),
    ("CREATE", "alice", {GRANT: "team-b"}, None, None),
    ("CREATE", "mallory", {GRANT: "team-b"}, None, "gpufleet.dev/queue-grant: user mallory may not use queue team-b"),
    ("CREATE", "alice", {SUBMITTED: "alice", GRANT: "team-c"}, None,
     "gpufleet.dev/queue-grant: user alice may not use queue team-c"),
    ("CREATE", "alice", {INDEX: "0,1,2,3"}, None, None),  # refused at creation by the webhook, not here
    # UPDATE: nobody but the controller sets, changes or removes them
    ("UPDATE", "alice", {SUBMITTED: "alice", "x": "1"}, {SUBMITTED: "alice"}, None),
    ("UPDATE", "alice", {SUBMITTED: "bob"}, {SUBMITTED: "alice"}, ONLY_CONTROLLER),
    ("UPDATE", "alice", {}, {SUBMITTED: "alice"}, ONLY_CONTROLLER),
    ("UPDATE", "alice", None, {GRANT: "team-b"}, ONLY_CONTROLLER),
    ("UPDATE", "alice", {GRANT: "team-b"}, {}, ONLY_CONTROLLER),
    ("UPDATE", "alice", {INDEX: "0,1,2,3"}, {INDEX: "0"}, ONLY_CONTROLLER),
    ("UPDATE", "alice", {INDEX: "0"}, None, ONLY_CONTROLLER),
    ("UPDATE", "alice", {"gpufleet.dev/gpu-blocks": "100"}, {"gpufleet.dev/gpu-blocks": "25"}, ONLY_CONTROLLER),
    ("UPDATE", "alice", {"gpufleet.dev/mps-mem-limit": "0=80G"}, {}, ONLY_CONTROLLER),
    # the ledger's bound time: a tenant moving it would shorten what its pod is charged
    ("UPDATE", "alice", {"gpufleet.dev/bound-at": "2030-01-01T00:00:00.000000Z"},
     {"gpufleet.dev/bound-at": "2026-11-24T20:00:00.000000Z"}, ONLY_CONTROLLER),
    ("UPDATE", CONTROLLER, {"gpufleet.dev/bound-at": "2026-11-24T20:00:00.000000Z"}, {}, None),
    ("UPDATE", CONTROLLER, {INDEX: "3", "gpufleet.dev/mps-mem-limit": "3=20G"}, {INDEX: "0"}, None),
    ("UPDATE", "system:serviceaccount:other:gpufleet-controller", {INDEX: "3"}, {INDEX: "0"}, ONLY_CONTROLLER),
    ("UPDATE", "alice", {"team": "y"}, {"team": "x"}, None),
    # a gang's queue position: a tenant cannot set it at creation nor move it later
    ("CREATE", "alice", {QUEUED: "2020-01-01T00:00:00.000000Z"}, None,
     "only gpufleet's controller may set gpufleet.dev/queued-at"),
    ("CREATE", CONTROLLER, {QUEUED: "2026-01-01T00:00:00.000000Z"}, None, None),
    ("UPDATE", "alice", {QUEUED: "2020-01-01T00:00:00.000000Z"}, {QUEUED: "2026-01-01T00:00:00.000000Z"},
     ONLY_CONTROLLER),
    ("UPDATE", CONTROLLER, {QUEUED: "2026-01-01T00:00:00.000000Z"}, {}, None),
    ("UPDATE", "alice", None, None, None),
    # an operator's marks (gpufleet admin): the ledger's `operator` end, the class the pod-grouper keeps
    ("UPDATE", "ops", {EVICTED: "operator"}, {}, None),
    ("UPDATE", "alice", {EVICTED: "operator"}, {}, ONLY_OPERATOR),
    ("CREATE", "alice", {EVICTED: "operator"}, None, ONLY_OPERATOR),
    ("UPDATE", "alice", {}, {EVICTED: "operator"}, ONLY_OPERATOR),
    ("UPDATE", "alice", {EVICTED: "operator", "x": "1"}, {EVICTED: "operator"}, None),
    ("UPDATE", CONTROLLER, {EVICTED: "operator"}, {}, None),
    ("UPDATE", "ops", {OPERATOR_CLASS: "high"}, {}, None),
    ("UPDATE", "alice", {OPERATOR_CLASS: "high"}, {}, ONLY_OPERATOR),
])  # fmt: skip
def test_the_policy_decides(operation: str, user: str, annotations: dict[str, str] | None,
                            old: dict[str, str] | None, denial: str | None) -> None:
    assert admit(operation, user, annotations, old) == denial


@needs_cel
def test_every_guarded_annotation_is_refused_to_others_after_creation() -> None:
    for key in GUARDED_ANNOTATIONS:
        assert admit("UPDATE", "alice", {key: "v2"}, {key: "v1"}) == ONLY_CONTROLLER
        assert admit("UPDATE", CONTROLLER, {key: "v2"}, {key: "v1"}) is None


# --- the tenancy webhook ------------------------------------------------------------------------------


@needs_cel
def test_the_tenancy_webhook_in_the_manifests_and_the_chart() -> None:
    [config] = [d for d in _objects(webhook=True) if d["kind"] == "ValidatingWebhookConfiguration" and d["metadata"]["name"] == TENANCY_CONFIG]
    [hook, claims] = config["webhooks"]
    # PersistentVolumeClaims: every claim at creation, fail-open (it sees every claim of the cluster)
    assert (claims["name"], claims["failurePolicy"], claims["clientConfig"]["service"]["path"]) == (
        "claims.tenancy.gpufleet.dev", "Ignore", "/validate")
    assert [(r["apiGroups"], r["resources"], r["operations"]) for r in claims["rules"]] == [
        ([""], ["persistentvolumeclaims"], ["CREATE"])]
    assert "matchConditions" not in claims
    assert hook["name"] == "tenancy.gpufleet.dev" and hook["failurePolicy"] == "Fail"
    assert hook["clientConfig"]["service"] == {"name": "gpufleet-webhook", "namespace": NAMESPACE,
                                               "path": "/validate", "port": 443}  # fmt: skip
    assert [(r["apiGroups"], r["resources"], r["operations"]) for r in hook["rules"]] == [
        ([""], ["pods"], ["CREATE"]), (["gpufleet.dev"], ["podgroups"], ["CREATE"]),
        (["batch"], ["jobs"], ["CREATE", "UPDATE"]), (["batch"], ["cronjobs"], ["CREATE", "UPDATE"]),
        (["apps"], ["deployments"], ["CREATE", "UPDATE"]), (["apps"], ["replicasets"], ["CREATE", "UPDATE"]),
        (["apps"], ["statefulsets"], ["CREATE", "UPDATE"])]
    assert hook["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", NAMESPACE]}]
    [condition] = hook["matchConditions"]
    env = celpy.Environment()
    match = env.program(env.compile(condition["expression"]))

    def matches(resource: str, obj: dict[str, Any]) -> bool:
        return bool(match.evaluate({"request": celpy.json_to_cel({"resource": {"resource": resource}}),
                                    "object": celpy.json_to_cel(obj)}))  # fmt: skip

    assert matches("pods", {"spec": {"schedulerName": "gpufleet"}})
    assert not matches("pods", {"spec": {"schedulerName": "default-scheduler"}})
    assert not matches("pods", {"spec": {}})
    assert matches("podgroups", {"spec": {"minMember": 2}})
    assert [d for d in _objects() if d["kind"] == "ValidatingWebhookConfiguration" and d["metadata"]["name"] == TENANCY_CONFIG] == []

    chart = render({"webhook": {"enabled": True}})
    [rendered] = [d for d in chart if d["kind"] == "ValidatingWebhookConfiguration" and d["metadata"]["name"] == TENANCY_CONFIG]
    [chart_hook, chart_claims] = rendered["webhooks"]
    assert chart_claims["failurePolicy"] == "Ignore" and chart_claims["rules"] == claims["rules"]
    [mutating] = [d for d in chart if d["kind"] == "MutatingWebhookConfiguration"]
    assert chart_hook["clientConfig"]["caBundle"] == mutating["webhooks"][0]["clientConfig"]["caBundle"]
    assert chart_hook["failurePolicy"] == "Fail"
    ignore = render({"webhook": {"enabled": True, "failurePolicy": "Ignore", "matchConditions": False}})
    [hook_ignore, _] = next(d for d in ignore if d["kind"] == "ValidatingWebhookConfiguration" and d["metadata"]["name"] == TENANCY_CONFIG)["webhooks"]
    assert hook_ignore["failurePolicy"] == "Ignore" and "matchConditions" not in hook_ignore
    own = render({"webhook": {"enabled": True, "tenancy": {"failurePolicy": "Ignore"}}})
    [hook_own, _] = next(d for d in own if d["kind"] == "ValidatingWebhookConfiguration" and d["metadata"]["name"] == TENANCY_CONFIG)["webhooks"]
    assert hook_own["failurePolicy"] == "Ignore"
    assert not [d for d in render({"webhook": {"enabled": True, "tenancy": {"enabled": False}}})
                if d["kind"] == "ValidatingWebhookConfiguration" and d["metadata"]["name"] == TENANCY_CONFIG]  # fmt: skip


def test_the_webhook_has_its_own_account_for_subject_access_reviews() -> None:
    docs = _objects(webhook=True)
    [deploy] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpufleet-webhook"]
    pod_spec = deploy["spec"]["template"]["spec"]
    assert pod_spec["serviceAccountName"] == "gpufleet-webhook" and "automountServiceAccountToken" not in pod_spec
    grants = _grants(_role(docs, "gpufleet-webhook"))
    assert ("authorization.k8s.io", "subjectaccessreviews", "create") in grants
    assert {verb for _, resource, verb in grants if resource != "subjectaccessreviews"} == {"get", "list", "watch"}
    [binding] = [d for d in docs if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == "gpufleet-webhook"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpufleet-webhook", "namespace": NAMESPACE}]
    # the chart: the same account; without the tenancy admission, no token at all (as before)
    chart = render({"webhook": {"enabled": True}})
    [chart_deploy] = [d for d in chart if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpufleet-webhook"]
    assert chart_deploy["spec"]["template"]["spec"]["serviceAccountName"] == "gpufleet-webhook"
    assert _role(chart, "gpufleet-webhook")["rules"] == _role(docs, "gpufleet-webhook")["rules"]
    plain = render({"webhook": {"enabled": True, "tenancy": {"enabled": False}}})
    [plain_deploy] = [d for d in plain if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpufleet-webhook"]
    assert plain_deploy["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert not [d for d in plain if d["metadata"]["name"] == "gpufleet-webhook" and d["kind"] in (
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding")]
