"""Draining end to end: the controller over HTTP (the API server emulator) drains a spot node's gang whole,
its ledger intervals end ``spot-reclaim``, and the pods its owner makes again queue at the gang's original
position, land elsewhere and are drained once; failed GPUs per onGPUFailure; a tenant cannot forge its age."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from gpufleet.domain import ANNOTATION_QUEUED_AT, PodKey
from gpufleet.kube.client.lightkube_api import connect
from gpufleet.kube.client.port import Kind, RealClock
from gpufleet.kube.controller.loop import Controller, ControllerConfig
from gpufleet.kube.controller.metrics import ControllerMetrics
from gpufleet.ledger import EndReason, open_ledger
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import eventually, informing, node, pdb, pod, pod_group, queue

pytestmark = pytest.mark.asyncio

ITN = "aws-node-termination-handler/spot-itn"
SPOT = {"karpenter.sh/capacity-type": "spot"}


@pytest_asyncio.fixture
async def emulator() -> AsyncIterator[ApiServerEmulator]:
    async with ApiServerEmulator(store=FakeCluster(graceful_eviction=True)) as server:
        yield server


def controller(emulator: ApiServerEmulator, ledger: Any = None) -> Controller:
    config = ControllerConfig(identity="drain", min_interval=0.0, concurrency=16, engine_in_thread=False,
                              scheduled_events=False)
    api = connect(server=emulator.url_text, field_manager="drain", timeout=5.0)
    return Controller(api, RealClock(), config, ControllerMetrics(), ledger=ledger)


def gang(name: str, size: int, created: str, *, grace: int = 120) -> list[dict[str, Any]]:
    pods = [pod(f"{name}-{i}", group=name, created=created) for i in range(size)]
    for p in pods:
        p["spec"]["terminationGracePeriodSeconds"] = grace
    return pods


def with_group(name: str, size: int, created: str) -> dict[str, Any]:
    group = pod_group(name, size)
    group["metadata"]["creationTimestamp"] = created
    return group


def taint(store: FakeCluster, name: str, key: str) -> None:
    obj = copy.deepcopy(store.object(Kind.NODE, "", name))
    assert obj is not None
    obj["spec"]["taints"] = [{"key": key, "effect": "NoSchedule"}]
    store.put(Kind.NODE, obj)


def set_unschedulable(store: FakeCluster, name: str, value: bool) -> None:
    obj = copy.deepcopy(store.object(Kind.NODE, "", name))
    assert obj is not None
    obj["spec"]["unschedulable"] = value
    store.put(Kind.NODE, obj)


def where(store: FakeCluster, name: str) -> str | None:
    obj = store.object(Kind.POD, "ml", name)
    return None if obj is None else obj["spec"].get("nodeName")


async def synced(c: Controller, store: FakeCluster) -> None:
    """Until the informers show what the store holds (pods, nodes and groups by resourceVersion)."""
    def same() -> bool:
        for kind in (Kind.POD, Kind.NODE, Kind.POD_GROUP):
            theirs = {(o["metadata"].get("namespace"), o["metadata"]["name"], o["metadata"]["resourceVersion"])
                      for o in store.objects(kind)}
            ours = {(o["metadata"].get("namespace"), o["metadata"]["name"], o["metadata"]["resourceVersion"])
                    for o in c.cache.objects(kind)}
            if theirs != ours:
                return False
        return True
    await eventually(same, what="informers caught up")


async def test_a_spot_notice_drains_the_gang_whole_and_it_requeues_at_its_position(
        emulator: ApiServerEmulator, tmp_path: Path) -> None:
    store = emulator.store
    ledger = open_ledger(str(tmp_path / "ledger.db"))
    store.put(Kind.QUEUE, queue("team-a", 16))
    for name in ("a", "b"):
        store.put(Kind.NODE, node(name, gpus=2, labels=SPOT))
    for name in ("c", "d"):  # cordoned until the test opens them
        obj = node(name, gpus=2)
        obj["spec"]["unschedulable"] = True
        store.put(Kind.NODE, obj)
    store.put(Kind.POD_GROUP, with_group("train", 4, "2026-01-01T00:00:00Z"))
    for p in gang("train", 4, "2026-01-01T00:00:00Z"):
        store.put(Kind.POD, p)
    c = controller(emulator, ledger)
    async with informing(c, real_time=True):
        await synced(c, store)
        await c.cycle()
        assert sorted(where(store, f"train-{i}") or "" for i in range(4)) == ["a", "a", "b", "b"]
        # a later gang of the same queue waits: no room
        store.put(Kind.POD_GROUP, with_group("late", 4, "2026-01-01T01:00:00Z"))
        for p in gang("late", 4, "2026-01-01T01:00:00Z"):
            store.put(Kind.POD, p)
        await synced(c, store)
        await c.cycle()
        assert all(where(store, f"late-{i}") is None for i in range(4))

        taint(store, "a", ITN)  # the two-minute notice, on one of the gang's two nodes
        await synced(c, store)
        result = await c.cycle()
        evicted = sorted(o.pod for o in result.evicted if o.result == "evicted")
        assert evicted == [f"ml/train-{i}" for i in range(4)]  # both nodes: no member left behind
        for i in range(4):
            meta = store.object(Kind.POD, "ml", f"train-{i}")["metadata"]  # type: ignore[index]
            assert meta["deletionGracePeriodSeconds"] == 120  # the pod's own grace: its checkpoint
        group = store.object(Kind.POD_GROUP, "ml", "train")
        assert group is not None and group["metadata"]["annotations"][ANNOTATION_QUEUED_AT].startswith(
            "2026-01-01T00:00:00")
        assert c.metrics.evictions.labels("spot", "evicted")._value.get() == 4

        # the grace ends, the kubelet deletes them; the owner makes them again (new pods, new names)
        for i in range(4):
            store.delete(Kind.POD, "ml", f"train-{i}")
        await synced(c, store)
        tolerant = pod("anywhere", created="2026-01-01T03:00:00Z")
        tolerant["spec"]["tolerations"] = [{"operator": "Exists"}]
        store.put(Kind.POD, tolerant)
        await synced(c, store)
        await c.cycle()
        assert where(store, "anywhere") == "b"  # not the draining node a, whatever it tolerates

        for p in gang("train-r", 4, "2026-01-01T02:00:00Z"):
            p["metadata"]["labels"]["gpufleet.dev/pod-group"] = "train"
            store.put(Kind.POD, p)
        for name in ("c", "d"):
            set_unschedulable(store, name, False)
        await synced(c, store)
        await c.cycle()
        # ahead of the later gang, placed whole on the other nodes (b's last GPU, c and d)
        assert sorted(where(store, f"train-r-{i}") or "" for i in range(4)) == ["b", "c", "c", "d"]
        assert all(where(store, f"late-{i}") is None for i in range(4))
        await synced(c, store)
        # requeued: the group's age is dropped, so that a later gang of the same PodGroup queues by its own
        group = store.object(Kind.POD_GROUP, "ml", "train")
        assert group is not None and ANNOTATION_QUEUED_AT not in group["metadata"].get("annotations", {})
        again = await c.cycle()
        assert not again.evicted  # drained once
        assert store.count("evict") == 4
        assert c.accountant is not None and c.accountant.writer.flush(force=True)
    ends = {i.start.pod_name: i.end_reason for i in ledger.intervals()}
    assert {k: v for k, v in ends.items() if k.startswith("train-") and not k.startswith("train-r")} == {
        f"train-{i}": EndReason.SPOT_RECLAIM for i in range(4)}
    assert {ends[f"train-r-{i}"] for i in range(4)} == {None}
    await c.api.close()


@pytest.mark.parametrize("policy", ["evict", "keep"])
async def test_a_failed_gpu_under_a_running_pod(emulator: ApiServerEmulator, policy: str) -> None:
    store = emulator.store
    store.put(Kind.QUEUE, queue("team-a", 16))
    store.put(Kind.SCHEDULER_CONFIG, {"metadata": {"name": "default"}, "spec": {"onGPUFailure": policy}})
    store.put(Kind.NODE, node("a", gpus=2))
    store.put(Kind.NODE, node("b", gpus=2))
    store.put(Kind.POD_GROUP, with_group("g", 2, "2026-01-01T00:00:00Z"))
    for p in gang("g", 2, "2026-01-01T00:00:00Z"):
        store.put(Kind.POD, p)
    c = controller(emulator)
    async with informing(c, real_time=True):
        await synced(c, store)
        await c.cycle()
        held = store.object(Kind.POD, "ml", "g-0")
        assert held is not None
        name, index = held["spec"]["nodeName"], held["metadata"]["annotations"]["gpufleet.dev/gpu-index"]
        obj = copy.deepcopy(store.object(Kind.NODE, "", name))
        assert obj is not None
        obj["metadata"].setdefault("annotations", {})["gpufleet.dev/unhealthy-gpus"] = index
        store.put(Kind.NODE, obj)
        await synced(c, store)
        result = await c.cycle()
        evicted = sorted(o.pod for o in result.evicted if o.result == "evicted")
        assert evicted == (["ml/g-0", "ml/g-1"] if policy == "evict" else [])
        assert c.metrics.failed_gpu_pods._value.get() == 1
        await eventually(lambda: any(e.get("reason") == "GPUFailed" for e in store.objects(Kind.EVENT)),
                         what="GPUFailed Event")
        if policy == "evict":
            assert any(e.get("reason") == "Drained" for e in store.objects(Kind.EVENT))
    await c.api.close()


async def test_a_tenant_cannot_forge_its_queue_position(emulator: ApiServerEmulator) -> None:
    """A pod's own queued-at is never read; a PodGroup's is never earlier than the group's creation."""
    store = emulator.store
    store.put(Kind.QUEUE, queue("team-a", 16))
    store.put(Kind.NODE, node("a", gpus=1))
    store.put(Kind.POD, pod("honest", created="2026-01-01T01:00:00Z"))
    forger = pod("forger", created="2026-01-01T02:00:00Z")
    forger["metadata"]["annotations"][ANNOTATION_QUEUED_AT] = "2020-01-01T00:00:00.000000Z"
    store.put(Kind.POD, forger)
    forged_group = with_group("fg", 1, "2026-01-01T02:00:00Z")
    forged_group["metadata"]["annotations"] = {ANNOTATION_QUEUED_AT: "2020-01-01T00:00:00.000000Z"}
    store.put(Kind.POD_GROUP, forged_group)
    store.put(Kind.POD, pod("fg-0", group="fg", created="2026-01-01T02:00:00Z"))
    c = controller(emulator)
    async with informing(c, real_time=True):
        await synced(c, store)
        await c.cycle()
    assert where(store, "honest") == "a"
    assert where(store, "forger") is None and where(store, "fg-0") is None
    await c.api.close()


