"""The controller against odd cluster state (issue 9, item 6): pods that name a PodGroup not yet
created, pods bound to a deleted Node, a Node advertising an absurd GPU count."""

from __future__ import annotations

import pytest

from gpufleet.kube.client.port import Kind
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import (
    bound_pods,
    events,
    informing,
    make_controller,
    node,
    pod,
    pod_group,
    queue,
    settle,
)


@pytest.mark.asyncio
async def test_a_job_applied_before_its_pod_group_waits_then_binds_whole() -> None:
    """4 pods of a Job name PodGroup train before it exists: none is bound (was: bound one by one
    as singletons), each gets a FailedScheduling Event naming the group; once the group appears,
    all 4 are bound in one cycle."""
    cluster = FakeCluster()
    cluster.put(Kind.NODE, node("n0"))
    cluster.put(Kind.QUEUE, queue("team-a", 8))
    for i in range(4):
        cluster.put(Kind.POD, pod(f"train-{i}", 2, group="train"))
    controller = make_controller(cluster)
    async with informing(controller):
        for _ in range(2):
            result = await controller.cycle()
            assert not result.bound and not result.decisions.bindings
            assert {p.pod: p.reason for p in result.decisions.pending} == {
                f"ml/train-{i}": "pod group ml/train does not exist" for i in range(4)
            }
            await settle()
        assert bound_pods(cluster) == {} and cluster.count("bind") == 0
        for i in range(4):
            notes = [e["note"] for e in events(cluster, "FailedScheduling", f"train-{i}")]
            assert notes and all(n == "pod group ml/train does not exist" for n in notes)
        cluster.put(Kind.POD_GROUP, pod_group("train", 4))
        await settle()
        result = await controller.cycle()
        assert sorted(result.bound) == [f"ml/train-{i}" for i in range(4)]
    assert sorted(bound_pods(cluster)) == [f"ml/train-{i}" for i in range(4)]


@pytest.mark.asyncio
async def test_a_pod_bound_to_a_deleted_node_is_not_bound_again_and_holds_nothing() -> None:
    """ghost (team-a, 1 GPU) is still bound to n9, whose Node is gone: it is not decided again and
    its phantom placement takes nothing, so the pending pod gets n0's only GPU in the first cycle
    (was: ghost re-bound every cycle, the real pod never bound)."""
    cluster = FakeCluster()
    cluster.put(Kind.NODE, node("n0", gpus=1))
    cluster.put(Kind.QUEUE, queue("team-a", 1))
    cluster.put(Kind.POD, pod("ghost", node_name="n9", phase="Running", gpu_index="0"))
    cluster.put(Kind.POD, pod("p", created="2026-01-01T00:01:00Z"))
    controller = make_controller(cluster)
    async with informing(controller):
        result = await controller.cycle()
        assert result.bound == ("ml/p",)
        assert "pod ml/ghost is bound to node n9, which is not in the snapshot: ignored" in result.decisions.warnings
        await settle()
        again = await controller.cycle()
        assert not again.decisions.bindings and not again.decisions.pending
    assert [c.name for c in cluster.calls if c.op == "bind"] == ["p"]
    assert bound_pods(cluster) == {"ml/ghost": "n9", "ml/p": "n0"}
    usage = (cluster.object(Kind.QUEUE, "", "team-a") or {}).get("status", {}).get("usage", {})
    assert usage.get("nvidia.com/gpu") == "1"  # p only: ghost holds nothing


@pytest.mark.asyncio
async def test_a_node_with_an_absurd_gpu_count_is_left_out_with_an_event() -> None:
    cluster = FakeCluster()
    huge = node("huge")
    huge["metadata"]["uid"] = "uid-huge"
    huge["status"]["allocatable"]["nvidia.com/gpu"] = "100000000"
    cluster.put(Kind.NODE, huge)
    cluster.put(Kind.NODE, node("n0", gpus=2))
    cluster.put(Kind.QUEUE, queue("team-a", 8))
    for i in range(3):
        cluster.put(Kind.POD, pod(f"p{i}", created=f"2026-01-01T00:00:0{i}Z"))
    controller = make_controller(cluster)
    async with informing(controller):
        result = await controller.cycle()
    assert sorted(result.bound) == ["ml/p0", "ml/p1"]
    assert [p.pod for p in result.decisions.pending] == ["ml/p2"]
    text = "node huge advertises 100000000 GPUs, more than 1024 per node: left out"
    assert text in result.decisions.warnings
    (event,) = events(cluster, "InvalidGpuCount")
    assert event["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": "huge", "uid": "uid-huge"}
    assert event["note"] == text and event["type"] == "Warning"
    assert event["metadata"]["namespace"] == "default"
