"""``gpufleet report``: reports over the usage ledger (``report usage``, ``report idle``), and what its
sub-commands share: the ledger's URL, the time window, the output format and file."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

from gpufleet.commands import subcommands
from gpufleet.commands.base import CommandError, LazyGroup
from gpufleet.commands.extras import require_reports_extra

__all__ = ["FORMATS", "hide_password", "ledger_for_report", "report", "report_options", "window", "write_output"]

FORMATS = ("table", "csv", "json", "html")
F = TypeVar("F", bound=Callable[..., Any])


@click.group(cls=LazyGroup, lazy_commands=subcommands("report"))
def report() -> None:
    """Reports over the usage ledger: GPU-hours, cost, waits, idle allocations."""


def report_options(*, since_required: bool) -> Callable[[F], F]:
    """The options every report takes: --database, --since, --until, --format, --output."""

    def decorate(command: F) -> F:
        for option in reversed((
            click.option("--database", required=True, metavar="URL",
                         help="The ledger: an SQLite file (a path or sqlite:///FILE) or postgresql+psycopg://..."),
            click.option("--since", required=since_required, metavar="TIME",
                         help="Start of the window (inclusive): 2026-11-01 (midnight UTC) or an ISO 8601 time."
                         + ("" if since_required else " Default: the ledger's beginning.")),
            click.option("--until", default=None, metavar="TIME",
                         help="End of the window (exclusive). Default, and at the latest: now (an open "
                              "interval counts up to it)."),
            click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
                         help="html: a self-contained page with figures (needs gpufleet[reports])."),
            click.option("--output", default=None, type=click.Path(dir_okay=False), metavar="FILE",
                         help="Write the report to FILE instead of standard output."),
        )):
            command = option(command)
        return command

    return decorate


def window(since: str | None, until: str | None) -> tuple[float | None, float | None]:
    """The window's bounds as epoch seconds; --until must be after --since (exit 2 otherwise)."""
    from gpufleet.ledger.reports import parse_when

    start = None if since is None else parse_when(since, "--since")
    end = None if until is None else parse_when(until, "--until")
    if start is not None and end is not None and end <= start:
        raise CommandError(f"--until {until} is not after --since {since}")
    return start, end


def check_format(fmt: str, what: str) -> None:
    if fmt == "html":
        require_reports_extra(f"{what} --format html")


def hide_password(line: str, database: str, shown: str) -> str:
    """``line`` with the database URL as given replaced by its form without a password."""
    return line.replace(shlex.quote(database), shlex.quote(shown))


@contextlib.contextmanager
def ledger_for_report(database: str) -> Iterator[Any]:
    """The ledger at ``database`` for reading: an SQLite file must exist (a report never makes an empty
    ledger of a mistyped name); the ledger's errors become one line (a bad URL: exit 2; a database
    that cannot be reached or read: exit 1)."""
    from gpufleet.ledger import LedgerError, database_url, open_ledger

    url = database_url(database)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:") \
            and not Path(str(url.database)).is_file():
        raise CommandError(f"--database {database!r}: no such ledger file")
    try:
        with open_ledger(database) as store:
            yield store
    except LedgerError as err:
        raise CommandError(str(err), exit_code=err.exit_code) from None


def write_output(text: str, output: str | None) -> None:
    """``text`` to FILE (``--output``) or standard output."""
    if output is None or output == "-":
        click.echo(text, nl=False)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as err:
        raise CommandError(f"--output {output!r}: cannot write: {err.strerror or err}", exit_code=1) from None
