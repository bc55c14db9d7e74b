"""Parsing of --failures and --compare."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.adapters.errors import InputError
from gpufleet.domain import Placement
from gpufleet.sim.compare import RunSettings, apply_variant, parse_compare
from gpufleet.sim.failures import OutageKind, parse_duration, parse_failures


def test_durations() -> None:
    assert parse_duration("90", "x") == 90 and parse_duration("15m", "x") == 900
    assert parse_duration("4h", "x") == 14400 and parse_duration("1.5d", "x") == 129600
    for bad in ("", "abc", "-5", "nan", "5w"):
        with pytest.raises(InputError, match="x:"):
            parse_duration(bad, "x")


def test_failure_settings_and_outage_file(tmp_path: Path) -> None:
    path = tmp_path / "out.yaml"
    path.write_text("outages:\n- {node: n1, at: 2h, for: 30m}\n- {node: n0, at: 60, for: 10, kind: spot}\n")
    model = parse_failures(["mtbf=30d,repair=4h", "spot-rate=0.5,spot-down=10m", str(path)])
    assert model.mtbf_s == 30 * 86400 and model.repair_s == 4 * 3600
    assert model.spot_rate_per_hour == 0.5 and model.spot_down_s == 600
    assert [(o.node, o.at_s, o.for_s, o.kind) for o in model.outages] == [
        ("n0", 60, 10, OutageKind.SPOT), ("n1", 7200, 1800, OutageKind.FAILURE)]


@pytest.mark.parametrize(("values", "message"), [
    (["mtbf=0"], "mtbf: must be more than 0"),
    (["colour=red"], "unknown setting"),
    (["spot-rate=fast"], "spot-rate"),
    (["/no/such/file.yaml"], "cannot read"),
])
def test_bad_failures(values: list[str], message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_failures(values)


def test_bad_outage_file(tmp_path: Path) -> None:
    path = tmp_path / "out.yaml"
    path.write_text("outages:\n- {node: n1, at: 2h}\n")
    with pytest.raises(InputError, match=r"outages\.0\.for"):
        parse_failures([str(path)])


def test_compare_variants() -> None:
    variants = parse_compare(["placement=binpack,placement=spread", "checkpoint=10m,placement=spread;seed=3"])
    assert [v.label for v in variants] == ["placement=binpack", "placement=spread", "checkpoint=10m,placement=spread",
                                           "seed=3"]
    settings = apply_variant(RunSettings(), variants[2])
    assert settings.checkpoint_s == 600 and settings.placement is Placement.SPREAD


@pytest.mark.parametrize(("value", "message"), [
    ("placement=tight", "unknown placement"),
    ("colour=red", "expected key=value"),
    ("seed=-1", "integer"),
    ("placement=spread;placement=spread", "given twice"),
])
def test_bad_compare(value: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_compare([value])
