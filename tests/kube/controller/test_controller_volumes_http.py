"""The controller with volumes, end to end through the real lightkube adapter over HTTP against the
API server emulator: the engine chooses volumes with the node, the controller writes them before
the Binding (docs/semantics-notes.md and docs/controller.md, "Volumes")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from gpufleet.kube.client.port import Kind
from gpufleet.kube.install.rbac import allowed
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import (
    bound_pods,
    caught_up,
    events,
    http_controller,
    informing_http,
    node,
    pod,
    pod_group,
    queue,
)
from .volume_objects import BOUND_BY, FAST, LOCAL, SELECTED, claim, local_pv, storage_class, with_claims

pytestmark = pytest.mark.asyncio

@pytest_asyncio.fixture
async def emulator() -> AsyncIterator[ApiServerEmulator]:
    async with ApiServerEmulator() as server:
        store = server.store
        for name in ("n1", "n2"):
            store.put(Kind.NODE, node(name))
        store.put(Kind.QUEUE, queue("team-a", 16))
        store.put(Kind.STORAGE_CLASS, storage_class(FAST, "ebs.csi.aws.com"))
        store.put(Kind.STORAGE_CLASS, storage_class(LOCAL, "kubernetes.io/no-provisioner"))
        yield server


def writes(store: FakeCluster) -> list[tuple[str, str, str]]:
    return [(c.op, c.kind.kind, c.name) for c in store.calls
            if c.op in ("patch", "bind") and c.status < 400 and c.kind is not Kind.EVENT]


def obj(store: FakeCluster, kind: Kind, name: str, namespace: str = "ml") -> dict[str, Any]:
    found = store.object(kind, namespace if kind.namespaced else "", name)
    assert found is not None, name
    return found


async def test_a_claim_to_provision_gets_its_node_before_the_binding(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    store.put(Kind.PERSISTENT_VOLUME_CLAIM, claim("scratch", FAST))
    store.put(Kind.POD, with_claims(pod("a"), "scratch"))
    c = http_controller(emulator)
    async with informing_http(c):
        result = await c.cycle()
    assert result.bound == ("ml/a",)
    [binding] = result.decisions.bindings
    node_name = bound_pods(store)["ml/a"]
    assert binding.node == node_name
    assert obj(store, Kind.PERSISTENT_VOLUME_CLAIM, "scratch")["metadata"]["annotations"] == {SELECTED: node_name}
    seen = writes(store)
    assert seen.index(("patch", "PersistentVolumeClaim", "scratch")) < seen.index(("bind", "Pod", "a"))
    assert [u for u in {(call.op, call.kind) for call in store.calls if call.caller == "c"} if not allowed(*u)] == []


async def test_a_claim_matching_a_local_pv_lands_on_its_node(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    store.put(Kind.PERSISTENT_VOLUME, local_pv("pv-small", "n2", "60Gi"))
    store.put(Kind.PERSISTENT_VOLUME, local_pv("pv-big", "n2", "500Gi"))
    store.put(Kind.PERSISTENT_VOLUME, local_pv("pv-tiny", "n1", "10Gi"))  # too small for the claim
    store.put(Kind.PERSISTENT_VOLUME_CLAIM, claim("data", LOCAL, "50Gi"))
    store.put(Kind.POD, with_claims(pod("b"), "data"))
    c = http_controller(emulator)
    async with informing_http(c):
        result = await c.cycle()
    assert result.bound == ("ml/b",) and bound_pods(store) == {"ml/b": "n2"}
    pv = obj(store, Kind.PERSISTENT_VOLUME, "pv-small")  # the smallest that fits
    uid = obj(store, Kind.PERSISTENT_VOLUME_CLAIM, "data")["metadata"]["uid"]
    assert pv["spec"]["claimRef"] == {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "ml",
                                      "name": "data", "uid": uid}
    assert pv["metadata"]["annotations"] == {BOUND_BY: "yes"}
    assert "claimRef" not in obj(store, Kind.PERSISTENT_VOLUME, "pv-big")["spec"]
    seen = writes(store)
    assert seen.index(("patch", "PersistentVolume", "pv-small")) < seen.index(("bind", "Pod", "b"))


@pytest.mark.parametrize("status", [409, 500])
async def test_a_failed_pv_write_leaves_the_gang_unbound_until_the_next_cycle(
        emulator: ApiServerEmulator, status: int) -> None:
    store = emulator.store
    store.put(Kind.POD_GROUP, pod_group("job", 2))
    for i, node_name in enumerate(("n1", "n2")):
        store.put(Kind.PERSISTENT_VOLUME, local_pv(f"pv-{i}", node_name))
        store.put(Kind.PERSISTENT_VOLUME_CLAIM, claim(f"data-{i}", LOCAL))
        store.put(Kind.POD, with_claims(pod(f"job-{i}", group="job"), f"data-{i}"))
    # 409: the PV changed since the cache read it (not retried as is); 500: every retry fails too
    store.fail("patch", status, times=1 if status == 409 else 7, kind=Kind.PERSISTENT_VOLUME,
               match=lambda ns, name: name == "pv-1")
    c = http_controller(emulator)
    async with informing_http(c):
        first = await c.cycle()
        assert not first.bound and set(first.failed) == {"ml/job-0", "ml/job-1"}
        assert 'persistentvolumeclaim "data-1"' in first.failed["ml/job-1"]
        assert bound_pods(store) == {} and store.count("bind") == 0
        assert [w for w in writes(store) if w[1] == "Pod"] == []  # not even annotated
        failed = events(store, "BindingFailed", "job-1")
        assert failed and 'persistentvolumeclaim "data-1"' in failed[0]["note"] and failed[0]["type"] == "Warning"
        await caught_up(c, store)
        [condition] = [x for x in obj(store, Kind.POD, "job-1")["status"]["conditions"] if x["type"] == "PodScheduled"]
        assert condition["status"] == "False" and 'persistentvolumeclaim "data-1"' in condition["message"]
        second = await c.cycle()
    assert sorted(second.bound) == ["ml/job-0", "ml/job-1"]
    assert bound_pods(store) == {"ml/job-0": "n1", "ml/job-1": "n2"}
    assert obj(store, Kind.PERSISTENT_VOLUME, "pv-1")["spec"]["claimRef"]["name"] == "data-1"
    # pv-0's write went through in the first cycle and is not made again
    assert [w for w in writes(store) if w[2] == "pv-0"] == [("patch", "PersistentVolume", "pv-0")]


async def test_a_pod_whose_claim_is_missing_stays_pending_and_says_why(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    store.put(Kind.POD, with_claims(pod("d"), "missing"))
    c = http_controller(emulator)
    async with informing_http(c):
        result = await c.cycle()
        await caught_up(c, store)
    assert result.bound == () and bound_pods(store) == {}
    reason = 'persistentvolumeclaim "missing" not found'
    assert [(p.pod, reason in p.reason) for p in result.decisions.pending] == [("ml/d", True)]
    [condition] = [x for x in obj(store, Kind.POD, "d")["status"]["conditions"] if x["type"] == "PodScheduled"]
    assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
    assert reason in condition["message"]
    assert reason in events(store, "FailedScheduling", "d")[0]["note"]


@pytest.mark.parametrize("restart", [False, True])
async def test_volume_writes_are_not_made_twice(emulator: ApiServerEmulator, restart: bool) -> None:
    store = emulator.store
    store.put(Kind.PERSISTENT_VOLUME, local_pv("pv-0", "n1"))
    store.put(Kind.PERSISTENT_VOLUME_CLAIM, claim("data", LOCAL))
    store.put(Kind.PERSISTENT_VOLUME_CLAIM, claim("scratch", FAST))
    store.put(Kind.POD, with_claims(pod("a"), "data", "scratch"))
    store.fail("bind", 422)  # the Binding fails once, after the volumes were written
    c = http_controller(emulator)
    async with informing_http(c):
        first = await c.cycle()
        assert not first.bound and "ml/a" in first.failed
        await caught_up(c, store)
        if not restart:  # the next cycle of the same controller
            second = await c.cycle()
    if restart:  # a new controller, knowing only what the API server shows
        c = http_controller(emulator)
        async with informing_http(c):
            second = await c.cycle()
    assert second.bound == ("ml/a",) and bound_pods(store) == {"ml/a": "n1"}
    assert sorted(w for w in writes(store) if w[1] != "Pod") == [
        ("patch", "PersistentVolume", "pv-0"), ("patch", "PersistentVolumeClaim", "scratch")]
    assert obj(store, Kind.PERSISTENT_VOLUME_CLAIM, "scratch")["metadata"]["annotations"] == {SELECTED: "n1"}


async def test_pods_sharing_a_claim_wait_for_one_write(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    shared = local_pv("pv-shared", "n1")
    shared["spec"]["accessModes"] = ["ReadWriteMany"]
    store.put(Kind.PERSISTENT_VOLUME, shared)
    store.put(Kind.PERSISTENT_VOLUME_CLAIM, {**claim("shared", LOCAL), "spec": {
        "accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Gi"}}, "storageClassName": LOCAL}})
    for name in ("p-1", "p-2"):  # two gangs of one pod each, in one cycle
        store.put(Kind.POD, with_claims(pod(name), "shared"))
    c = http_controller(emulator)
    async with informing_http(c):
        result = await c.cycle()
    assert sorted(result.bound) == ["ml/p-1", "ml/p-2"] and not result.failed
    assert all(b.volumes for b in result.decisions.bindings)  # both list the choice
    assert [(call.op, call.status) for call in store.calls if call.kind is Kind.PERSISTENT_VOLUME
            and call.op == "patch"] == [("patch", 200)]
