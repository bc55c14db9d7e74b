"""``gpufleet simulate``: run workload traces through the engine in virtual time."""

from __future__ import annotations

import click

from gpufleet.commands import subcommands
from gpufleet.commands.base import LazyGroup

__all__ = ["simulate"]


@click.group(cls=LazyGroup, lazy_commands=subcommands("simulate"))
def simulate() -> None:
    """Simulate a cluster over a workload trace with the same engine the scheduler uses."""
