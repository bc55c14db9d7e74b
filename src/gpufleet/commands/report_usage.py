"""``gpufleet report usage``: GPU-hours allocated and used, efficiency, cost, preemption losses and wait
percentiles per group, over the usage ledger (aggregated in SQL)."""

from __future__ import annotations

import time

import click

from gpufleet.commands.base import Command
from gpufleet.commands.report import (
    check_format,
    hide_password,
    ledger_for_report,
    report_options,
    window,
    write_output,
)

__all__ = ["usage"]


@click.command(cls=Command)
@report_options(since_required=True)
@click.option("--group-by", default="project", show_default=True, metavar="KEYS",
              help="Comma-separated: project, queue, user, namespace, gpu-model, node, priority-class, pod-group, "
                   "capacity-type, label:KEY (a cost-centre label). Empty: one total.")
@click.option("--prices", "prices_file", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="Prices YAML (per GPU model on-demand/spot/reserved, default, CPU, memory, currency): adds cost.")
def usage(database: str, since: str, until: str | None, fmt: str, output: str | None, group_by: str,
          prices_file: str | None) -> None:
    """GPU-hours allocated and used, cost, preemption losses and waits per group, over [--since, --until).

    Used GPU-hours are allocated GPU-hours times the interval's mean GPU utilisation; intervals without
    telemetry are counted as unmeasured, and efficiency is used over measured GPU-hours. Preempted:
    intervals ended by evicted-preemption or evicted-reclaim. Waits: bound minus created, of the
    intervals bound in the window (nearest-rank percentiles)."""
    from gpufleet.adapters.prices import load_prices_file
    from gpufleet.ledger.report_render import usage_csv, usage_json, usage_table
    from gpufleet.ledger.reports import parse_group_by, usage_report

    keys = parse_group_by(group_by)
    start, end = window(since, until)
    assert start is not None
    check_format(fmt, "report usage")
    prices = None if prices_file is None else load_prices_file(prices_file)
    now = time.time()
    with ledger_for_report(database) as store:
        result = usage_report(store, since=start, until=end, now=now, group_by=keys, prices=prices)
        if fmt == "html":
            from gpufleet.commands.invocation import made_by
            from gpufleet.commands.report_html import usage_page

            text = usage_page(store, result, prices=prices, now=now,
                              made_by=hide_password(made_by(), database, store.shown_url))
        else:
            text = {"table": usage_table, "csv": usage_csv, "json": usage_json}[fmt](result)
    write_output(text, output)
