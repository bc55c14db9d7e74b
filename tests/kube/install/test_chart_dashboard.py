"""The chart's optional dashboard (dashboard.enabled): a Deployment running `gpufleet dashboard --cluster`,
its Service, and a read-only ClusterRole that may create TokenReviews and SubjectAccessReviews."""

from __future__ import annotations

from typing import Any

import pytest

from .test_chart import _by_kind, render

pytest.importorskip("helm_python", reason="helm-python-sdk (the dev extra) renders the chart offline")

NAME = "gpufleet-dashboard"


def _named(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [doc] = [d for d in _by_kind(docs, kind) if d["metadata"]["name"] == NAME]
    return doc


def test_off_by_default() -> None:
    docs = render()
    assert not [d for d in docs if d["metadata"]["name"] == NAME]


def test_deployment_service_and_read_only_rbac() -> None:
    docs = render({"dashboard": {"enabled": True}})
    deploy = _named(docs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["command"] == ["gpufleet"]
    assert container["args"] == ["dashboard", "--cluster", "--host=0.0.0.0", "--port=8080", "--auth=kube",
                                 "--refresh=30"]
    assert pod["serviceAccountName"] == NAME
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    service = _named(docs, "Service")
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]
    assert service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    role = _named(docs, "ClusterRole")
    verbs = {(g, r): set(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert verbs[("authentication.k8s.io", "tokenreviews")] == {"create"}
    assert verbs[("authorization.k8s.io", "subjectaccessreviews")] == {"create"}
    writes = {k for k, v in verbs.items() if v - {"get", "list", "watch"}}
    assert writes == {("authentication.k8s.io", "tokenreviews"), ("authorization.k8s.io", "subjectaccessreviews")}
    binding = _named(docs, "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == NAME and binding["roleRef"]["name"] == NAME


def test_ledger_url_and_password() -> None:
    url = "postgresql+psycopg://gpufleet@db:5432/ledger"
    docs = render({"dashboard": {"enabled": True, "auth": "none", "ledgerUrl": url,
                                 "ledgerPasswordSecret": {"name": "db", "key": "pw"}}})
    [container] = _named(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert f"--ledger={url}" in container["args"] and "--auth=none" in container["args"]
    assert container["env"] == [{"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}]


@pytest.mark.parametrize("values", [{"auth": "open"}, {"ledgerUrl": "sqlite:///x.db"}, {"bogus": 1}])
def test_refused(values: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="dashboard"):
        render({"dashboard": {"enabled": True, **values}})
