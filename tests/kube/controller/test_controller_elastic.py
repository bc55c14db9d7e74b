"""The controller carries out evictions of elastic members pod by pod (docs/semantics-notes.md,
"Elastic members are preempted first"): it evicts exactly the pods the engine lists, never their
whole gang, and the gang's other pods keep running."""

from __future__ import annotations

import pytest

from gpufleet.kube.client.port import Kind
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import bound_pods, informing, make_controller, node, pod, pod_group, queue, settle


@pytest.mark.asyncio
async def test_an_elastic_member_is_evicted_alone_and_its_gang_runs_on() -> None:
    """Gang job (minMember 4) runs 8 one-GPU pods of team-b (quota 0: all borrowed) on a full node;
    a0 of team-a needs 2 GPUs: two elastic members (the most recently started) are reclaimed, the
    six others keep running."""
    cluster = FakeCluster()
    cluster.put(Kind.NODE, node("n0"))
    cluster.put(Kind.QUEUE, queue("team-a", 8))
    cluster.put(Kind.QUEUE, queue("team-b", 0))
    cluster.put(Kind.POD_GROUP, pod_group("job", 4, queue="team-b"))
    for i in range(8):
        cluster.put(Kind.POD, pod(f"job-{i}", queue="team-b", group="job", node_name="n0", phase="Running",
                                  gpu_index=str(i), created=f"2026-01-01T00:00:0{i}Z"))
    cluster.put(Kind.POD, pod("a0", 2, queue="team-a"))
    controller = make_controller(cluster)
    async with informing(controller):
        first = await controller.cycle()
        victims = sorted(e.pod for e in first.decisions.evictions)
        assert victims == ["ml/job-6", "ml/job-7"], victims
        assert {e.reason.value for e in first.decisions.evictions} == {"reclaim"}
        assert all(r.result == "evicted" for r in first.evicted)
        await settle()
        await controller.cycle()
    assert cluster.count("evict") == 2
    left = sorted(k for k in bound_pods(cluster) if k.startswith("ml/job-"))
    assert left == [f"ml/job-{i}" for i in range(6)]
    assert bound_pods(cluster)["ml/a0"] == "n0"
