"""The chart's usage ledger values: the controller's --database and telemetry arguments, the SQLite
volume (a PVC by default), the PostgreSQL password from a Secret, and what the chart refuses."""

from __future__ import annotations

from typing import Any

import pytest

from .test_chart import _by_kind, _controller, render

pytest.importorskip("helm_python", reason="helm-python-sdk (the dev extra) renders the chart offline")


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = _controller(docs)["spec"]["template"]["spec"]["containers"][0]
    return container


def test_off_by_default() -> None:
    docs = render()
    args = _container(docs)["args"]
    assert not any(a.startswith(("--database", "--telemetry", "--cost-centre")) for a in args)
    assert not _by_kind(docs, "PersistentVolumeClaim")


def test_sqlite_on_a_kept_pvc_with_one_replica() -> None:
    docs = render({"controller": {"replicas": 1, "ledger": {"enabled": True, "costCentreLabels": ["team", "cc"]},
                                  "telemetry": {"exporters": ["http://a:9400/metrics", "http://b:9400/metrics"]}}})
    deploy = _controller(docs)
    args = _container(docs)["args"]
    assert "--database=/var/lib/gpufleet/ledger.db" in args
    assert "--cost-centre-labels=team,cc" in args
    assert "--telemetry-exporters=http://a:9400/metrics,http://b:9400/metrics" in args
    assert "--telemetry-interval=30" in args
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    assert deploy["spec"]["template"]["spec"]["securityContext"]["fsGroup"] == 65532
    [pvc] = _by_kind(docs, "PersistentVolumeClaim")
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    volumes = {v["name"]: v for v in deploy["spec"]["template"]["spec"]["volumes"]}
    assert volumes["ledger"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in _container(docs)["volumeMounts"]}
    assert mounts["ledger"] == "/var/lib/gpufleet"


def test_sqlite_on_an_empty_dir() -> None:
    docs = render({"controller": {"replicas": 1, "ledger": {"enabled": True, "sqlite": {"volume": "emptyDir"}}}})
    volumes = {v["name"]: v for v in _controller(docs)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["ledger"] == {"name": "ledger", "emptyDir": {}}
    assert not _by_kind(docs, "PersistentVolumeClaim")


def test_postgres_with_its_password_from_a_secret() -> None:
    url = "postgresql+psycopg://gpufleet@db.example:5432/ledger"
    docs = render({"controller": {"ledger": {"enabled": True, "databaseUrl": url,
                                             "passwordSecret": {"name": "ledger-db", "key": "pw"}},
                                  "telemetry": {"prometheusUrl": "http://prometheus:9090"}}})
    container = _container(docs)
    assert f"--database={url}" in container["args"]
    assert "--telemetry-prometheus=http://prometheus:9090" in container["args"]
    env = {e["name"]: e for e in container["env"]}
    assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "ledger-db", "key": "pw"}
    assert _controller(docs)["spec"]["replicas"] == 2
    assert "strategy" not in _controller(docs)["spec"]
    assert not _by_kind(docs, "PersistentVolumeClaim")


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"ledger": {"enabled": True}}, "needs controller.replicas: 1"),
        ({"telemetry": {"prometheusUrl": "http://p:9090"}}, "needs controller.ledger.enabled"),
        ({"replicas": 1, "ledger": {"enabled": True},
          "telemetry": {"prometheusUrl": "http://p:9090", "exporters": ["http://a/metrics"]}}, "not both"),
        ({"ledger": {"enabled": True, "databaseUrl": "mysql://x/y"}}, "databaseUrl"),
    ],
)
def test_refused(values: dict[str, Any], needle: str) -> None:
    with pytest.raises(Exception, match=needle):
        render({"controller": values})
