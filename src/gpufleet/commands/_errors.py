"""What every sub-command shares about bad arguments."""

from __future__ import annotations

from typing import Any

import click


class OneLineErrors(click.Command):
    """Usage errors as one line on stderr and exit status 2 (click prints a usage block otherwise)."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as err:
            where = " ".join(p for p in (parent.command_path if parent else "gpufleet", info_name) if p)
            click.echo(f"{where}: {err.format_message()}", err=True)
            raise click.exceptions.Exit(2) from None
