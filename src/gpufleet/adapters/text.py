"""Plain text for terminals: the one table layout and the one progress bar of every command and report.

They live here, below the commands and the simulators, so that ``replay``'s decisions table, the
``simulate`` summaries and anything later print tables the same way and show progress the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click

__all__ = ["ProgressBar", "progress_bar", "step_done", "text_table"]


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, numbers_right: bool = False) -> list[str]:
    """Columns two spaces apart, upper-case headers, no trailing blanks; one string per line.

    ``numbers_right`` right-aligns every column after the first (which names the row), so that figures
    line up by their last digit; otherwise every column is left-aligned.
    """
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.rjust(width) if numbers_right and i else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line([h.upper() for h in headers]), *(line(r) for r in rows)]


class ProgressBar:
    """Moves a click progress bar forward either by steps or to a count of work done."""

    def __init__(self, bar: Any) -> None:
        self._bar = bar
        self.done = 0

    def advance(self, steps: int = 1) -> None:
        """``steps`` more units are done (the fill experiment calls this once per task)."""
        self.done += steps
        self._bar.update(steps)

    def reach(self, done: int) -> None:
        """``done`` units are done in all (the timeline reports its count of finished jobs)."""
        if done > self.done:
            self.advance(done - self.done)


def step_done(line: str) -> None:
    """Say on stderr that a step of a long run (a seed, a variant) is done, when stderr is not a
    terminal (a CI log, a file): there no progress bar shows that the run is alive."""
    if not sys.stderr.isatty():
        click.echo(line, err=True)


@contextmanager
def progress_bar(total: int, label: str, *, show_pos: bool = False) -> Iterator[ProgressBar | None]:
    """A progress bar on stderr when it is a terminal, else None (so a caller can skip reporting at all).

    The bar is filled when the block ends without an error (a total that was an estimate then still ends
    at 100 %). ``show_pos`` adds "done/total", for exact totals only.
    """
    if not sys.stderr.isatty():
        yield None
        return
    with click.progressbar(length=total, label=label, file=sys.stderr, show_pos=show_pos) as bar:
        progress = ProgressBar(bar)
        yield progress
        progress.reach(total)
