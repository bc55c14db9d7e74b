"""``gpufleet policy``: tenancy policy, offline."""

from __future__ import annotations

import click

from gpufleet.commands import subcommands
from gpufleet.commands.base import LazyGroup

__all__ = ["policy"]


@click.group(cls=LazyGroup, lazy_commands=subcommands("policy"))
def policy() -> None:
    """Tenancy policy (Projects, RBAC-gated queues) evaluated offline against a snapshot."""
