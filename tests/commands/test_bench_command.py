"""``gpufleet bench``: a table a person reads by default, JSON on request."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gpufleet.cli import main


def test_the_default_is_a_table_with_readable_figures() -> None:
    result = CliRunner().invoke(main, ["bench", "--shape", "basic", "--scale", "0.004"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["MEASURE", "VALUE"]
    rows = dict(line.split(None, 1) for line in lines[1:])
    assert rows["shape"].strip() == "basic"
    assert rows["nodes"].strip() == "20" and rows["pods"].strip() == "40"  # counts as integers
    assert "." in rows["seconds"] and len(rows["seconds"].strip().split(".")[1]) == 3


def test_json_on_request() -> None:
    result = CliRunner().invoke(main, ["bench", "--shape", "basic", "--scale", "0.004", "--format", "json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["shape"] == "basic" and body["pods"] == 40


def test_kept_times_a_warm_incremental_engine_deciding_the_same() -> None:
    plain = json.loads(CliRunner().invoke(main, ["bench", "--shape", "preemption", "--scale", "0.01",
                                                 "--format", "json"]).output)
    result = CliRunner().invoke(main, ["bench", "--shape", "preemption", "--scale", "0.01", "--kept",
                                       "--repeat", "2", "--format", "json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["kept"] is True and "kept" not in plain
    assert body["pods"] == plain["pods"] > 0