async def test_a_budget_that_refuses_holds_only_its_pod(emulator: ApiServerEmulator) -> None:
    """A PodDisruptionBudget is honoured: its pod is asked again later, with a DrainBlocked Event; the rest
    of the gang goes (a gang is of no use partly, and the node goes either way)."""
    store = emulator.store
    store.put(Kind.QUEUE, queue("team-a", 16))
    store.put(Kind.NODE, node("a", gpus=2, labels=SPOT))
    store.put(Kind.POD_GROUP, with_group("g", 2, "2026-01-01T00:00:00Z"))
    members = gang("g", 2, "2026-01-01T00:00:00Z")
    members[0]["metadata"]["labels"]["app"] = "guarded"
    for p in members:
        store.put(Kind.POD, p)
    store.put(Kind.PDB, pdb("keep-one", {"app": "guarded"}, min_available=1))
    c = controller(emulator)
    async with informing(c, real_time=True):
        await synced(c, store)
        await c.cycle()
        for p in ("g-0", "g-1"):  # running, as the budget counts them
            obj = copy.deepcopy(store.object(Kind.POD, "ml", p))
            assert obj is not None
            obj["status"]["phase"] = "Running"
            store.put(Kind.POD, obj)
        taint(store, "a", ITN)
        await synced(c, store)
        result = await c.cycle()
        assert {(o.pod, o.result) for o in result.evicted} == {("ml/g-0", "blocked"), ("ml/g-1", "evicted")}
        await eventually(lambda: any(e.get("reason") == "DrainBlocked" and "keep-one" in e.get("note", "")
                                     for e in store.objects(Kind.EVENT)), what="DrainBlocked Event")
        assert c.victims[PodKey("ml/g-0")].next_try > 0  # asked again after eviction_retry
    await c.api.close()
