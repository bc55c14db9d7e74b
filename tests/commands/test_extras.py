"""Commands that need an extra the install lacks say which one, in one line, exit 2: here the ``reports``
extra (matplotlib), which the container image leaves out."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.commands import COMMANDS

# Each command with a --report option, and arguments that get it past click's own checks.
REPORTING = {
    "simulate fill": ["--nodes", "openb", "--pods", "openb"],
    "simulate run": ["--trace", "x.csv", "--cluster", "c.yaml"],
}


def _command(path: str) -> click.Command:
    module, _, attribute = COMMANDS[path].partition(":")
    command = getattr(importlib.import_module(module), attribute)
    assert isinstance(command, click.Command), path
    return command


def test_the_commands_with_a_report_option_are_the_ones_checked_here() -> None:
    with_report = {path for path in COMMANDS if any("--report" in p.opts for p in _command(path).params)}
    assert with_report == set(REPORTING)


@pytest.mark.parametrize("path", sorted(REPORTING))
def test_a_report_without_matplotlib_names_the_reports_extra(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    report = tmp_path / "report.html"
    result = CliRunner().invoke(main, [*path.split(), *REPORTING[path], "--report", str(report)])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2, "", f"gpufleet {path}: --report needs the reports extra: pip install 'gpufleet[reports]'\n")
    assert not report.exists()
