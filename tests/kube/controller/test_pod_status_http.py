"""The pods' own status over HTTP (the real lightkube adapter against the emulator): PodScheduled=False
with gpufleet's reason for pending pods, PodScheduled=True from the API server's Binding, no
Unschedulable mark on gated pods, and nominatedNodeName while a preemptor's victims terminate."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.kube.client.port import Kind
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import node, pod, queue
from .test_controller_http import controller, eventually, start, stop

pytestmark = pytest.mark.asyncio


def scheduled(store: FakeCluster, name: str) -> dict[str, Any]:
    obj = store.object(Kind.POD, "ml", name) or {}
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return dict(condition)
    return {}


def pod_status_patches(store: FakeCluster) -> int:
    return sum(1 for c in store.calls if c.op == "patch_status" and c.kind is Kind.POD)


async def test_pending_pods_say_unschedulable_and_bound_pods_scheduled() -> None:
    async with ApiServerEmulator() as emulator:
        store = emulator.store
        store.put(Kind.NODE, node("n0"))
        store.put(Kind.QUEUE, queue("team-a", 8))
        store.put(Kind.POD, pod("huge", 16))  # no node has 16 GPUs
        store.put(Kind.POD, pod("fits", 1))
        gated = pod("gated", 1)
        gated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
        gated["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]
        store.put(Kind.POD, gated)
        c = controller(emulator, "c")
        task = await start(c)
        try:
            await eventually(lambda: scheduled(store, "huge").get("reason") == "Unschedulable", what="huge marked")
            condition = scheduled(store, "huge")
            assert condition["status"] == "False"
            assert "16" in condition["message"] and condition["lastTransitionTime"]
            await eventually(lambda: scheduled(store, "fits").get("status") == "True", what="fits scheduled")
            assert (store.object(Kind.POD, "ml", "fits") or {})["spec"]["nodeName"] == "n0"
            # the gated pod keeps the API server's SchedulingGated: no autoscaler acts on it
            assert scheduled(store, "gated")["reason"] == "SchedulingGated"
            assert not (store.object(Kind.POD, "ml", "gated") or {}).get("spec", {}).get("nodeName")
            # nothing changed: later cycles write no pod status again
            written = pod_status_patches(store)
            await c.cycle()
            await c.cycle()
            assert pod_status_patches(store) == written
            # the gate removed: the pod is scheduled (a change of the gates starts a cycle)
            store.put(Kind.POD, {**gated, "spec": {k: v for k, v in gated["spec"].items() if k != "schedulingGates"}})
            await eventually(lambda: scheduled(store, "gated").get("status") == "True", what="ungated pod bound")
        finally:
            await stop(task, c)


async def test_nominated_node_while_the_victims_terminate() -> None:
    async with ApiServerEmulator(store=FakeCluster(graceful_eviction=True)) as emulator:
        store = emulator.store
        store.put(Kind.NODE, node("n0"))
        store.put(Kind.QUEUE, queue("team-a", 8))
        store.put(Kind.QUEUE, queue("team-b", 0))
        for i in range(8):
            store.put(Kind.POD, pod(f"b{i}", queue="team-b", node_name="n0", phase="Running", gpu_index=str(i),
                                    created=f"2026-01-01T00:00:0{i}Z"))
        store.put(Kind.POD, pod("a0", 2, queue="team-a"))
        c = controller(emulator, "c")
        task = await start(c)
        try:
            def nominated() -> Any:
                return ((store.object(Kind.POD, "ml", "a0") or {}).get("status") or {}).get("nominatedNodeName")

            await eventually(lambda: nominated() == "n0", what="a0 nominated to n0")
            condition = scheduled(store, "a0")
            assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
            assert "terminate" in condition["message"]
            assert not (store.object(Kind.POD, "ml", "a0") or {})["spec"].get("nodeName")
            store.finish_terminations()
            await eventually(lambda: scheduled(store, "a0").get("status") == "True", what="a0 bound")
            assert (store.object(Kind.POD, "ml", "a0") or {})["spec"]["nodeName"] == "n0"
        finally:
            await stop(task, c)
