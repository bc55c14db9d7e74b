"""`gpufleet snapshot` over an in-memory cluster: stripped objects that replay as expected."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gpufleet.adapters.k8s_yaml import load_snapshot_text
from gpufleet.adapters.output import decisions_to_dict
from gpufleet.cli import main
from gpufleet.commands import cluster_tools
from gpufleet.engine import schedule
from gpufleet.kube.client.port import ClusterAccessError, Kind
from gpufleet.kube.inspect.snapshot import ClusterSnapshot, read_cluster, strip_object, wanted_pod
from gpufleet.testing.fake_cluster import FakeClient, FakeCluster

from .cluster_objects import client, cluster_objects, fake_cluster, pod, snapshot_yaml

EXPECTED_DECISIONS = {
    "bindings": [
        {"pod": "team-a/a-nb", "node": "n3", "gpus": [0], "gpuBlocks": 25},
        {"pod": "team-a/a-train", "node": "n2", "gpus": [0, 1, 2, 3, 4, 5, 6, 7]},
    ],
    "evictions": [{"pod": "team-b/b-run-1", "reason": "reclaim", "by": "team-a/a-train"}],
}


def read(api: FakeClient) -> ClusterSnapshot:
    return asyncio.run(read_cluster(api))


def _walk_keys(value: object) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _walk_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _walk_keys(v)}
    return set()


def test_snapshot_replays_to_the_expected_decisions() -> None:
    text = snapshot_yaml(client())
    decisions = decisions_to_dict(schedule(load_snapshot_text(text, "snap")))
    assert decisions["bindings"] == EXPECTED_DECISIONS["bindings"]
    assert decisions["evictions"] == EXPECTED_DECISIONS["evictions"]
    assert [p["pod"] for p in decisions["pending"]] == ["team-a/a-huge"]
    assert "gang needs 16" in decisions["pending"][0]["reason"]


def test_snapshot_keeps_what_scheduling_needs_and_drops_the_rest() -> None:
    snap = read(client())
    pods = {f"{d['metadata']['namespace']}/{d['metadata']['name']}" for d in snap.documents if d["kind"] == "Pod"}
    # ours pending, and everything bound and not finished (another scheduler's too)
    assert pods == {"team-a/a-train", "team-a/a-huge", "team-a/a-nb", "team-b/b-run-0", "team-b/b-run-1",
                    "kube-system/dns"}
    keys = _walk_keys(list(snap.documents))
    for noise in ("managedFields", "resourceVersion", "uid", "conditions", "images", "daemonEndpoints", "qosClass",
                  "kubectl.kubernetes.io/last-applied-configuration", "node.alpha.kubernetes.io/ttl", "env",
                  "image", "usage", "preemptionPolicy", "podCIDR"):
        assert noise not in keys, noise
    b_run_1 = next(d for d in snap.documents if d["metadata"].get("name") == "b-run-1")
    assert b_run_1["metadata"]["annotations"] == {"gpufleet.dev/gpu-index": "0,1,2,3"}
    assert b_run_1["status"] == {"phase": "Running", "startTime": "2025-01-01T01:00:00Z"}
    assert [d["kind"] for d in snap.documents][:1] == ["SchedulerConfig"]


def test_snapshot_is_deterministic_whatever_order_the_api_lists_in() -> None:
    objects = cluster_objects()
    shuffled = {kind: random.Random(7).sample(items, len(items)) for kind, items in objects.items()}
    assert snapshot_yaml(client(objects)) == snapshot_yaml(client(shuffled))


def test_missing_crds_are_a_warning_not_a_failure() -> None:
    objects = {Kind.NODE: cluster_objects()[Kind.NODE],
               Kind.POD: [pod("kube-system", "dns", node_name="n2", phase="Running", scheduler="x")]}
    missing = (Kind.QUEUE, Kind.POD_GROUP, Kind.SCHEDULER_CONFIG)
    snap = read(client(objects, not_served=missing))
    assert len(snap.warnings) == 3
    assert all("are gpufleet's CRDs installed?" in w for w in snap.warnings)
    assert len(load_snapshot_text(snap.to_yaml(), "snap").nodes) == 3


def test_an_unserved_core_kind_is_an_error() -> None:
    with pytest.raises(ClusterAccessError, match="does not serve v1 Node"):
        read(client(not_served=(Kind.NODE,)))


@pytest.mark.parametrize(("phase", "node", "scheduler", "wanted"), [
    ("Pending", None, "gpufleet", True),
    ("Pending", None, "default-scheduler", False),
    ("Running", "n1", "default-scheduler", True),
    ("Pending", "n1", "gpufleet", True),
    ("Succeeded", "n1", "gpufleet", False),
    ("Failed", None, "gpufleet", False),
])
def test_wanted_pods(phase: str, node: str | None, scheduler: str, wanted: bool) -> None:
    assert wanted_pod(pod("ns", "p", node_name=node, phase=phase, scheduler=scheduler)) is wanted


def test_stripping_keeps_node_affinity_and_inter_pod_rules() -> None:
    obj = pod("ns", "p")
    obj["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}],
        },
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
    }
    obj["spec"]["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]
    spec = strip_object(Kind.POD, obj)["spec"]
    # Node affinity (required, and preferred: scored since issue 9's soft scores), inter-pod terms
    # and spread constraints are kept.
    assert spec["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}
    assert spec["topologySpreadConstraints"] == [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]


# ------------------------------------------------------------------------------------ the CLI


@pytest.fixture()
def serving(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    cluster = fake_cluster()
    monkeypatch.setattr(cluster_tools, "api_factory", lambda kubeconfig, context: cluster.client("gpufleet"))
    return cluster


def test_cli_snapshot_then_replay(serving: FakeCluster, tmp_path: Path) -> None:
    out = tmp_path / "snap.yaml"
    result = CliRunner().invoke(main, ["snapshot", "-o", str(out)])
    assert result.exit_code == 0, result.output
    # 1 SchedulerConfig, 2 PriorityClasses, 2 Queues, 3 Nodes, 6 Pods
    assert "wrote 14 objects" in result.stderr
    assert len(list(yaml.safe_load_all(out.read_text()))) == 14
    replay = CliRunner().invoke(main, ["replay", str(out)])
    assert replay.exit_code == 0, replay.output
    decisions = json.loads(replay.stdout)
    assert decisions["bindings"] == EXPECTED_DECISIONS["bindings"]
    assert decisions["evictions"] == EXPECTED_DECISIONS["evictions"]


def test_cli_snapshot_to_stdout(serving: FakeCluster) -> None:
    result = CliRunner().invoke(main, ["snapshot"])
    assert result.exit_code == 0
    assert result.stdout == snapshot_yaml(client())


def test_cli_snapshot_warns_when_replay_would_reject_it(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = cluster_objects()
    objects[Kind.QUEUE] = []  # pods name queue team-a, which no longer exists
    monkeypatch.setattr(cluster_tools, "api_factory", lambda kubeconfig, context: client(objects))
    result = CliRunner().invoke(main, ["snapshot"])
    assert result.exit_code == 0
    assert 'warning: gpufleet replay will reject this snapshot: <stdout>: ' in result.stderr
    assert 'unknown queue "team-b"' in result.stderr


def test_cli_snapshot_of_a_broken_cluster_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = fake_cluster(server="https://10.0.0.1:6443")
    broken.fail("list", 0, times=10, kind=Kind.NODE, message="")  # no answer from the API server
    monkeypatch.setattr(cluster_tools, "api_factory", lambda kubeconfig, context: broken.client())
    result = CliRunner().invoke(main, ["snapshot"])
    assert result.exit_code == 1
    assert result.stderr == ("gpufleet snapshot: https://10.0.0.1:6443: listing Node objects: "
                             "cannot reach the API server\n")


def test_cli_snapshot_unwritable_output(serving: FakeCluster, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["snapshot", "-o", str(tmp_path / "missing-dir" / "snap.yaml")])
    assert result.exit_code == 2
    assert "cannot write" in result.stderr and "Traceback" not in result.output
