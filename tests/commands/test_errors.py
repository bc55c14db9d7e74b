"""Every command ends a failure the user caused the same way: one stderr line, an exit status, no traceback."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from gpufleet.adapters.errors import InputError
from gpufleet.cli import main
from gpufleet.commands import COMMANDS, subcommands
from gpufleet.commands.base import Command, CommandError, Group
from gpufleet.kube import ClusterAccessError

# For every sub-command: an unknown option, and a bad value or a missing argument.
BAD_ARGUMENTS = [
    (["replay", "--frob"], "gpufleet replay: No such option '--frob'"),
    (["replay", "snap.yaml", "--format", "xml"], "gpufleet replay: Invalid value for '--format'"),
    (["replay"], "gpufleet replay: Missing argument 'SNAPSHOT'"),
    (["bench", "--frob"], "gpufleet bench: No such option '--frob'"),
    (["bench", "--shape", "huge"], "gpufleet bench: Invalid value for '--shape'"),
    (["bench", "--shape", "basic", "--repeat", "0"], "gpufleet bench: Invalid value for '--repeat'"),
    (["bench", "--shape", "basic", "--scale", "0"], "gpufleet bench: Invalid value for '--scale'"),
    (["bench", "--shape", "basic", "--scale", "nan"], "gpufleet bench: Invalid value for '--scale'"),
    (["simulate", "fill", "--inflate", "nan"], "gpufleet simulate fill: Invalid value for '--inflate'"),
    (["simulate", "fill", "--inflate", "inf"], "gpufleet simulate fill: Invalid value for '--inflate'"),
    (["controller", "--min-interval", "nan"], "gpufleet controller: Invalid value for '--min-interval'"),
    (["simulate", "fill", "--frob"], "gpufleet simulate fill: No such option '--frob'"),
    (["simulate", "fill", "--jobs", "0"], "gpufleet simulate fill: Invalid value for '--jobs'"),
    (["simulate", "run", "--frob"], "gpufleet simulate run: No such option '--frob'"),
    (["simulate", "run", "--cycle-interval", "soon"], "gpufleet simulate run: Invalid value for '--cycle-interval'"),
    (["snapshot", "--frob"], "gpufleet snapshot: No such option '--frob'"),
    (["snapshot", "extra"], "gpufleet snapshot: Got unexpected extra argument (extra)"),
    (["explain", "--frob"], "gpufleet explain: No such option '--frob'"),
    (["explain"], "gpufleet explain: Missing argument 'POD'"),
    (["manifests", "--frob"], "gpufleet manifests: No such option '--frob'"),
    (["manifests", "--namespace", "Not_A_Label"], "gpufleet manifests: --namespace: must be a DNS label"),
    (["controller", "--frob"], "gpufleet controller: No such option '--frob'"),
    (["controller", "--metrics-port", "70000"], "gpufleet controller: Invalid value for '--metrics-port'"),
    (["webhook", "--frob"], "gpufleet webhook: No such option '--frob'"),
    (["webhook", "--port", "0"], "gpufleet webhook: Invalid value for '--port'"),
    (["device-plugin", "--frob"], "gpufleet device-plugin: No such option '--frob'"),
    (["device-plugin"], "gpufleet device-plugin: Missing option '--node'"),
    (["device-plugin", "--node", "n1", "--device-list-strategy", "volume-mounts"],
     "gpufleet device-plugin: Invalid value for '--device-list-strategy'"),
    (["frob"], "gpufleet: No such command 'frob'"),
    (["simulate", "frob"], "gpufleet simulate: No such command 'frob'"),
]


@pytest.mark.parametrize(("args", "start"), BAD_ARGUMENTS, ids=[" ".join(a) for a, _ in BAD_ARGUMENTS])
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], start: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # an exit, not an error escaping
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(start), lines[0]
    assert "Traceback" not in result.output and "Usage:" not in result.output


@pytest.mark.parametrize("path", ["", *sorted(COMMANDS)])
def test_every_command_and_group_is_a_gpufleet_one(path: str) -> None:
    # A plain click.Command would print click's usage block and let InputError out as a traceback.
    context = click.Context(main)
    command: click.Command = main
    for word in path.split():
        assert isinstance(command, click.Group)
        found = command.get_command(context, word)
        assert found is not None, path
        command = found
    assert isinstance(command, Command | Group), path


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    listed = result.output.split("Commands:", 1)[1]
    assert set(subcommands()) == {"replay", "bench", "simulate", "snapshot", "explain", "manifests", "controller",
                                  "webhook", "policy", "device-plugin", "report", "agent", "gpu", "admin", "dashboard"}
    for name in subcommands():
        assert f"\n  {name} " in listed, name
    simulate = CliRunner().invoke(main, ["simulate", "--help"])
    assert simulate.exit_code == 0 and "fill" in simulate.output and "run" in simulate.output


@click.group(cls=Group)
def tool() -> None:
    """A group like gpufleet's, with commands that fail in each known way."""


