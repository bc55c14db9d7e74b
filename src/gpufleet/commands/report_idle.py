"""``gpufleet report idle``: the worst idle allocations in the usage ledger, with their owners."""

from __future__ import annotations

import time

import click

from gpufleet.commands.base import Command, FiniteFloatRange
from gpufleet.commands.report import (
    check_format,
    hide_password,
    ledger_for_report,
    report_options,
    window,
    write_output,
)

__all__ = ["idle"]


@click.command(cls=Command)
@report_options(since_required=False)
@click.option("--threshold", type=FiniteFloatRange(0, 100), default=5.0, show_default=True, metavar="PERCENT",
              help="An allocation is idle when its mean GPU utilisation is under this.")
@click.option("--min-hours", type=FiniteFloatRange(min=0), default=0.5, show_default=True, metavar="GPU_HOURS",
              help="Leave out allocations that held fewer GPU-hours in the window.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=20, show_default=True,
              help="How many to list, worst first.")
def idle(database: str, since: str | None, until: str | None, fmt: str, output: str | None, threshold: float,
         min_hours: float, limit: int) -> None:
    """The allocations with the most idle GPU-hours: mean GPU utilisation under --threshold, ranked by
    GPU-hours x (1 - utilisation) in the window, with their namespace, Project, submitter, queue and pod.
    Allocations without telemetry are not listed (their use is not known)."""
    from gpufleet.ledger.report_render import idle_csv, idle_json, idle_table
    from gpufleet.ledger.reports import idle_report

    start, end = window(since, until)
    check_format(fmt, "report idle")
    with ledger_for_report(database) as store:
        result = idle_report(store, since=start, until=end, now=time.time(), threshold=threshold,
                             min_hours=min_hours, limit=limit)
        shown = store.shown_url
    if fmt == "html":
        from gpufleet.commands.invocation import made_by
        from gpufleet.commands.report_html import idle_page

        text = idle_page(result, made_by=hide_password(made_by(), database, shown))
    else:
        text = {"table": idle_table, "csv": idle_csv, "json": idle_json}[fmt](result)
    write_output(text, output)
