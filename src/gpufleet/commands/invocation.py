"""The command line a command was run with, as a report records it (with gpufleet's version)."""

from __future__ import annotations

import importlib.metadata
import shlex

import click
from click.core import ParameterSource

__all__ = ["made_by"]


def _command_line(ctx: click.Context) -> str:
    """``gpufleet <command>`` and every option given on the command line (or from the environment),
    as one could type it again (the values are those click parsed)."""
    words = ["gpufleet", *ctx.command_path.split()[1:]]
    for param in ctx.command.params:
        name = param.name or ""
        value = ctx.params.get(name)
        source = ctx.get_parameter_source(name)
        if not isinstance(param, click.Option) or source not in (ParameterSource.COMMANDLINE,
                                                                 ParameterSource.ENVIRONMENT):
            continue
        flag = max(param.opts, key=len)
        if param.is_flag:
            words.append(flag if value else next((o for o in param.secondary_opts), flag))
            continue
        for item in (value or ()) if param.multiple else (value,):
            words += [flag, str(item)]
    return " ".join(shlex.quote(w) for w in words)


def made_by() -> str:
    """``gpufleet <version>: <command line>`` of the command being run."""
    return f"gpufleet {importlib.metadata.version('gpufleet')}: {_command_line(click.get_current_context())}"
