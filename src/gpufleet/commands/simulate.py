"""``gpufleet simulate``: run workload traces through the engine in virtual time."""

from __future__ import annotations

import click


@click.group()
def simulate() -> None:
    """Simulate a cluster over a workload trace with the same engine the scheduler uses."""


# Sub-commands defined in sibling modules register themselves below, one line each.
# --- registered simulate commands (keep one per line) ---
from gpufleet.commands.simulate_run import run  # noqa: E402

simulate.add_command(run)
from gpufleet.commands.simulate_fill import fill  # noqa: E402

simulate.add_command(fill)
# --- end of registered simulate commands ---
