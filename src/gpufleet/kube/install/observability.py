"""The chart's Grafana dashboards and PrometheusRule alerts, as data (docs/metrics.md).

``gpufleet manifests --update-chart`` writes them into the chart (``files/dashboards/*.json``,
``files/prometheus/rules.yaml``); the templates ``grafana-dashboards.yaml`` (ConfigMaps with the
Grafana sidecar's label, behind ``grafana.dashboards.enabled``) and ``prometheusrule.yaml`` (behind
``prometheusRule.enabled``) ship them. Every expression names only metrics the controller exports
(:mod:`gpufleet.kube.controller.metrics`); the tests parse each with a PromQL parser.

The per-queue gauges are subtree sums: sums over queues multiply by ``gpufleet_queue_leaf`` first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = ["ALERTS", "DASHBOARDS", "alert_rules", "chart_files", "dashboard_json", "dashboards"]

JsonDict = dict[str, Any]

_DS = {"type": "prometheus", "uid": "${datasource}"}


def _leaf(metric: str, selector: str = "") -> str:
    """``metric`` of leaf queues only (its subtree sums would count nested queues twice)."""
    return f"({metric}{selector} * on (queue, project) gpufleet_queue_leaf{selector})"


def _panel(title: str, targets: Sequence[tuple[str, str]], *, unit: str = "none", kind: str = "timeseries",
           description: str = "") -> JsonDict:
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": _DS,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}} if kind == "timeseries" else {},
        "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend, "datasource": _DS}
                    for i, (expr, legend) in enumerate(targets)],
    }


def _layout(panels: Sequence[JsonDict], width: int = 12, height: int = 8) -> list[JsonDict]:
    """Two panels a row (stats four a row), with ids."""
    out: list[JsonDict] = []
    x = y = 0
    for i, panel in enumerate(panels):
        w = 6 if panel["type"] == "stat" else width
        h = 4 if panel["type"] == "stat" else height
        if x + w > 24:
            x, y = 0, y + h
        out.append({**panel, "id": i + 1, "gridPos": {"x": x, "y": y, "w": w, "h": h}})
        x += w
    return out


def _variable(name: str, query: str, label: str, *, multi: bool = False) -> JsonDict:
    return {"name": name, "label": label, "type": "query", "datasource": _DS, "refresh": 2, "sort": 1,
            "query": {"query": query, "refId": name}, "definition": query, "multi": multi, "includeAll": multi}


def _dashboard(uid: str, title: str, panels: Sequence[JsonDict], variables: Sequence[JsonDict] = (),
               time_from: str = "now-24h") -> JsonDict:
    datasource = {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus"}
    return {
        "uid": uid,
        "title": title,
        "tags": ["gpufleet"],
        "editable": True,
        "schemaVersion": 39,
        "time": {"from": time_from, "to": "now"},
        "refresh": "1m",
        "templating": {"list": [datasource, *variables]},
        "panels": _layout(panels),
    }


_RATE = "$__rate_interval"


def _quantile(q: float, metric: str, by: str, selector: str = "") -> str:
    return f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{selector}[{_RATE}])))"


def _cluster() -> JsonDict:
    return _dashboard("gpufleet-cluster", "gpufleet / Cluster", [
        _panel("GPUs allocated", [(f"sum({_leaf('gpufleet_queue_allocated_gpus')})", "allocated")], kind="stat"),
        _panel("GPUs used", [(f"sum({_leaf('gpufleet_queue_used_gpus')})", "used")], kind="stat",
               description="From telemetry (dcgm-exporter): GPUs times utilisation."),
        _panel("Idle allocated GPUs", [(f"sum({_leaf('gpufleet_queue_idle_gpus')})", "idle")], kind="stat"),
        _panel("Unhealthy GPUs", [('sum(gpufleet_gpus{health="unhealthy"})', "unhealthy")], kind="stat"),
        _panel("GPU Xid errors by node and Xid (agent)", [
            (f"sum by (instance, xid) (increase(gpufleet_agent_xid_errors_total[{_RATE}]))",
             "{{instance}} Xid {{xid}}"),
        ], description="From the node agents (gpufleet agent): Xid errors NVML reported; docs/agent.md, \"Xids\", "
                       "says which mark a GPU."),
        _panel("Allocated versus used GPUs", [
            (f"sum({_leaf('gpufleet_queue_allocated_gpus')})", "allocated"),
            (f"sum({_leaf('gpufleet_queue_used_gpus')})", "used"),
            ('sum(gpufleet_gpus{health="healthy"})', "healthy GPUs"),
        ]),
        _panel("Pending GPUs by queue", [(_leaf("gpufleet_queue_pending_gpus"), "{{queue}}")]),
        _panel("Allocated GPUs by project", [(f"sum by (project) ({_leaf('gpufleet_queue_allocated_gpus')})",
                                              "{{project}}")]),
        _panel("Borrowed GPUs by queue", [("gpufleet_queue_borrowed_gpus > 0", "{{queue}}")]),
        _panel("Wait p95 by queue", [(_quantile(0.95, "gpufleet_queue_wait_seconds", "queue"), "{{queue}}")], unit="s"),
        _panel("Preemptions by reason", [("sum by (reason) (increase(gpufleet_queue_preemptions_total[1h]))",
                                          "{{reason}}")]),
        _panel("Nodes by state", [("gpufleet_nodes", "{{state}}")]),
        _panel("Scheduling cycle p99", [(_quantile(0.99, "gpufleet_cycle_duration_seconds", "job"), "{{job}}")],
               unit="s"),
        _panel("Bindings per second", [(f"sum by (result) (rate(gpufleet_bindings_total[{_RATE}]))", "{{result}}")],
               unit="ops"),
        _panel("Leader replicas", [("sum(gpufleet_leader)", "leaders")]),
    ])


def _queue() -> JsonDict:
    q = '{queue="$queue"}'
    return _dashboard("gpufleet-queue", "gpufleet / Queue", [
        _panel("Allocated GPUs", [(f"gpufleet_queue_allocated_gpus{q}", "allocated")], kind="stat"),
        _panel("Quota", [(f"gpufleet_queue_quota_gpus{q}", "quota")], kind="stat"),
        _panel("Pending gangs", [(f"gpufleet_queue_pending_gangs{q}", "gangs")], kind="stat"),
        _panel("Idle allocated GPUs", [(f"gpufleet_queue_idle_gpus{q}", "idle")], kind="stat"),
        _panel("GPUs: allocated, used, quota", [
            (f"gpufleet_queue_allocated_gpus{q}", "allocated"),
            (f"gpufleet_queue_used_gpus{q}", "used"),
            (f"gpufleet_queue_quota_gpus{q}", "quota"),
        ]),
        _panel("Borrowed and lent GPUs", [(f"gpufleet_queue_borrowed_gpus{q}", "borrowed"),
                                          (f"gpufleet_queue_lent_gpus{q}", "lent")]),
        _panel("Pending GPUs", [(f"gpufleet_queue_pending_gpus{q}", "pending")]),
        _panel("Wait by PriorityClass (p50, p95)", [
            (_quantile(0.5, "gpufleet_queue_wait_seconds", "priority_class", q), "p50 {{priority_class}}"),
            (_quantile(0.95, "gpufleet_queue_wait_seconds", "priority_class", q), "p95 {{priority_class}}"),
        ], unit="s"),
        _panel("Job completion time (p50, p95)", [
            (_quantile(0.5, "gpufleet_queue_job_completion_seconds", "queue", q), "p50"),
            (_quantile(0.95, "gpufleet_queue_job_completion_seconds", "queue", q), "p95"),
        ], unit="s"),
        _panel("Preempted GPU-hours (per hour)", [
            (f"sum by (reason) (increase(gpufleet_queue_preempted_gpu_seconds_total{q}[1h])) / 3600", "{{reason}}"),
        ]),
    ], [_variable("queue", "label_values(gpufleet_queue_allocated_gpus, queue)", "Queue")])


def _team_cost() -> JsonDict:
    p = '{project=~"$project"}'
    price = {"name": "gpu_hour_price", "label": "Price per GPU-hour", "type": "textbox", "query": "2.5",
             "current": {"text": "2.5", "value": "2.5"}}
    hours = "($__range_s / 3600)"
    def mean(metric: str) -> str:  # over the range, leaves only
        return f"sum by (project) (avg_over_time({metric}{p}[$__range]) * on (queue, project) gpufleet_queue_leaf{p})"

    allocated, used = mean("gpufleet_queue_allocated_gpus"), mean("gpufleet_queue_used_gpus")
    return _dashboard("gpufleet-team-cost", "gpufleet / Team cost and usage", [
        _panel("GPU-hours allocated in the range", [(f"{allocated} * {hours}", "{{project}}")], kind="bargauge"),
        _panel("GPU-hours used in the range", [(f"{used} * {hours}", "{{project}}")], kind="bargauge"),
        _panel("Cost of the allocated GPU-hours", [(f"{allocated} * {hours} * $gpu_hour_price", "{{project}}")],
               kind="bargauge", unit="currencyUSD",
               description="Allocated GPU-hours times the price variable (gpufleet report usage bills precisely)."),
        _panel("Efficiency (used / allocated)", [(f"{used} / {allocated}", "{{project}}")], kind="bargauge",
               unit="percentunit"),
        _panel("Allocated GPUs by project", [(f"sum by (project) ({_leaf('gpufleet_queue_allocated_gpus', p)})",
                                              "{{project}}")]),
        _panel("Idle allocated GPUs by project", [(f"sum by (project) ({_leaf('gpufleet_queue_idle_gpus', p)})",
                                                   "{{project}}")]),
        _panel("GPU-hours lost to preemption in the range", [
            (f"sum by (project, reason) (increase(gpufleet_queue_preempted_gpu_seconds_total{p}[$__range])) / 3600",
             "{{project}} {{reason}}"),
        ], kind="bargauge"),
        _panel("Wait p95 by queue", [(_quantile(0.95, "gpufleet_queue_wait_seconds", "queue", p), "{{queue}}")],
               unit="s"),
    ], [_variable("project", "label_values(gpufleet_queue_allocated_gpus, project)", "Project", multi=True), price],
        time_from="now-30d")


DASHBOARDS = ("cluster", "queue", "team-cost")


def dashboards() -> dict[str, JsonDict]:
    """Each dashboard by file stem (``gpufleet-<stem>.json``)."""
    return {"cluster": _cluster(), "queue": _queue(), "team-cost": _team_cost()}


def dashboard_json(dashboard: JsonDict) -> str:
    return json.dumps(dashboard, indent=2, sort_keys=True) + "\n"


_STARVED = ("(gpufleet_queue_pending_gpus > 0) and on (queue, project) "
            "(gpufleet_queue_allocated_gpus < gpufleet_queue_quota_gpus)")

# (alert, expr, for, severity, summary, description)
ALERTS: tuple[tuple[str, str, str, str, str, str], ...] = (
    ("GpufleetIdleGpus", f"sum by (queue, project) ({_leaf('gpufleet_queue_idle_gpus')}) > 0", "1h", "info",
     "Queue {{ $labels.queue }} holds {{ $value }} idle GPUs",
     "Pods of queue {{ $labels.queue }} (project {{ $labels.project }}) hold GPUs they have used under the idle "
     "threshold for the idle window, for an hour more: `gpufleet report idle` names them."),
    ("GpufleetQueueStarved", _STARVED, "1h", "warning",
     "Queue {{ $labels.queue }} waits under its quota",
     "Queue {{ $labels.queue }} has had pending GPUs for an hour while its allocation stays under its quota: "
     "its guarantee is not met (borrowers not reclaimed, fragmentation, or constraints nothing satisfies)."),
    ("GpufleetUnhealthyGpus", 'sum(gpufleet_gpus{health="unhealthy"}) > 0', "10m", "warning",
     "{{ $value }} GPUs are unhealthy",
     "The device plugin reports unhealthy GPUs (the nodes' gpufleet.dev/unhealthy-gpus); they are not scheduled."),
    ("GpufleetGpuXidErrors", "sum by (instance, gpu, xid) (increase(gpufleet_agent_xid_errors_total[15m])) > 0",
     "0m", "warning",
     "GPU {{ $labels.gpu }} of {{ $labels.instance }} reported Xid {{ $labels.xid }}",
     "The node agent read Xid {{ $labels.xid }} from NVML on GPU {{ $labels.gpu }} in the last 15 minutes "
     "(gpufleet_agent_xid_errors_total; only where the agent runs, agent.enabled). docs/agent.md, \"Xids\", "
     "gives its meaning and NVIDIA's action; a GPU the rules marked is in the Node's gpufleet.dev/unhealthy-gpus "
     "and its GPUHealthy condition."),
    ("GpufleetNodesNotReady", 'sum(gpufleet_nodes{state="not_ready"}) > 0', "10m", "warning",
     "{{ $value }} GPU nodes are not ready",
     "Nodes carry the not-ready or unreachable taint: their GPUs cannot be scheduled."),
    ("GpufleetNoLeader", "max(gpufleet_leader) < 1", "5m", "critical",
     "No gpufleet controller replica leads",
     "Every controller replica is a follower: nothing is scheduled. Check the leader-election Lease."),
    ("GpufleetControllerAbsent", "absent(gpufleet_leader)", "10m", "critical",
     "The gpufleet controller's metrics are absent",
     "Prometheus scrapes no gpufleet controller: it is down, or the ServiceMonitor does not select it."),
)


def alert_rules() -> JsonDict:
    """The PrometheusRule's ``spec``."""
    return {"groups": [{"name": "gpufleet", "rules": [
        {"alert": name, "expr": expr, "for": duration, "labels": {"severity": severity},
         "annotations": {"summary": summary, "description": description}}
        for name, expr, duration, severity, summary, description in ALERTS
    ]}]}


def chart_files(chart_dir: Path) -> dict[Path, str]:
    """The chart's generated dashboards and rules, by path."""
    out = {chart_dir / "files" / "dashboards" / f"gpufleet-{stem}.json": dashboard_json(board)
           for stem, board in dashboards().items()}
    header = ("# Generated by `gpufleet manifests --update-chart` from gpufleet.kube.install.observability: "
              "do not edit.\n")
    out[chart_dir / "files" / "prometheus" / "rules.yaml"] = header + yaml.safe_dump(
        alert_rules(), sort_keys=False, default_flow_style=False, width=100)
    return out
