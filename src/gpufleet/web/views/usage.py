"""The Usage and cost page: the usage ledger's own report (:func:`gpufleet.ledger.reports.usage_report`)
per project, queue, user or cost centre (``label:KEY``) over a chosen period, allocated versus used
GPU-hours, and the same rows as CSV (:func:`gpufleet.ledger.report_render.usage_csv`).

A caller who may not see everything gets rows split by project and queue too (whatever else it
groups by), only those of its projects and queues, and a total of those rows alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpufleet.adapters.errors import InputError
from gpufleet.adapters.prices import PriceList
from gpufleet.adapters.times import parse_when
from gpufleet.web.access import Visibility

__all__ = ["DAY", "GROUPINGS", "UsageQuery", "UsageView", "usage_csv_text", "usage_view"]

DAY = 86400.0
GROUPINGS = ("project", "queue", "user", "namespace", "gpu-model", "label:cost-center")


@dataclass(frozen=True, slots=True)
class UsageQuery:
    since: float
    until: float
    group_by: tuple[str, ...]

    @classmethod
    def of(cls, params: Mapping[str, str], now: float) -> UsageQuery:
        """From the page's form: ``since``/``until`` (dates or ISO times; default the last 30 days),
        ``group`` (comma-separated keys of ``gpufleet report usage --group-by``). InputError for bad ones."""
        from gpufleet.ledger.reports import parse_group_by

        since = parse_when(params["since"], "since") if params.get("since") else now - 30 * DAY
        until = parse_when(params["until"], "until") if params.get("until") else now
        if until <= since:
            raise InputError("until: not after since")
        return cls(since, until, parse_group_by(params.get("group", "project"), "group"))


@dataclass(frozen=True, slots=True)
class UsageView:
    query: UsageQuery
    report: Any  # gpufleet.ledger.reports.UsageReport, filtered
    headers: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]  # the rows, the total last (the CLI table's own cells)
    bars: tuple[tuple[str, float, float], ...]  # (group, allocated GPU-h, used GPU-h) per row
    scale: float  # the largest allocated GPU-h (the bars' full width)


def _restricted(report: Any, keys: tuple[str, ...], vis: Visibility) -> Any:
    """``report`` with the rows ``vis`` may not see dropped, and a total of the rest."""
    from gpufleet.ledger.reports import UsageRow

    p, q = keys.index("project"), keys.index("queue")
    rows = tuple(r for r in report.rows if vis.sees(r.group[p], r.group[q]))
    total = UsageRow(
        group=(), intervals=sum(r.intervals for r in rows), gpu_hours=sum(r.gpu_hours for r in rows),
        measured_gpu_hours=sum(r.measured_gpu_hours for r in rows), used_gpu_hours=sum(r.used_gpu_hours for r in rows),
        preempted_gpu_hours=sum(r.preempted_gpu_hours for r in rows),
        cost=None if report.currency is None else sum(r.cost or 0.0 for r in rows),
        gpu_cost=None if report.currency is None else sum(r.gpu_cost or 0.0 for r in rows),
        preempted_cost=None if report.currency is None else sum(r.preempted_cost or 0.0 for r in rows),
        waits=sum(r.waits for r in rows),
    )
    return replace(report, rows=rows, total=total)


def _report(store: Any, query: UsageQuery, vis: Visibility, prices: PriceList | None) -> Any:
    from gpufleet.ledger.reports import usage_report

    keys = query.group_by
    if not vis.all:
        keys = keys + tuple(k for k in ("project", "queue") if k not in keys)
    report = usage_report(store, since=query.since, until=query.until, now=query.until, group_by=keys, prices=prices)
    return report if vis.all else _restricted(report, keys, vis)


def usage_view(store: Any, query: UsageQuery, vis: Visibility, prices: PriceList | None = None) -> UsageView:
    from gpufleet.ledger.report_render import usage_rows

    report = _report(store, query, vis, prices)
    headers, body = usage_rows(report)
    bars = tuple((" / ".join(v or "-" for v in r.group) or "total", r.gpu_hours, r.used_gpu_hours)
                 for r in report.rows)
    scale = max((b[1] for b in bars), default=0.0)
    return UsageView(query, report, tuple(headers), tuple(tuple(c) for c in body), bars, scale)


def usage_csv_text(store: Any, query: UsageQuery, vis: Visibility, prices: PriceList | None = None) -> str:
    from gpufleet.ledger.report_render import usage_csv

    return usage_csv(_report(store, query, vis, prices))
