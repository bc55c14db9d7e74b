"""``gpufleet bench``: time the engine on a synthetic cluster shape (mirrors Kubernetes' scheduler_perf)."""

from __future__ import annotations

import json

import click

from gpufleet.adapters.text import text_table
from gpufleet.bench.shapes import SHAPES
from gpufleet.commands.base import Command, FiniteFloatRange

__all__ = ["bench"]


@click.command(cls=Command)
@click.option("--shape", type=click.Choice(SHAPES), required=True)
@click.option("--scale", type=FiniteFloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Shrink the shape (tests).")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs; the median is reported.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--replay-cost", is_flag=True,
              help="Instead: compare the full replay of the shape written as YAML with bare YAML parsing.")
@click.option("--kept", is_flag=True,
              help="Time a warm IncrementalEngine (state kept between calls, as the controller runs it) "
                   "after one untimed call on the same snapshot, instead of a fresh schedule().")
@click.option("--reservation", "reservation", type=FiniteFloatRange(min=0), default=None,
              help="Decide with reservation and backfill on: after this many seconds, the snapshot's time that "
                   "long past its last pod's creation (every pending gang may reserve).")
def bench(shape: str, scale: float, repeat: int, fmt: str, replay_cost: bool, kept: bool,
          reservation: float | None) -> None:
    """Time the engine on a synthetic cluster shape (mirrors Kubernetes' scheduler_perf)."""
    from gpufleet.bench.runner import replay_vs_parse, run_bench

    if replay_cost:
        result = replay_vs_parse(scale=scale, repeat=repeat)
    else:
        result = run_bench(shape, scale=scale, repeat=repeat, kept=kept, reservation=reservation)
    if fmt == "json":
        click.echo(json.dumps(result))
        return
    for line in text_table(["measure", "value"], [[key, _cell(value)] for key, value in result.items()],
                           numbers_right=True):
        click.echo(line)


def _cell(value: object) -> str:
    """A figure as a person reads it: counts as integers with thousands separators, times and
    ratios to three decimals."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3f}"
