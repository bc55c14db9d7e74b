"""The chart's Grafana dashboards and PrometheusRule: generated files, PromQL that parses (GreptimeTeam's
promql-parser) and names only metrics the controller exports, rendered with their switches on and off."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gpufleet.agent.service.wiring import agent_parts
from gpufleet.kube.controller.metrics import ControllerMetrics
from gpufleet.kube.install.observability import ALERTS, alert_rules, chart_files, dashboards

from .test_chart import CHART, NAMESPACE, _by_kind, _lint_problems, helm, render

promql = pytest.importorskip("promql_parser", reason="promql-parser (the dev extra) parses PromQL")

ON = {"grafana": {"dashboards": {"enabled": True}}, "prometheusRule": {"enabled": True}}

# What Grafana puts in place of its variables before the query reaches Prometheus.
GRAFANA_VARIABLES = {"$__rate_interval": "2m", "$__range_s": "86400", "$__range": "1d", "$gpu_hour_price": "2.5"}


def exported_names() -> set[str]:
    """Every series name a controller's registry or a node agent's page can show (histograms:
    _bucket, _sum, _count), from their own registries."""
    _, usage = agent_parts("node-1", export_usage=True)  # the agent's page: its health families and usage's
    assert usage is not None
    names: set[str] = set()
    for registry in (ControllerMetrics().registry, usage.exporter.registry):
        for family in registry.collect():
            suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(family.type, ("",))
            names |= {family.name + s for s in suffixes}
    return names


def selectors(node: Any) -> list[Any]:
    """Every vector selector of a parsed expression."""
    if isinstance(node, promql.VectorSelector):
        return [node]
    if isinstance(node, promql.MatrixSelector):
        return [node.vector_selector]
    children: list[Any] = []
    if isinstance(node, promql.BinaryExpr):
        children = [node.lhs, node.rhs]
    elif isinstance(node, promql.AggregateExpr):
        children = [node.expr, node.param]
    elif isinstance(node, promql.Call):
        children = list(node.args)
    elif isinstance(node, promql.ParenExpr | promql.UnaryExpr | promql.SubqueryExpr):
        children = [node.expr]
    return [s for child in children if child is not None for s in selectors(child)]


def metric_names(expr: str) -> set[str]:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    found = {s.name for s in selectors(promql.parse(expr))}
    assert None not in found and found, expr  # every selector names its metric
    return found


def dashboard_exprs() -> list[tuple[str, str]]:
    return [(f"{stem}: {panel['title']}", target["expr"]) for stem, board in dashboards().items()
            for panel in board["panels"] for target in panel["targets"]]


def test_the_chart_stores_the_generated_dashboards_and_rules() -> None:
    for path, text in chart_files(CHART).items():
        assert path.read_text(encoding="utf-8") == text, f"{path}: run gpufleet manifests --update-chart"


def test_the_walker_finds_every_metric_and_the_parser_refuses_bad_promql() -> None:
    assert metric_names("sum(rate(a_total[5m])) / on (q) (b > 0) and absent(c)") == {"a_total", "b", "c"}
    with pytest.raises(Exception):  # noqa: B017 (the binding raises a plain ValueError)
        promql.parse("sum by (queue (gpufleet_leader)")


@pytest.mark.parametrize(("where", "expr"), dashboard_exprs())
def test_every_dashboard_expression_parses_and_names_exported_metrics(where: str, expr: str) -> None:
    assert metric_names(expr) <= exported_names(), where


@pytest.mark.parametrize("rule", alert_rules()["groups"][0]["rules"], ids=[a[0] for a in ALERTS])
def test_every_alert_parses_and_names_exported_metrics(rule: dict[str, Any]) -> None:
    assert metric_names(rule["expr"]) <= exported_names(), rule["alert"]


def test_the_variables_name_exported_metrics() -> None:
    for board in dashboards().values():
        for variable in board["templating"]["list"]:
            if variable["type"] == "query":
                [(metric, label)] = re.findall(r"^label_values\((\w+), (\w+)\)$", variable["query"]["query"])
                assert metric in exported_names() and label in ("queue", "project")


def test_the_alerts_cover_idle_starved_health_and_leadership() -> None:
    assert [a[0] for a in ALERTS] == ["GpufleetIdleGpus", "GpufleetQueueStarved", "GpufleetUnhealthyGpus",
                                      "GpufleetGpuXidErrors", "GpufleetNodesNotReady", "GpufleetNoLeader",
                                      "GpufleetControllerAbsent"]
    starved = dict((a[0], a) for a in ALERTS)["GpufleetQueueStarved"]
    assert starved[2] == "1h" and "gpufleet_queue_pending_gpus > 0" in starved[1]


def test_dashboards_and_rule_are_off_by_default() -> None:
    docs = render()
    assert _by_kind(docs, "PrometheusRule") == []
    assert [d for d in _by_kind(docs, "ConfigMap") if "grafana_dashboard" in d["metadata"].get("labels", {})] == []


def test_dashboards_ship_as_configmaps_the_sidecar_loads() -> None:
    docs = render({"grafana": {"dashboards": {"enabled": True, "annotations": {"grafana_folder": "GPUs"}}}})
    maps = {d["metadata"]["name"]: d for d in _by_kind(docs, "ConfigMap")
            if d["metadata"]["labels"].get("grafana_dashboard") == "1"}
    assert sorted(maps) == ["gpufleet-dashboard-cluster", "gpufleet-dashboard-queue", "gpufleet-dashboard-team-cost"]
    for stem, board in dashboards().items():
        cm = maps[f"gpufleet-dashboard-{stem}"]
        assert cm["metadata"]["namespace"] == NAMESPACE
        assert cm["metadata"]["annotations"] == {"grafana_folder": "GPUs"}
        assert json.loads(cm["data"][f"gpufleet-{stem}.json"]) == board
        kubernetes_validate.validate(cm, "1.37.0", strict=True)
    other = render({"grafana": {"dashboards": {"enabled": True, "label": "dash", "labelValue": "yes",
                                               "namespace": "monitoring"}}})
    [*moved] = [d for d in _by_kind(other, "ConfigMap") if d["metadata"]["labels"].get("dash") == "yes"]
    assert len(moved) == 3 and {d["metadata"]["namespace"] for d in moved} == {"monitoring"}


# The PrometheusRule spec as the Prometheus Operator's CRD (monitoring.coreos.com/v1) constrains it.
_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_RULE_SPEC = {
    "type": "object", "additionalProperties": False, "required": ["groups"],
    "properties": {"groups": {"type": "array", "items": {
        "type": "object", "additionalProperties": False, "required": ["name"],
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "interval": {"type": "string", "pattern": _DURATION},
            "rules": {"type": "array", "items": {
                "type": "object", "additionalProperties": False, "required": ["expr"],
                "properties": {
                    "alert": {"type": "string"}, "record": {"type": "string"},
                    "expr": {"type": ["string", "integer"]},
                    "for": {"type": "string", "pattern": _DURATION},
                    "keep_firing_for": {"type": "string", "pattern": _DURATION},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                }}},
        }}}},
}  # fmt: skip


def test_the_prometheus_rule_carries_the_alerts() -> None:
    docs = render({"prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}}})
    [rule] = _by_kind(docs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == NAMESPACE and rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["spec"] == alert_rules()
    jsonschema.validate(rule["spec"], _RULE_SPEC)
    names = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert len(names) == len(set(names))
    for r in rule["spec"]["groups"][0]["rules"]:
        assert r["labels"]["severity"] in ("info", "warning", "critical") and r["annotations"]["summary"]
    # the annotations' {{ $labels.queue }} reach Prometheus as written, not as Helm templates
    assert "{{ $labels.queue }}" in yaml.safe_dump(rule["spec"])


def test_the_chart_lints_with_everything_on() -> None:
    assert _lint_problems(CHART, ON) == []


@pytest.mark.parametrize("values", [{"grafana": {"dashboards": {"enabled": "yes"}}},
                                    {"grafana": {"dashboards": {"label": ""}}},
                                    {"prometheusRule": {"enable": True}},
                                    {"prometheusRule": {"labels": {"a": 1}}}])
def test_the_values_schema_rejects_bad_observability_values(values: dict[str, Any]) -> None:
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmValuesError):
        chart.validate_schema(values)
