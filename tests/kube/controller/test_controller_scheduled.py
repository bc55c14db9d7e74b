"""PodGroup ``status.conditions`` (Scheduled) and the Scheduled Event of each bound pod."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.kube.client.port import Kind
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import clock_of, events, informing, make_controller, pod, pod_group, settle, small_cluster


def _scheduled(cluster: FakeCluster, name: str) -> dict[str, Any]:
    status = cluster.object(Kind.POD_GROUP, "ml", name)["status"]  # type: ignore[index]
    [condition] = status["conditions"]
    assert condition["type"] == "Scheduled"
    return {k: v for k, v in condition.items() if k != "type"}


@pytest.mark.asyncio
async def test_pod_group_scheduled_condition_follows_the_engine() -> None:
    cluster = FakeCluster()
    small_cluster(cluster, nodes=1, pending=0)  # one node of 8 GPUs
    cluster.put(Kind.POD_GROUP, pod_group("big", 2))
    for i in range(2):
        cluster.put(Kind.POD, pod(f"big-{i}", 8, group="big"))  # 16 GPUs: no room
    cluster.put(Kind.POD_GROUP, pod_group("short", 3))
    cluster.put(Kind.POD, pod("short-0", 1, group="short"))  # 1 of minMember 3 pods
    controller = make_controller(cluster)
    async with informing(controller):
        await controller.cycle()
        await settle()
        big = cluster.object(Kind.POD_GROUP, "ml", "big")["status"]  # type: ignore[index]
        assert _scheduled(cluster, "big") == {
            "status": "False", "reason": "Unschedulable", "message": big["lastReason"],
            "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
        assert big["lastReason"]  # the engine's pending reason
        assert _scheduled(cluster, "short") == {
            "status": "False", "reason": "Unschedulable", "message": "gang ml/short has 1 of minMember 3 pods",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
        # room on a second node, a minute later: bound, and the condition turns True at that time
        await clock_of(cluster).advance(60)
        cluster.put(Kind.NODE, {**cluster.object(Kind.NODE, "", "n0"), "metadata": {"name": "n1"}})  # type: ignore[dict-item]
        await settle()
        await controller.cycle()
        await settle()
        assert _scheduled(cluster, "big") == {"status": "True", "reason": "Scheduled", "message": "2 pods bound",
                                              "lastTransitionTime": "2026-01-01T00:01:00Z"}  # fmt: skip
        await clock_of(cluster).advance(60)
        await controller.cycle()
        await settle()
        assert _scheduled(cluster, "big")["lastTransitionTime"] == "2026-01-01T00:01:00Z"  # unchanged status


@pytest.mark.asyncio
async def test_a_scheduled_event_per_bound_pod_after_the_bindings() -> None:
    cluster = FakeCluster()
    small_cluster(cluster, nodes=2, pending=3)
    controller = make_controller(cluster)
    async with informing(controller):
        result = await controller.cycle()
        await controller.drain_events()
    assert sorted(result.bound) == ["ml/p0", "ml/p1", "ml/p2"]
    scheduled = events(cluster, "Scheduled")
    assert sorted((e["regarding"]["name"], e["note"], e["type"], e["action"]) for e in scheduled) == [
        (f"p{i}", f"Successfully assigned ml/p{i} to n0", "Normal", "Binding") for i in range(3)]
    binds = [i for i, c in enumerate(cluster.calls) if c.op == "bind"]
    posts = [i for i, c in enumerate(cluster.calls) if c.op == "create" and c.kind == Kind.EVENT]
    assert max(binds) < min(posts)  # never on the binding path: after the cycle's last binding


@pytest.mark.asyncio
async def test_scheduled_events_can_be_turned_off() -> None:
    cluster = FakeCluster()
    small_cluster(cluster, nodes=2, pending=2)
    controller = make_controller(cluster, scheduled_events=False)
    async with informing(controller):
        result = await controller.cycle()
        await controller.drain_events()
    assert len(result.bound) == 2 and events(cluster, "Scheduled") == []
