"""``replay`` with consolidation (docs/semantics.md, "Consolidation"): the option read from the
SchedulerConfig, ``moves`` in the JSON only when it is on, the table's MOVED section, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import click.testing
import pytest

from gpufleet.cli import main

SCENARIOS = Path(__file__).parents[1] / "scenarios" / "consolidation"
SNAPSHOT = SCENARIOS / "move-makes-room.yaml"
CONFIG = SCENARIOS / "move-makes-room.config.yaml"


def _replay(*args: str) -> click.testing.Result:
    return click.testing.CliRunner().invoke(main, ["replay", str(SNAPSHOT), *args])


def test_moves_only_with_the_option() -> None:
    on = json.loads(_replay("--config", str(CONFIG), "--format", "json").stdout)
    off = json.loads(_replay("--format", "json").stdout)
    assert [m["pod"] for m in on["moves"]] == ["ml/a"]
    assert "moves" not in off
    assert off["bindings"] == [] and [p["pod"] for p in off["pending"]] == ["ml/w"]


def test_table_shows_the_moves() -> None:
    result = _replay("--config", str(CONFIG), "--format", "table")
    assert result.exit_code == 0
    assert "MOVED (1)" in result.stdout and "n1:0,1,2,3" in result.stdout and "n2:4,5,6,7" in result.stdout


def test_disabled_is_off(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG.read_text().replace("enabled: true", "enabled: false"))
    got = json.loads(_replay("--config", str(config), "--format", "json").stdout)
    assert "moves" not in got


def test_min_wait(tmp_path: Path) -> None:
    """w was created at 00:00:00 and now is 02:00:00: it has waited 7,200 s."""
    for wait, moved in ((7200, ["ml/a"]), (7201, [])):
        config = tmp_path / "c.yaml"
        config.write_text(CONFIG.read_text().replace("enabled: true", f"enabled: true, minWaitSeconds: {wait}"))
        got = json.loads(_replay("--config", str(config), "--format", "json").stdout)
        assert [m["pod"] for m in got["moves"]] == moved


@pytest.mark.parametrize(("field", "value"), [("maxMovesPerCycle", "-1"), ("maxMovesPerPodPerHour", "'x'"),
                                              ("enabled", "'yes'"), ("nope", "1"),
                                              ("minWaitSeconds", "-5"), ("gpusPerMove", "-1")])
def test_bad_consolidation_field_is_one_line(tmp_path: Path, field: str, value: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG.read_text().replace("enabled: true", f"enabled: true, {field}: {value}")
                      if field != "enabled" else CONFIG.read_text().replace("enabled: true", f"enabled: {value}"))
    result = _replay("--config", str(config), "--format", "json")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"spec.consolidation.{field}" in lines[0], result.stderr