@tool.command(cls=Command)
@click.argument("kind")
def fail(kind: str) -> None:
    if kind == "command":
        raise CommandError("--thing: not like that\n  (see the docs)")
    if kind == "outside":
        raise CommandError("cannot serve on port 80: permission denied", exit_code=1)
    if kind == "input":
        raise InputError("snap.yaml: document 2 (Pod ml/a): spec: bad")
    if kind == "cluster":
        raise ClusterAccessError("https://10.0.0.1:6443: listing Node objects: connection refused")
    if kind == "cluster-input":
        raise ClusterAccessError("pod ml/ghost not found", exit_code=2)
    if kind == "usage":
        raise click.BadParameter("expected KEY=VALUE", param_hint="--node-selector")
    raise RuntimeError("a bug")


@pytest.mark.parametrize(
    ("kind", "code", "line"),
    [
        ("command", 2, "gpufleet fail: --thing: not like that (see the docs)"),
        ("outside", 1, "gpufleet fail: cannot serve on port 80: permission denied"),
        ("input", 2, "gpufleet fail: snap.yaml: document 2 (Pod ml/a): spec: bad"),  # one prefix on every line
        ("cluster", 1, "gpufleet fail: https://10.0.0.1:6443: listing Node objects: connection refused"),
        ("cluster-input", 2, "gpufleet fail: pod ml/ghost not found"),
        ("usage", 2, "gpufleet fail: Invalid value for --node-selector: expected KEY=VALUE"),
    ],
)
def test_known_failures_become_one_line_and_their_exit_status(kind: str, code: int, line: str) -> None:
    result = CliRunner().invoke(tool, ["fail", kind])
    assert (result.exit_code, result.stderr, result.stdout) == (code, line + "\n", "")


def test_a_bug_keeps_its_traceback() -> None:
    result = CliRunner().invoke(tool, ["fail", "bug"])
    assert isinstance(result.exception, RuntimeError)
    assert result.stderr == ""


def test_replay_starts_without_the_other_commands_imports() -> None:
    # The registry imports a command's module only when it runs: replay must not pay for kube or the simulator.
    code = ("import sys; from gpufleet.cli import main\n"
            "try:\n    main(['replay', 'examples/demo.yaml'])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "heavy = sorted(m for m in sys.modules if m.startswith(('gpufleet.kube', 'gpufleet.sim', 'gpufleet.bench',"
            " 'aiohttp', 'matplotlib')))\n"
            "print(heavy, file=sys.stderr); assert not heavy")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("args", [["-h"], ["replay", "-h"], ["simulate", "run", "-h"], ["manifests", "-h"]])
def test_dash_h_is_help_everywhere(args: list[str]) -> None:
    from click.testing import CliRunner

    from gpufleet.cli import main

    result = CliRunner().invoke(main, args, prog_name="gpufleet")
    assert result.exit_code == 0 and result.output.startswith(f"Usage: gpufleet {' '.join(args[:-1])}".rstrip()), (
        result.output)


def test_shell_completion_completes_commands() -> None:
    """The completion README documents: click's, through the lazy command registry."""
    import os

    env = {**os.environ, "COMP_WORDS": "gpufleet rep", "COMP_CWORD": "1", "_GPUFLEET_COMPLETE": "bash_complete"}
    out = subprocess.run([sys.executable, "-c", "from gpufleet.cli import main; main(prog_name='gpufleet')"],
                         env=env, capture_output=True, text=True, check=False)
    assert out.stdout.split() == ["plain,replay", "plain,report"], out
