"""Scenario tests: one small snapshot per rule of the spec, run through the real ``gpufleet replay``.

Every ``tests/scenarios/**/NAME.yaml`` is a snapshot whose first line says what it shows;
``NAME.expected.json`` is the decision it must produce, derived by hand from
``semantics.md``/``api.md`` and ``docs/semantics-notes.md`` (see ``tests/scenarios/README.md``).
An optional ``NAME.config.yaml`` is passed as ``--config``.

Bindings and evictions are compared exactly; pending is compared by pod list, and an expected pending
entry may carry ``"reasonContains"``: a substring (case-insensitive) the reason must contain.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click.testing
import pytest
import yaml

from gpufleet.cli import main

SCENARIOS = Path(__file__).parent / "scenarios"
SNAPSHOTS = sorted(p for p in SCENARIOS.rglob("*.yaml") if not p.name.endswith(".config.yaml"))
SPEC_EXAMPLES = sorted((SCENARIOS / "spec-examples").glob("*.yaml"))
KEYS = ("bindings", "evictions", "pending")


def _id(path: Path) -> str:
    return path.relative_to(SCENARIOS).with_suffix("").as_posix()


def _companion(snapshot: Path, suffix: str) -> Path:
    return snapshot.with_name(snapshot.name.removesuffix(".yaml") + suffix)


def _replay(snapshot: Path, fmt: str = "json") -> click.testing.Result:
    args = ["replay", str(snapshot), "--format", fmt]
    config = _companion(snapshot, ".config.yaml")
    if config.exists():
        args += ["--config", str(config)]
    return click.testing.CliRunner().invoke(main, args)


def _objects(snapshot: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(snapshot.read_text()):
        if not isinstance(doc, dict):
            continue
        if doc.get("kind") == "List":
            out.extend(item for item in doc.get("items") or [] if isinstance(item, dict))
        else:
            out.append(doc)
    return out


def _pod_key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', 'default')}/{meta['name']}"


def _our_pods(snapshot: Path) -> tuple[set[str], set[str]]:
    """Pods of ours: (pending ones the replay must decide on, bound ones that hold capacity)."""
    pending: set[str] = set()
    bound: set[str] = set()
    for obj in _objects(snapshot):
        spec = obj.get("spec") or {}
        if obj.get("kind") != "Pod" or spec.get("schedulerName") != "gpufleet":
            continue
        phase = (obj.get("status") or {}).get("phase", "Pending")
        if phase in ("Succeeded", "Failed"):
            continue
        (bound if spec.get("nodeName") else pending).add(_pod_key(obj))
    return pending, bound


def test_scenarios_are_found() -> None:
    assert len(SNAPSHOTS) >= 45
    assert len(SPEC_EXAMPLES) == 3
    for expected in SCENARIOS.rglob("*.expected.json"):
        assert expected.with_name(expected.name.removesuffix(".expected.json") + ".yaml").exists(), expected
    for config in SCENARIOS.rglob("*.config.yaml"):
        assert config.with_name(config.name.removesuffix(".config.yaml") + ".yaml").exists(), config


@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=_id)
def test_scenario_is_well_formed(snapshot: Path) -> None:
    """Each scenario says what it shows on its first line and has its expected decisions."""
    assert snapshot.read_text().startswith("# "), "first line must be a '# comment' saying what it shows"
    expected = json.loads(_companion(snapshot, ".expected.json").read_text())
    assert set(expected) - {"moves", "reservations"} == set(KEYS)
    ours, bound = _our_pods(snapshot)
    decided = [e["pod"] for e in expected["bindings"]] + [e["pod"] for e in expected["pending"]]
    assert sorted(decided) == sorted(ours), "expected file must decide every pending pod exactly once"
    assert {e["pod"] for e in expected["evictions"]} <= bound


@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=_id)
def test_scenario(snapshot: Path) -> None:
    expected = json.loads(_companion(snapshot, ".expected.json").read_text())
    result = _replay(snapshot)
    assert result.exit_code == 0, f"exit {result.exit_code}\nstderr: {result.stderr}\n{result.exception!r}"
    got = json.loads(result.stdout)

    # the three keys of api.md, "moves" with consolidation on and "reservations" when one is held
    # (docs/semantics.md)
    optional = {"moves", "reservations"}
    assert set(got) == set(KEYS) | (optional & set(expected)), "the JSON holds exactly the keys expected"
    assert got.get("moves") == expected.get("moves")
    assert got.get("reservations") == expected.get("reservations")
    for k in KEYS:
        pods = [e["pod"] for e in got[k]]
        assert pods == sorted(pods), f"{k} must be sorted by pod name"

    assert got["bindings"] == expected["bindings"]
    assert got["evictions"] == expected["evictions"]
    assert [e["pod"] for e in got["pending"]] == [e["pod"] for e in expected["pending"]]
    for want, have in zip(expected["pending"], got["pending"], strict=True):
        assert isinstance(have["reason"], str) and have["reason"], f"{have['pod']}: empty pending reason"
        if "reasonContains" in want:
            assert want["reasonContains"].lower() in have["reason"].lower(), (
                f"{have['pod']}: reason {have['reason']!r} should mention {want['reasonContains']!r}"
            )

    # every pending pod of ours appears exactly once in bindings or pending, nothing else does
    decided = [e["pod"] for e in got["bindings"]] + [e["pod"] for e in got["pending"]]
    assert sorted(decided) == sorted(_our_pods(snapshot)[0])


@pytest.mark.parametrize("snapshot", SPEC_EXAMPLES, ids=_id)
def test_spec_example_table(snapshot: Path) -> None:
    """``--format table`` of each spec example exits 0 and mentions every pod it decides on."""
    expected = json.loads(_companion(snapshot, ".expected.json").read_text())
    result = _replay(snapshot, fmt="table")
    assert result.exit_code == 0, f"exit {result.exit_code}\nstderr: {result.stderr}\n{result.exception!r}"
    for k in KEYS:
        for entry in expected[k]:
            name = entry["pod"].split("/", 1)[1]
            assert name in result.stdout, f"table output does not mention {entry['pod']}"
