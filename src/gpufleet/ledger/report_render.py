"""The usage and idle reports as text: an aligned table, CSV or JSON (the HTML page: commands.report_html).

Hours are GPU-hours. The table rounds (GPU-hours to 2 decimals, cost to 2, waits as 45s / 12.5m / 3.2h);
CSV and JSON keep full precision, waits in seconds. CSV has one row per group and no total (a reader
that sums the rows gets the totals, except the percentiles); JSON has the rows and the total.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from gpufleet.adapters.text import text_table
from gpufleet.ledger.reports import IdleReport, UsageReport, UsageRow

__all__ = ["idle_csv", "idle_json", "idle_table", "iso", "usage_csv", "usage_json", "usage_table"]

NONE = "(none)"  # a group whose intervals have no value for the key

_FIGURES = (
    ("intervals", "intervals"),
    ("gpu_hours", "gpuHours"),
    ("used_gpu_hours", "usedGpuHours"),
    ("measured_gpu_hours", "measuredGpuHours"),
    ("unmeasured_gpu_hours", "unmeasuredGpuHours"),
    ("efficiency", "efficiency"),
    ("cost", "cost"),
    ("gpu_cost", "gpuCost"),
    ("preempted_gpu_hours", "preemptedGpuHours"),
    ("preempted_cost", "preemptedCost"),
    ("waits", "waits"),
    ("wait_p50_s", "waitP50Seconds"),
    ("wait_p95_s", "waitP95Seconds"),
    ("wait_p99_s", "waitP99Seconds"),
)


def iso(seconds: float) -> str:
    """Epoch seconds as an ISO 8601 UTC time, ``2026-11-01T00:00:00Z``."""
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _figures(row: UsageRow, priced: bool) -> dict[str, Any]:
    out = {camel: getattr(row, name) for name, camel in _FIGURES}
    if not priced:
        for name in ("cost", "gpuCost", "preemptedCost"):
            del out[name]
    return out


def usage_json(report: UsageReport) -> str:
    priced = report.currency is not None
    doc: dict[str, Any] = {
        "since": iso(report.since),
        "until": iso(report.until),
        "groupBy": list(report.group_by),
        "currency": report.currency,
        "rows": [{"group": dict(zip(report.group_by, row.group, strict=True)), **_figures(row, priced)}
                 for row in report.rows],
        "total": _figures(report.total, priced),
    }
    return json.dumps(doc, indent=2) + "\n"


def usage_csv(report: UsageReport) -> str:
    priced = report.currency is not None
    names = [name for name, camel in _FIGURES if priced or camel not in ("cost", "gpuCost", "preemptedCost")]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*(key.replace("-", "_").replace(":", "_") for key in report.group_by), *names]
                    + (["currency"] if priced else []))
    for row in report.rows:
        figures = [_csv_value(getattr(row, name)) for name in names]
        writer.writerow([*("" if v is None else v for v in row.group), *figures]
                        + ([report.currency] if priced else []))
    return buffer.getvalue()


def _csv_value(value: object) -> object:
    return "" if value is None else value


def _hours(value: float) -> str:
    return f"{value:,.2f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def duration(seconds: float | None) -> str:
    """45s, 12.5m, 3.2h, 2.1d; '-' for None."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def usage_rows(report: UsageReport) -> tuple[list[str], list[list[str]]]:
    """The table's headers and cells, the total last (shared by the table and the HTML page)."""
    priced = report.currency is not None
    headers = [*report.group_by, "gpu-h", "used gpu-h", "unmeasured gpu-h", "efficiency",
               *([f"cost {report.currency}"] if priced else []), "preempted gpu-h",
               *(["preempted cost"] if priced else []), "wait p50", "wait p95", "wait p99"]

    def cells(group: Sequence[str | None], row: UsageRow) -> list[str]:
        return [*(NONE if v is None else v for v in group), _hours(row.gpu_hours), _hours(row.used_gpu_hours),
                _hours(row.unmeasured_gpu_hours), _percent(row.efficiency),
                *([_money(row.cost)] if priced else []), _hours(row.preempted_gpu_hours),
                *([_money(row.preempted_cost)] if priced else []),
                duration(row.wait_p50_s), duration(row.wait_p95_s), duration(row.wait_p99_s)]

    if report.group_by:
        body = [cells(row.group, row) for row in report.rows]
        total_group = ["TOTAL", *([""] * (len(report.group_by) - 1))]
    else:  # no groups: the total alone
        headers, body, total_group = ["", *headers], [], ["TOTAL"]
    body.append(cells(total_group, report.total))
    return headers, body


def usage_table(report: UsageReport) -> str:
    headers, body = usage_rows(report)
    lines = [f"Usage {iso(report.since)} .. {iso(report.until)}"
             + (f", cost in {report.currency}" if report.currency else ", no prices (--prices)")]
    lines += text_table(headers, body)
    lines.append("used gpu-h: allocated x mean GPU utilisation, over intervals with telemetry; unmeasured gpu-h: "
                 "intervals without it (efficiency = used / measured)")
    return "\n".join(lines) + "\n"


_IDLE_HEADERS = ["namespace", "pod", "project", "submitter", "queue", "node", "gpu model", "gpus", "bound", "ended",
                 "gpu-h", "util", "idle gpu-h"]


def idle_rows(report: IdleReport) -> tuple[list[str], list[list[str]]]:
    body = [
        [r.namespace, r.pod_name, r.project or NONE, r.submitter or NONE, r.queue, r.node, r.gpu_model or NONE,
         f"{r.gpus:g}", iso(r.bound_at), "open" if r.ended_at is None else iso(r.ended_at), _hours(r.gpu_hours),
         f"{r.gpu_util_mean:.1f}%", _hours(r.idle_gpu_hours)]
        for r in report.rows
    ]
    return list(_IDLE_HEADERS), body


def idle_table(report: IdleReport) -> str:
    headers, body = idle_rows(report)
    head = (f"Idle allocations {iso(report.since)} .. {iso(report.until)}: mean GPU utilisation under "
            f"{report.threshold:g}%, at least {report.min_hours:g} GPU-hours; worst first")
    if not body:
        return head + "\nnone\n"
    return "\n".join([head, *text_table(headers, body)]) + "\n"


_IDLE_FIELDS = ("pod_uid", "namespace", "pod_name", "project", "submitter", "queue", "node", "gpu_model", "gpus",
                "bound_at", "ended_at", "gpu_hours", "gpu_util_mean", "idle_gpu_hours")


def idle_csv(report: IdleReport) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(_IDLE_FIELDS)
    for row in report.rows:
        values = [getattr(row, name) for name in _IDLE_FIELDS]
        writer.writerow([iso(v) if name in ("bound_at", "ended_at") and v is not None else _csv_value(v)
                         for name, v in zip(_IDLE_FIELDS, values, strict=True)])
    return buffer.getvalue()


def idle_json(report: IdleReport) -> str:
    def camel(name: str) -> str:
        head, *rest = name.split("_")
        return head + "".join(part.title() for part in rest)

    rows = []
    for row in report.rows:
        item: dict[str, Any] = {camel(name): getattr(row, name) for name in _IDLE_FIELDS}
        item["boundAt"] = iso(row.bound_at)
        item["endedAt"] = None if row.ended_at is None else iso(row.ended_at)
        rows.append(item)
    doc = {"since": iso(report.since), "until": iso(report.until), "thresholdPercent": report.threshold,
           "minGpuHours": report.min_hours, "rows": rows}
    return json.dumps(doc, indent=2) + "\n"
