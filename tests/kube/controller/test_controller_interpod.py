"""The controller honours inter-pod rules as replay does: it reads them through the same converters."""

from __future__ import annotations

import pytest

from gpufleet.kube.client.port import Kind
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import bound_pods, make_controller, node, pod, queue, running, settle, until


@pytest.mark.asyncio
async def test_replicas_with_hostname_anti_affinity_land_on_different_nodes() -> None:
    cluster = FakeCluster()
    for i in range(2):
        cluster.put(Kind.NODE, node(f"n{i}"))
    cluster.put(Kind.QUEUE, queue("team-a", 8))
    for i in range(3):
        obj = pod(f"serve-{i}", labels={"app": "serve"})
        obj["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "serve"}}, "topologyKey": "kubernetes.io/hostname"}]}}
        cluster.put(Kind.POD, obj)
    controller = make_controller(cluster)
    async with running(controller):
        await until(lambda: len(bound_pods(cluster)) == 2, what="2 pods bound")
        await settle()
    placed = bound_pods(cluster)
    assert len(placed) == 2 and set(placed.values()) == {"n0", "n1"}  # binpack alone would stack them on n0
