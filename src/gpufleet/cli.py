"""The ``gpufleet`` command: the root group; its sub-commands live in ``gpufleet.commands``."""

from __future__ import annotations

import click

from gpufleet.commands import subcommands
from gpufleet.commands.base import LazyGroup


@click.group(cls=LazyGroup, lazy_commands=subcommands(),
             context_settings={"help_option_names": ["-h", "--help"]})  # -h too, as kubectl users expect
@click.version_option(package_name="gpufleet")
def main() -> None:
    """gpufleet: a gang-aware, quota-aware GPU scheduler for shared Kubernetes clusters."""


if __name__ == "__main__":
    main()
