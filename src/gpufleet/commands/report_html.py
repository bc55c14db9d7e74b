"""The HTML pages of ``gpufleet report usage|idle``: self-contained (inline CSS and SVG, nothing fetched),
figures drawn by matplotlib (the ``reports`` extra) through :mod:`gpufleet.sim.report`.

The usage page: the table, cost over time per project (GPU-hours without prices), allocated versus
used GPUs over time, and the distribution of waits (per value of the first group key). Its series
are summed in SQL per time bucket (:func:`gpufleet.ledger.reports.usage_series`,
:func:`~gpufleet.ledger.reports.wait_cdfs`).
"""

from __future__ import annotations

from gpufleet.adapters.prices import PriceList
from gpufleet.ledger import LedgerStore
from gpufleet.ledger.report_render import NONE, idle_rows, iso, usage_rows
from gpufleet.ledger.reports import IdleReport, UsageReport, UsageSeries, WaitCdf, usage_series, wait_cdfs
from gpufleet.sim.report import Report, Series, bar_chart, line_chart

__all__ = ["idle_page", "usage_page"]

MAX_LINES = 8  # projects (or groups) drawn one by one; the rest are summed as "other"


def _name(value: str | None) -> str:
    return NONE if value is None else value


def _x_axis(series: UsageSeries) -> tuple[list[float], str]:
    if series.width_s >= 86400:
        return [(s - series.starts[0]) / 86400 for s in series.starts], f"days since {iso(series.starts[0])}"
    return [(s - series.starts[0]) / 3600 for s in series.starts], f"hours since {iso(series.starts[0])}"


def _project_lines(series: UsageSeries) -> list[Series]:
    xs, _ = _x_axis(series)
    ranked = sorted(series.per_project.items(), key=lambda item: (-sum(item[1]), _name(item[0])))
    lines = [Series(_name(project), xs, list(values)) for project, values in ranked[:MAX_LINES]]
    if len(ranked) > MAX_LINES:
        rest = [sum(values[i] for _, values in ranked[MAX_LINES:]) for i in range(len(xs))]
        lines.append(Series(f"other ({len(ranked) - MAX_LINES})", xs, rest, style="--"))
    return lines


def usage_page(store: LedgerStore, result: UsageReport, *, prices: PriceList | None, now: float,
               made_by: str = "") -> str:
    """The usage report as one HTML page."""
    series = usage_series(store, since=result.since, until=result.until, now=now, prices=prices)
    first_key = result.group_by[0] if result.group_by else None
    cdfs = wait_cdfs(store, since=result.since, until=result.until, now=now, key=first_key)
    page = Report(f"GPU usage {iso(result.since)} .. {iso(result.until)}",
                  intro="From the usage ledger. Used GPU-hours: allocated GPU-hours times the mean GPU utilisation "
                        "of intervals with telemetry; unmeasured GPU-hours have none (never guessed); efficiency "
                        "is used over measured.", made_by=made_by)
    headers, rows = usage_rows(result)
    grouped = ", ".join(result.group_by) or "nothing (the total)"
    page.section(f"Usage by {grouped}").table(headers, rows)
    xs, x_label = _x_axis(series)
    money = f"cost ({result.currency}) per {_bucket(series.width_s)}" if series.priced \
        else f"GPU-hours per {_bucket(series.width_s)}"
    page.section("Cost over time per project" if series.priced else "GPU-hours over time per project",
                 "" if series.priced else "No --prices given: GPU-hours instead of cost.").figure(
        line_chart(_project_lines(series), x_label=x_label, y_label=money, step=True, y_min=0.0),
        caption=f"{money}, per project", fig_id="cost-over-time")
    page.section("Allocated versus used GPUs").figure(
        line_chart([Series("allocated", xs, list(series.allocated_gpus)),
                    Series("allocated, with telemetry", xs, list(series.measured_gpus), style="--"),
                    Series("used", xs, list(series.used_gpus))],
                   x_label=x_label, y_label=f"mean GPUs per {_bucket(series.width_s)}", step=True, y_min=0.0),
        caption="Mean GPUs allocated, allocated with telemetry, and used (allocated x utilisation)",
        fig_id="allocated-vs-used")
    page.section("Waits", "Bound minus created, of the intervals bound in the window.").figure(
        _wait_chart(cdfs, first_key), caption="Distribution of waits" + (f" per {first_key}" if first_key else ""),
        fig_id="waits")
    return page.render()


def _bucket(width_s: float) -> str:
    names = {3600: "hour", 6 * 3600: "6 hours", 86400: "day", 7 * 86400: "week", 30 * 86400: "30 days"}
    return names.get(round(width_s), f"{width_s / 3600:g} hours")


def _wait_chart(cdfs: list[WaitCdf], key: str | None) -> str:
    lines = [
        Series(f"{_name(cdf.group) if key else 'all'} ({cdf.count})", [max(w, 1.0) for _, w in cdf.points],
               [f for f, _ in cdf.points])
        for cdf in cdfs[:MAX_LINES]
    ]
    if not lines:
        lines = [Series("no waits known", [1.0], [0.0])]
    return line_chart(lines, x_label="wait (seconds, log scale; under 1 s drawn at 1 s)",
                      y_label="fraction of bindings", step=True, y_min=0.0, y_max=1.0, log_x=True)


def idle_page(result: IdleReport, *, made_by: str = "") -> str:
    """The idle report as one HTML page: the table and the idle GPU-hours of each allocation listed."""
    page = Report(f"Idle GPU allocations {iso(result.since)} .. {iso(result.until)}",
                  intro=f"Mean GPU utilisation under {result.threshold:g}%, at least {result.min_hours:g} GPU-hours "
                        "in the window; idle GPU-hours = GPU-hours x (1 - utilisation); worst first.",
                  made_by=made_by)
    headers, rows = idle_rows(result)
    section = page.section("Worst idle allocations")
    if not rows:
        section.paragraph("None.")
        return page.render()
    section.table(headers, rows)
    labels = [f"{r.namespace}/{r.pod_name}" for r in result.rows]
    section.figure(bar_chart(labels, [("idle GPU-hours", [r.idle_gpu_hours for r in result.rows])],
                             y_label="idle GPU-hours"), caption="Idle GPU-hours per allocation", fig_id="idle")
    return page.render()
