"""`gpufleet explain`: the engine's decisions about one pod, in words."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.commands import cluster_tools
from gpufleet.kube.client.port import ClusterAccessError, Kind
from gpufleet.kube.inspect.explain import Explanation, explain_in_cluster
from gpufleet.testing.fake_cluster import FakeClient, FakeCluster

from .cluster_objects import client, cluster_objects, fake_cluster, pod


def explain_with(api: FakeClient, namespace: str, name: str) -> Explanation:
    return asyncio.run(explain_in_cluster(api, namespace, name))


def explain(namespace: str, name: str, api: FakeClient | None = None) -> str:
    return "\n".join(explain_with(api or client(), namespace, name).lines)


def test_pending_pod_that_binds_by_evicting() -> None:
    text = explain("team-a", "a-train")
    assert text == (
        "team-a/a-train is pending; it asks for 8 whole GPUs.\n"
        "gpufleet would bind it to node n2 (GPUs 0,1,2,3,4,5,6,7).\n"
        "To make room it would evict:\n"
        "  - team-b/b-run-1 (reclaim: its queue uses more than its quota, and the queue of team-a/a-train "
        "is within its own)"
    )


def test_fractional_pod_binds_to_a_share_of_a_gpu() -> None:
    assert explain("team-a", "a-nb") == (
        "team-a/a-nb is pending; it asks for 20 GiB of one GPU's memory.\n"
        "gpufleet would bind it to node n3 (25/100 of GPU 0)."
    )


def test_pending_pod_gets_the_engines_reason() -> None:
    lines = explain("team-a", "a-huge").splitlines()
    assert lines[0] == "team-a/a-huge is pending; it asks for 16 whole GPUs."
    assert lines[1].startswith("It would stay pending: non-preemptible work must fit in quota")
    assert "gang needs 16" in lines[1]


def test_running_pod_that_would_be_evicted() -> None:
    assert explain("team-b", "b-run-1") == (
        "team-b/b-run-1 runs on node n2 (GPUs 0,1,2,3), scheduled by gpufleet.\n"
        "gpufleet would evict it to make room for team-a/a-train: reclaim: its queue uses more than its quota, "
        "and the queue of team-a/a-train is within its own."
    )


def test_running_pod_that_stays() -> None:
    assert explain("team-b", "b-run-0").endswith("It would keep running: nothing in the current state preempts it.")
    assert "scheduled by another scheduler (default-scheduler)" in explain("kube-system", "dns")


def test_pods_outside_the_snapshot() -> None:
    assert explain("ml", "done") == (
        "ml/done has finished (phase Succeeded): it holds nothing and the scheduler ignores it."
    )
    assert explain("default", "web").startswith("default/web is pending for another scheduler (schedulerName: "
                                                "default-scheduler)")


def test_gang_member_is_told_what_its_gang_evicts() -> None:
    objects = cluster_objects()
    objects[Kind.POD] = [p for p in objects[Kind.POD] if p["metadata"]["name"] != "a-train"]
    for index in range(2):
        member = pod("team-a", f"a-g-{index}", gpus=4, queue="team-a", priority_class="train")
        member["metadata"]["labels"]["gpufleet.dev/pod-group"] = "pair"
        objects[Kind.POD].append(member)
    objects[Kind.POD_GROUP] = [{"apiVersion": "gpufleet.dev/v1alpha1", "kind": "PodGroup",
                                      "metadata": {"name": "pair", "namespace": "team-a"},
                                      "spec": {"minMember": 2}}]
    lines = explain("team-a", "a-g-1", client(objects)).splitlines()
    assert lines[0] == "team-a/a-g-1 is pending; it asks for 4 whole GPUs, in gang team-a/pair."
    assert lines[1].startswith("gpufleet would bind it to node n2 (GPUs ")
    assert lines[2] == "To make room its gang would evict:"
    assert lines[3].startswith("  - team-b/b-run-1 (reclaim: ")


def test_missing_pod_is_an_input_error() -> None:
    with pytest.raises(ClusterAccessError) as caught:
        explain_with(client(), "team-a", "ghost")
    assert caught.value.exit_code == 2
    assert str(caught.value) == "pod team-a/ghost not found"


def test_a_cluster_the_loader_rejects_is_a_cluster_error() -> None:
    objects = cluster_objects()
    objects[Kind.QUEUE] = []
    with pytest.raises(ClusterAccessError) as caught:
        explain_with(client(objects), "team-a", "a-train")
    assert caught.value.exit_code == 1
    assert "the cluster holds an object gpufleet cannot read: cluster snapshot: document" in str(caught.value)


# ------------------------------------------------------------------------------------ the CLI


@pytest.fixture()
def serving(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    cluster = fake_cluster()
    monkeypatch.setattr(cluster_tools, "api_factory", lambda kubeconfig, context: cluster.client("gpufleet"))
    return cluster


@pytest.mark.parametrize("args", [["team-a/a-train"], ["a-train"], ["-n", "team-a", "a-train"]])
def test_cli_explain(serving: FakeCluster, args: list[str]) -> None:
    result = CliRunner().invoke(main, ["explain", *args])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1] == "gpufleet would bind it to node n2 (GPUs 0,1,2,3,4,5,6,7)."
    assert any((c.op, c.kind, c.namespace, c.name) == ("get", Kind.POD, "team-a", "a-train") for c in serving.calls)


@pytest.mark.parametrize(("args", "message"), [
    (["team-a/ghost"], "gpufleet explain: pod team-a/ghost not found\n"),
    (["-n", "team-b", "team-a/a-train"], "gpufleet explain: the pod names namespace 'team-a' but -n says 'team-b'\n"),
    (["/a-train"], "gpufleet explain: POD must be NAME or NAMESPACE/NAME\n"),
])
def test_cli_explain_bad_input_exits_2(serving: FakeCluster, args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["explain", *args])
    assert result.exit_code == 2
    assert result.stderr == message


def test_a_label_naming_a_missing_pod_group_waits_for_it() -> None:
    """As in the engine (api.md): the pods form the gang their label names and stay pending until
    the PodGroup exists. (Was: each a gang of its own, bound at once.)"""
    objects = cluster_objects()
    objects[Kind.POD] = [p for p in objects[Kind.POD] if p["metadata"]["name"] != "a-train"]
    for index in range(2):
        member = pod("team-a", f"a-g-{index}", gpus=4, queue="team-a", priority_class="train")
        member["metadata"]["labels"]["gpufleet.dev/pod-group"] = "missing"
        objects[Kind.POD].append(member)
    lines = explain("team-a", "a-g-1", client(objects)).splitlines()
    assert lines == ["team-a/a-g-1 is pending; it asks for 4 whole GPUs, in gang team-a/missing.",
                     "It would stay pending: pod group team-a/missing does not exist."]


# ------------------------------------------------------------------- -o json|yaml (gpufleet.dev/explain/v1)

A_TRAIN_REPORT = {
    "schema": "gpufleet.dev/explain/v1",
    "pod": {"namespace": "team-a", "name": "a-train", "phase": "Pending"},
    "state": "pending",
    "gang": None,
    "owner": None,
    "node": None,
    "decision": "bind",
    "binding": {"node": "n2", "gpus": [0, 1, 2, 3, 4, 5, 6, 7], "gpuBlocks": None},
    "pendingReason": None,
    "evictedBy": None,
    "evicts": [{"pod": "team-b/b-run-1", "reason": "reclaim"}],
    # team-a's pending gangs in admission order (priority, creation, name): a-huge, a-train, a-nb
    "queuePosition": {"queue": "team-a", "rank": 2, "count": 3},
    "message": [
        "team-a/a-train is pending; it asks for 8 whole GPUs.",
        "gpufleet would bind it to node n2 (GPUs 0,1,2,3,4,5,6,7).",
        "To make room it would evict:",
        "  - team-b/b-run-1 (reclaim: its queue uses more than its quota, and the queue of team-a/a-train "
        "is within its own)",
    ],
    "reservation": None,
    "warnings": [],
}


def test_cli_explain_json(serving: FakeCluster) -> None:
    result = CliRunner().invoke(main, ["explain", "team-a/a-train", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == A_TRAIN_REPORT
    assert list(json.loads(result.stdout)) == list(A_TRAIN_REPORT)  # the documented field order


def test_cli_explain_yaml(serving: FakeCluster) -> None:
    result = CliRunner().invoke(main, ["explain", "team-a/a-nb", "--output", "yaml"])
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "schema: gpufleet.dev/explain/v1\n"
        "pod:\n  namespace: team-a\n  name: a-nb\n  phase: Pending\n"
        "state: pending\ngang: null\nowner: null\nnode: null\ndecision: bind\n"
        "binding:\n  node: n3\n  gpus:\n  - 0\n  gpuBlocks: 25\n"
        "pendingReason: null\nevictedBy: null\nevicts: []\n"
        "queuePosition:\n  queue: team-a\n  rank: 3\n  count: 3\n"
        "message:\n- team-a/a-nb is pending; it asks for 20 GiB of one GPU's memory.\n"
        "- gpufleet would bind it to node n3 (25/100 of GPU 0).\n"
        "reservation: null\n"
        "warnings: []\n"
    )


def test_report_of_a_running_pod_evicted_and_of_a_gang_member() -> None:
    report = explain_with(client(), "team-b", "b-run-1").report
    assert {k: report[k] for k in ("state", "node", "decision", "evictedBy", "queuePosition")} == {
        "state": "running", "node": "n2", "decision": "evict",
        "evictedBy": {"pod": "team-a/a-train", "reason": "reclaim"}, "queuePosition": None}  # fmt: skip
    objects = cluster_objects()
    for index in range(2):
        member = pod("team-a", f"a-g-{index}", gpus=4, queue="team-a", priority_class="train",
                     created="2024-12-31T00:00:00Z")
        member["metadata"]["labels"]["gpufleet.dev/pod-group"] = "pair"
        objects[Kind.POD].append(member)
    objects[Kind.POD_GROUP] = [{"apiVersion": "gpufleet.dev/v1alpha1", "kind": "PodGroup",
                                "metadata": {"name": "pair", "namespace": "team-a"}, "spec": {"minMember": 2}}]
    report = explain_with(client(objects), "team-a", "a-g-1").report
    assert report["gang"] == "team-a/pair"
    assert report["queuePosition"] == {"queue": "team-a", "rank": 1, "count": 4}  # older than a-huge: first
    assert explain_with(client(objects), "ml", "done").report["state"] == "finished"
    assert explain_with(client(objects), "default", "web").report["state"] == "foreign"


@pytest.mark.parametrize(("policy", "drained"), [("evict", True), ("keep", False)])
def test_a_running_pod_on_a_failed_gpu(policy: str, drained: bool) -> None:
    objects = cluster_objects()
    objects[Kind.NODE][0]["metadata"].setdefault("annotations", {})["gpufleet.dev/unhealthy-gpus"] = "2"
    objects[Kind.SCHEDULER_CONFIG] = [{"metadata": {"name": "default"}, "spec": {"onGPUFailure": policy}}]
    lines = explain("team-b", "b-run-1", client(objects)).splitlines()
    assert lines[1].startswith("GPU 2 of node n2 listed unhealthy (gpufleet.dev/unhealthy-gpus): ")
    assert any(line.startswith("Its gang is drained (gpu-failure)") for line in lines) is drained


def test_a_running_pod_on_a_node_with_a_spot_notice() -> None:
    objects = cluster_objects()
    objects[Kind.NODE][0]["spec"]["taints"] = [{"key": "cloud.google.com/impending-node-termination",
                                                "effect": "NoSchedule"}]
    objects[Kind.NODE][0]["metadata"]["labels"]["cloud.google.com/gke-spot"] = "true"
    text = explain("team-b", "b-run-1", client(objects))
    assert "Its gang is drained (spot): node n2 drains: spot interruption notice" in text
    assert "It would keep running" not in text
