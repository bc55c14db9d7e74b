"""What every ``gpufleet`` command shares: one way from an error to an exit status, and lazy groups.

Every command and group is a :class:`Command` or a :class:`Group` (``tests/commands`` checks the whole
tree), so every failure a user can cause ends the same way: one line on stderr and an exit status,
never a usage block or a traceback. The exceptions that end that way:

* click's usage errors (unknown option, bad value, missing argument) -> ``gpufleet <cmd>: <message>``, 2;
* :class:`CommandError`, raised by a command for its own checks -> ``gpufleet <cmd>: <message>``, its status;
* the kube layer's ``ClusterAccessError`` -> ``gpufleet <cmd>: <message>``, its ``exit_code``;
* the adapters' ``InputError`` -> its message as it is, 2 (the message starts with the file it is about,
  like a compiler's ``file:line: message``).

Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import sys
from collections.abc import Mapping
from importlib import import_module
from typing import Any

import click

__all__ = ["Command", "CommandError", "FiniteFloatRange", "Group", "LazyGroup", "cancel_on_signals"]


def cancel_on_signals() -> None:
    """SIGTERM and SIGINT cancel the running asyncio task (a long-running command's main task), so
    that it stops through its ``finally`` blocks; call it from that task."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):  # not on every platform
            loop.add_signal_handler(sig, task.cancel)


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` and ``inf`` (which FloatRange lets through, and
    which would end in a traceback far from the option)."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


class CommandError(Exception):
    """A command's own check failed; ``exit_code`` 2: the user's input is wrong, 1: something outside failed.

    The message is one line without the ``gpufleet <cmd>:`` prefix, which the command class adds.
    """

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(_one_line(message))
        self.exit_code = exit_code


def _one_line(message: str) -> str:
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def _command_name(ctx: click.Context | None, info_name: str | None = None) -> str:
    """``gpufleet`` and the sub-command words, whatever the program was called (``python -m gpufleet``, tests)."""
    words = [info_name] if info_name and ctx is not None else []
    while ctx is not None and ctx.parent is not None:
        words.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["gpufleet", *reversed(words)])


def _as_line(err: Exception, command: str) -> tuple[str, int] | None:
    """The stderr line and the exit status of a failure the user can cause; None for a bug."""
    if isinstance(err, click.ClickException):
        return f"{command}: {_one_line(err.format_message())}", err.exit_code
    if isinstance(err, CommandError):
        return f"{command}: {err}", err.exit_code
    # Looked up, not imported: importing the adapters costs a node-side command (the agent) a third of
    # its memory, and where they were never imported no InputError can have been raised.
    errors = sys.modules.get("gpufleet.adapters.errors")
    if errors is not None and isinstance(err, errors.InputError):
        return f"{command}: {err}", 2
    # Imported here, not at the top: only commands that read a cluster raise it, and the root command
    # must not pay for importing the kube layer at start-up.
    from gpufleet.kube.client.port import ClusterAccessError

    if isinstance(err, ClusterAccessError):
        return f"{command}: {err}", err.exit_code
    return None


def _exit_with(err: Exception, command: str) -> None:
    """Print ``err`` as one line and exit when the user caused it; return (so that it propagates) if not."""
    if isinstance(err, click.exceptions.NoArgsIsHelpError):
        return  # click prints the help for a bare group
    outcome = _as_line(err, command)
    if outcome is None:
        return
    line, status = outcome
    click.echo(line, err=True)
    raise click.exceptions.Exit(status) from None


class _OneLineErrors(click.Command):
    """Errors while parsing (make_context) and while running (invoke) end as one line and an exit status."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.ClickException as err:
            _exit_with(err, _command_name(parent, info_name))
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise  # an exit already decided (--help, a sub-command's error line), or Ctrl-C
        except Exception as err:
            _exit_with(err, _command_name(ctx))
            raise


class Command(_OneLineErrors):
    """A ``gpufleet`` command: ``@click.command(cls=Command)``."""


class Group(_OneLineErrors, click.Group):
    """A ``gpufleet`` group of sub-commands: ``@click.group(cls=Group)``."""


class LazyGroup(Group):
    """A group whose sub-commands are named ``"module:attribute"`` and imported only when one is used.

    ``gpufleet replay`` then does not pay for the controller's, the webhook's or the simulator's imports.
    """

    def __init__(self, *args: Any, lazy_commands: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.lazy_commands.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module_name, _, attr = target.partition(":")
        command = getattr(import_module(module_name), attr)
        assert isinstance(command, click.Command), target
        return command
