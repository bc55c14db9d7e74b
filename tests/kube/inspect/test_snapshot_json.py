"""`gpufleet snapshot --format json` (or `-o snap.json`): one List that replay reads to the same
decisions as the YAML form; `gpufleet replay SNAP.json` with malformed JSON exits 2 with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpufleet.adapters._yaml_fast import fast_documents
from gpufleet.cli import main
from gpufleet.commands import cluster_tools
from gpufleet.kube.client.port import Kind
from gpufleet.testing.fake_cluster import FakeCluster

from .cluster_objects import client, cluster_objects, fake_cluster, snapshot_yaml
from .test_snapshot import EXPECTED_DECISIONS


@pytest.fixture()
def serving(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    cluster = fake_cluster()
    monkeypatch.setattr(cluster_tools, "api_factory", lambda kubeconfig, context: cluster.client("gpufleet"))
    return cluster


@pytest.mark.parametrize(("name", "flags"), [("snap.json", []), ("snap.out", ["--format", "json"])])
def test_cli_snapshot_as_json_then_replay(serving: FakeCluster, tmp_path: Path, name: str, flags: list[str]) -> None:
    out = tmp_path / name
    result = CliRunner().invoke(main, ["snapshot", "-o", str(out), *flags])
    assert result.exit_code == 0, result.output
    assert "wrote 14 objects" in result.stderr and "warning" not in result.stderr
    written = json.loads(out.read_text())
    assert (written["apiVersion"], written["kind"], len(written["items"])) == ("v1", "List", 14)
    yaml_out = tmp_path / "snap.yaml"
    assert CliRunner().invoke(main, ["snapshot", "-o", str(yaml_out)]).exit_code == 0
    replays = [CliRunner().invoke(main, ["replay", str(path)]) for path in (out, yaml_out)]
    assert [r.exit_code for r in replays] == [0, 0], [r.output for r in replays]
    assert replays[0].stdout == replays[1].stdout
    decisions = json.loads(replays[0].stdout)
    assert decisions["bindings"] == EXPECTED_DECISIONS["bindings"]
    assert decisions["evictions"] == EXPECTED_DECISIONS["evictions"]


def test_cli_snapshot_json_to_stdout_and_its_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = cluster_objects()
    objects[Kind.QUEUE] = []  # pods name queue team-a, which no longer exists
    monkeypatch.setattr(cluster_tools, "api_factory", lambda kubeconfig, context: client(objects))
    result = CliRunner().invoke(main, ["snapshot", "--format", "json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["kind"] == "List"
    assert "warning: gpufleet replay will reject this snapshot: <stdout>: " in result.stderr
    assert 'unknown queue "team-b"' in result.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"apiVersion": "v1", "kind": "List", "items": [\n  {"kind": "Node",}\n]}',
         "line 2, column 19: malformed JSON: trailing comma in object"),
        ('{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Node", '
         '"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "x"}}}]}',
         'document 1, item 1 (Node n1): status.allocatable.cpu: malformed quantity "x"'),
    ],
)
def test_replay_of_bad_json_exits_2_with_one_line(tmp_path: Path, text: str, expected: str) -> None:
    snapshot = tmp_path / "snap.json"
    snapshot.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "gpufleet", "replay", str(snapshot)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr == f"gpufleet replay: {snapshot}: {expected}\n"
    assert proc.stdout == ""


def test_the_yaml_snapshot_writes_takes_the_fast_path() -> None:
    """What `gpufleet snapshot` writes as YAML is read by yaml-rs, into what PyYAML reads."""
    text = snapshot_yaml(client())
    fast = fast_documents(text)
    assert fast is not None
    assert repr(fast) == repr(list(yaml.load_all(text, Loader=yaml.CSafeLoader)))
