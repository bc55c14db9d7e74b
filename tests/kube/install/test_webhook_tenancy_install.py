"""The webhook's tenancy admission in the install (chart: webhook.tenancy.enabled, `gpufleet manifests
--webhook [--no-webhook-tenancy]`): the tenancy entry of the MutatingWebhookConfiguration, the
Deployment's --tenancy and /readyz, and its ClusterRole, exactly the API calls of the webhook."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gpufleet.kube import Kind
from gpufleet.kube.install.manifests import WEBHOOK_MATCH, InstallOptions, install_objects
from gpufleet.kube.install.rbac import verb_of
from gpufleet.kube.install.tenancy import TENANCY_MUTATE_MATCH, TENANCY_WEBHOOK_MATCH, WEBHOOK_RULES
from gpufleet.kube.webhook.state import WATCHED_KINDS

from .test_chart import NAMESPACE, _normalised, render

WEBHOOK_SOURCES = Path(__file__).resolve().parents[3] / "src" / "gpufleet" / "kube" / "webhook"
CERT_MANAGER = {"enabled": True, "certificates": {"mode": "certManager"}}


def _one(docs: list[dict[str, Any]], kind: str, name: str = "gpufleet-webhook") -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _manifests(tenancy: bool) -> list[dict[str, Any]]:
    return install_objects(InstallOptions(examples=False, webhook=True, webhook_tenancy=tenancy))


def _chart(enabled: bool, **webhook: Any) -> list[dict[str, Any]]:
    return render({"webhook": {**CERT_MANAGER, "tenancy": {"enabled": enabled}, **webhook}})


TENANCY_RULES = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "Namespaced"},
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods/ephemeralcontainers"],
     "scope": "Namespaced"},
    {"apiGroups": ["gpufleet.dev"], "apiVersions": ["v1alpha1"], "operations": ["CREATE"], "resources": ["podgroups"],
     "scope": "Namespaced"},
    *({"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": [resource],
       "scope": "Namespaced"} for group, resource in (("batch", "jobs"), ("batch", "cronjobs"), ("apps", "deployments"),
                                                      ("apps", "replicasets"), ("apps", "statefulsets"))),
]  # fmt: skip


def test_the_mutating_entries_with_tenancy_on_and_off() -> None:
    for docs in (_manifests(True), _chart(True)):
        fractional, tenancy = _normalised(_one(docs, "MutatingWebhookConfiguration"))["webhooks"]
        assert fractional["name"] == "fractional-gpus.gpufleet.dev"
        assert fractional["matchConditions"] == [{"name": "gpufleet-fractional-pod", "expression": WEBHOOK_MATCH}]
        assert tenancy["name"] == "tenancy.gpufleet.dev"
        assert tenancy["clientConfig"]["service"] == {"name": "gpufleet-webhook", "namespace": NAMESPACE,
                                                      "path": "/mutate", "port": 443}  # fmt: skip
        assert tenancy["rules"] == TENANCY_RULES
        assert tenancy["reinvocationPolicy"] == "IfNeeded" and tenancy["failurePolicy"] == "Fail"
        assert tenancy["matchConditions"] == [{"name": "gpufleet-pod-or-podgroup", "expression": TENANCY_MUTATE_MATCH}]
        assert tenancy["namespaceSelector"] == fractional["namespaceSelector"]
    # tenancy off: exactly the fractional entry, as before tenancy
    [alone] = _normalised(_one(_manifests(False), "MutatingWebhookConfiguration"))["webhooks"]
    assert alone == fractional
    [chart_alone] = _normalised(_one(_chart(False), "MutatingWebhookConfiguration"))["webhooks"]
    assert chart_alone == alone
    assert [d for d in _chart(False) if d["kind"] == "ValidatingWebhookConfiguration"
            and d["metadata"]["name"] == "gpufleet-webhook"] == []  # the gpu-visibility one stays


def test_each_entry_keeps_its_own_failure_policy() -> None:
    docs = _chart(True, tenancy={"enabled": True, "failurePolicy": "Ignore"})
    fractional, tenancy = _one(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert (fractional["failurePolicy"], tenancy["failurePolicy"]) == ("Fail", "Ignore")
    validating, claims = _one(docs, "ValidatingWebhookConfiguration")["webhooks"]
    assert (validating["failurePolicy"], claims["failurePolicy"]) == ("Ignore", "Ignore")  # claims: always Ignore
    docs = _chart(True, failurePolicy="Ignore", matchConditions=False)
    fractional, tenancy = _one(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert (fractional["failurePolicy"], tenancy["failurePolicy"]) == ("Ignore", "Ignore")
    assert "matchConditions" not in tenancy


def test_the_deployment_runs_the_tenancy_admission_and_is_ready_once_synced() -> None:
    for tenancy in (True, False):
        for docs in (_manifests(tenancy), _chart(tenancy)):
            pod_spec = _one(docs, "Deployment")["spec"]["template"]["spec"]
            [container] = pod_spec["containers"]
            assert ("--tenancy" in container["args"]) is tenancy
            assert container["readinessProbe"]["httpGet"]["path"] == ("/readyz" if tenancy else "/healthz")
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
            assert pod_spec.get("serviceAccountName") == ("gpufleet-webhook" if tenancy else None)
            assert pod_spec.get("automountServiceAccountToken") is (None if tenancy else False)
        assert _normalised(_one(_manifests(tenancy), "Deployment"))["spec"]["template"]["spec"]["containers"] == (
            _normalised(_one(_chart(tenancy), "Deployment"))["spec"]["template"]["spec"]["containers"])


@pytest.mark.parametrize("tenancy", [True, False])
def test_the_chart_installs_what_gpufleet_manifests_prints_for_the_webhook(tenancy: bool) -> None:
    def keyed(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
        return {(d["kind"], d["metadata"]["name"]): _normalised(d) for d in docs
                if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "webhook"}

    chart, manifests = keyed(_chart(tenancy)), keyed(_manifests(tenancy))
    assert sorted(chart) == sorted(manifests)
    for key, doc in manifests.items():
        assert chart[key] == doc, key
    assert (("ClusterRole", "gpufleet-webhook") in chart) is tenancy


def _grants(rules: Any) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}  # fmt: skip


def test_the_webhook_rules_are_exactly_the_calls_of_the_webhook() -> None:
    """The informers list and watch every kind of state.WATCHED_KINDS; the other calls are read from
    the webhook's source (``api.<call>(Kind.X`` and create_access_review): nothing more is granted."""
    calls = {verb_of(operation, kind) for kind in WATCHED_KINDS for operation in ("list", "watch")}
    direct = set()
    for path in sorted(WEBHOOK_SOURCES.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        direct |= {(operation, Kind[name]) for operation, name in re.findall(r"\bapi\.(\w+)\(Kind\.(\w+)", text)}
        if "api.create_access_review(" in text:
            direct.add(("create", Kind.SUBJECT_ACCESS_REVIEW))
    assert direct == {("get", Kind.POD_GROUP), ("create", Kind.SUBJECT_ACCESS_REVIEW)}  # the scan is live
    calls |= {verb_of(operation, kind) for operation, kind in direct}
    assert _grants(WEBHOOK_RULES) == calls
    assert ("", "pods", "list") in calls and ("", "pods", "watch") in calls
    for docs in (_manifests(True), _chart(True)):
        assert _one(docs, "ClusterRole")["rules"] == [dict(rule) for rule in WEBHOOK_RULES]


@pytest.mark.parametrize(("request_", "obj", "fractional", "tenancy"), [
    ({"operation": "CREATE", "subResource": ""}, {"spec": {"schedulerName": "gpufleet"}}, False, True),
    ({"operation": "CREATE", "subResource": ""},
     {"metadata": {"annotations": {"team": "a"}}, "spec": {"schedulerName": "gpufleet"}}, False, True),
    ({"operation": "CREATE", "subResource": ""},
     {"metadata": {"annotations": {"gpufleet.dev/gpu-blocks": "25"}}, "spec": {"schedulerName": "gpufleet"}},
     True, False),
    ({"operation": "CREATE", "subResource": ""},
     {"metadata": {"annotations": {"gpufleet.dev/gpu-memory": "10Gi"}}, "spec": {"schedulerName": "gpufleet"}},
     True, False),
    ({"operation": "UPDATE", "subResource": "ephemeralcontainers"},
     {"metadata": {"annotations": {"gpufleet.dev/gpu-blocks": "25"}}, "spec": {"schedulerName": "gpufleet"}},
     True, True),  # the fractional entry's rules do not cover the subresource: only the tenancy entry's do
    ({"operation": "CREATE", "subResource": ""}, {"spec": {"schedulerName": "default-scheduler"}}, False, False),
    ({"operation": "CREATE", "subResource": ""}, {"spec": {}}, False, False),
])  # fmt: skip
def test_the_match_conditions_send_each_pod_of_ours_to_mutate_once(
        request_: dict[str, Any], obj: dict[str, Any], fractional: bool, tenancy: bool) -> None:
    celpy = pytest.importorskip("celpy", reason="cel-python (the dev extra) evaluates the CEL")
    env = celpy.Environment()

    def matches(expression: str, resource: str, target: dict[str, Any]) -> bool:
        activation = {"request": celpy.json_to_cel({**request_, "resource": {"resource": resource}}),
                      "object": celpy.json_to_cel(target)}
        return bool(env.program(env.compile(expression)).evaluate(activation))

    assert matches(WEBHOOK_MATCH, "pods", obj) is fractional
    assert matches(TENANCY_MUTATE_MATCH, "pods", obj) is tenancy
    assert matches(TENANCY_MUTATE_MATCH, "podgroups", {"spec": {"minMember": 2}})


@pytest.mark.parametrize(("resource", "obj", "sent"), [
    ("jobs", {"spec": {"template": {"spec": {"schedulerName": "gpufleet"}}}}, True),
    ("deployments", {"spec": {"template": {"spec": {"schedulerName": "gpufleet"}}}}, True),
    ("statefulsets", {"spec": {"template": {"spec": {"schedulerName": "gpufleet"}}}}, True),
    ("cronjobs", {"spec": {"jobTemplate": {"spec": {"template": {"spec": {"schedulerName": "gpufleet"}}}}}}, True),
    ("deployments", {"spec": {"template": {"spec": {}}}}, False),  # every other Deployment: never sent
    ("replicasets", {"spec": {"template": {"spec": {"schedulerName": "default-scheduler"}}}}, False),
    ("cronjobs", {"spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}}, False),
])  # fmt: skip
def test_workloads_reach_mutate_only_when_their_template_is_ours(resource: str, obj: dict[str, Any],
                                                                  sent: bool) -> None:
    """/mutate stamps the templates of gpufleet's workloads (docs/semantics-notes.md, "Workloads"),
    and /validate refuses a template without the stamp: both entries must see the same workloads."""
    celpy = pytest.importorskip("celpy", reason="cel-python (the dev extra) evaluates the CEL")
    env = celpy.Environment()
    activation = {"request": celpy.json_to_cel({"operation": "CREATE", "subResource": "",
                                                "resource": {"resource": resource}}),
                  "object": celpy.json_to_cel(obj)}
    for expression in (TENANCY_MUTATE_MATCH, TENANCY_WEBHOOK_MATCH):
        assert bool(env.program(env.compile(expression)).evaluate(activation)) is sent
