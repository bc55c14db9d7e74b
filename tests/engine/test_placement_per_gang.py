"""A PodGroup's ``spec.placement`` (docs/semantics-notes.md, "Placement per gang"): it places its own
gang's pods and nothing else, and a snapshot that says nothing decides exactly as before."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click.testing
from hypothesis import HealthCheck, given, settings

from gpufleet.adapters import load_snapshot_file, pod_group_from_dict
from gpufleet.adapters.k8s_yaml_writer import pod_group_document
from gpufleet.cli import main
from gpufleet.domain import Decisions, Placement, PodGroup, Snapshot
from gpufleet.engine import schedule

from .strategies import gang_snapshots, snapshots

PROPERTY = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SCENARIO = Path(__file__).parents[1] / "scenarios" / "placement" / "per-gang-spread.yaml"


def _with_groups(snapshot: Snapshot, placement: Placement | None, config: Placement | None = None) -> Snapshot:
    groups = tuple(dataclasses.replace(g, placement=placement) for g in snapshot.pod_groups)
    out = dataclasses.replace(snapshot, pod_groups=groups)
    if config is not None:
        out = dataclasses.replace(out, config=dataclasses.replace(snapshot.config, placement=config))
    return out


def _same(a: Decisions, b: Decisions) -> bool:
    return (a.bindings, a.evictions, a.pending) == (b.bindings, b.evictions, b.pending)


@PROPERTY
@given(snapshots())
def test_a_placement_equal_to_the_configs_changes_nothing(snapshot: Snapshot) -> None:
    explicit = _with_groups(snapshot, snapshot.config.placement)
    assert _same(schedule(explicit), schedule(snapshot))


@PROPERTY
@given(gang_snapshots())
def test_every_gang_overridden_is_the_other_config(snapshot: Snapshot) -> None:
    """Every pending pod in a PodGroup saying P, under the opposite config: the decisions of config P
    (whole and fractional pods, topology domains, victim trials: every path honours the override)."""
    groups = {g.key for g in snapshot.pod_groups}
    if any(p.ours and p.node_name is None and f"{p.namespace}/{p.group_label}" not in groups
           for p in snapshot.pods):
        return  # a lone pending pod keeps the config's: not this property
    for want in (Placement.BINPACK, Placement.SPREAD):
        other = Placement.SPREAD if want is Placement.BINPACK else Placement.BINPACK
        overridden = _with_groups(snapshot, want, config=other)
        plain = _with_groups(snapshot, None, config=want)
        assert _same(schedule(overridden), schedule(plain))


def _pick(snapshot: Snapshot, name: str, placement: Placement | None) -> Snapshot:
    groups = tuple(dataclasses.replace(g, placement=placement) if g.name == name else g for g in snapshot.pod_groups)
    return dataclasses.replace(snapshot, pod_groups=groups)


def test_the_override_places_only_its_own_gang() -> None:
    base = _pick(load_snapshot_file(str(SCENARIO)), "gs", None)
    base = _pick(base, "gf", None)
    plain = {b.pod: (b.node, b.gpus) for b in schedule(base).bindings}
    # Binpack for all: b on n3, then s on n3 (1 free left: the fewest), f on n1.
    assert plain["ml/b"] == ("n3", (0,)) and plain["ml/s"] == ("n3", (1,))
    spread_s = {b.pod: (b.node, b.gpus) for b in schedule(_pick(base, "gs", Placement.SPREAD)).bindings}
    assert spread_s["ml/s"] == ("n1", (0,))  # its own gang: the most free
    assert spread_s["ml/b"] == plain["ml/b"]  # placed before it, by binpack as before
    # f (binpack) now binpacks around s: n3 GPU 1, the fewest free GPUs, where s no longer is.
    assert spread_s["ml/f"][0] == "n3"


def test_replay_refuses_a_bad_placement_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(SCENARIO.read_text().replace("placement: spread", "placement: tightest", 1))
    result = click.testing.CliRunner().invoke(main, ["replay", str(bad), "--format", "json"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "PodGroup ml/gs" in lines[0] and "spec.placement" in lines[0]
    assert "Traceback" not in result.output


def test_a_pod_group_keeps_its_placement_through_the_writer() -> None:
    group = PodGroup("ml", "g", placement=Placement.SPREAD)
    assert pod_group_from_dict(pod_group_document(group)) == group
    assert "placement" not in pod_group_document(PodGroup("ml", "h"))["spec"]
