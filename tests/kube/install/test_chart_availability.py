"""The chart's controller PodDisruptionBudget and optional ServiceMonitor, rendered on and off."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from .test_chart import CHART, NAMESPACE, _by_kind, _lint_problems, helm, render

SELECTOR = {"app.kubernetes.io/name": "gpufleet", "app.kubernetes.io/instance": "gpufleet",
            "app.kubernetes.io/component": "controller"}  # fmt: skip


def _pdbs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in _by_kind(docs, "PodDisruptionBudget")}


def test_two_replicas_get_a_pdb_keeping_one() -> None:
    docs = render()
    pdb = _pdbs(docs)["gpufleet-controller"]
    assert pdb["metadata"]["namespace"] == NAMESPACE
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": SELECTOR}}
    [deploy] = [d for d in _by_kind(docs, "Deployment") if d["metadata"]["name"] == "gpufleet-controller"]
    assert SELECTOR.items() <= deploy["spec"]["template"]["metadata"]["labels"].items()  # it selects the pods
    kubernetes_validate.validate(pdb, "1.37.0", strict=True)


def test_one_replica_has_no_pdb_unless_asked() -> None:
    single = {"replicas": 1, "leaderElection": {"enabled": False}}
    assert "gpufleet-controller" not in _pdbs(render({"controller": single}))
    pdb = _pdbs(render({"controller": {**single, "pdb": {"enabled": True}}}))["gpufleet-controller"]
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": SELECTOR}}


def test_service_monitor_is_off_by_default() -> None:
    assert _by_kind(render(), "ServiceMonitor") == []


def test_service_monitor_scrapes_the_metrics_service() -> None:
    docs = render({"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"},
                                                  "scrapeTimeout": "10s"}}})  # fmt: skip
    [monitor] = _by_kind(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["name"] == "gpufleet-controller"
    assert monitor["metadata"]["namespace"] == NAMESPACE
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"] == {
        "namespaceSelector": {"matchNames": [NAMESPACE]},
        "selector": {"matchLabels": SELECTOR},
        "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"}],
    }
    [service] = [s for s in _by_kind(docs, "Service") if s["metadata"]["name"] == "gpufleet-controller-metrics"]
    assert SELECTOR.items() <= service["metadata"]["labels"].items()  # the monitor's selector finds it
    assert [p["name"] for p in service["spec"]["ports"]] == ["metrics"]
    assert _lint_problems(CHART, {"metrics": {"serviceMonitor": {"enabled": True}}}) == []


def test_service_monitor_without_the_metrics_service_is_refused() -> None:
    with pytest.raises(helm.HelmError) as caught:
        render({"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}})
    assert str(caught.value) == (
        "execution error at (gpufleet/templates/servicemonitor.yaml:7:4): metrics.serviceMonitor.enabled needs "
        "metrics.service.enabled: the ServiceMonitor scrapes the controller's metrics Service")


@pytest.mark.parametrize("values", [{"controller": {"pdb": {"enabled": "yes"}}},
                                    {"metrics": {"serviceMonitor": {"interval": "often"}}},
                                    {"metrics": {"serviceMonitor": {"enable": True}}}])
def test_the_values_schema_rejects_bad_availability_values(values: dict[str, Any]) -> None:
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmValuesError):
        chart.validate_schema(values)
