"""The controller as the allocator of DRA GPU devices, end to end through the real lightkube adapter over
HTTP against the API server emulator (docs/semantics-notes.md, "Dynamic Resource Allocation"): each
claim's status (allocation, reservedFor) is written before the pod's Binding, as kube-scheduler's
DynamicResources PreBind does; fractional pods get the driver's MPS config; shared claims; allocations
no pod holds are released; unsupported requests wait with their reason; a failed claim write leaves the
gang unbound."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from gpufleet.kube.client.port import Kind
from gpufleet.kube.install.rbac import allowed
from gpufleet.testing.dra_objects import DEVICE_CLASS, dra_pod, objects, resource_claim, resource_slice
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import (
    bound_pods,
    caught_up,
    http_controller,
    informing_http,
    node,
    pod_group,
    queue,
)

pytestmark = pytest.mark.asyncio

MPS_PARAMETERS = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                  "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25,
                                                               "defaultPinnedDeviceMemoryLimit": "20480Mi"}}}
ON_N1 = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}


@pytest_asyncio.fixture
async def emulator() -> AsyncIterator[ApiServerEmulator]:
    async with ApiServerEmulator() as server:
        store = server.store
        store.put(Kind.NODE, node("n1", gpus=0))  # its GPUs are the DRA driver's devices
        store.put(Kind.NODE, node("n2", gpus=0))  # no GPUs at all
        store.put(Kind.QUEUE, queue("team-a", 16))
        for kind, text in ((Kind.RESOURCE_SLICE, resource_slice("n1", gpus=4)), (Kind.DEVICE_CLASS, DEVICE_CLASS)):
            store.put(kind, objects(text)[0])
        yield server


def add_pod(store: FakeCluster, name: str, claim: str, *, annotations: str = "{}", group: str | None = None) -> None:
    (obj,) = objects(dra_pod(name, entries=f"  - {{name: gpu, resourceClaimName: {claim}}}\n",
                             annotations=annotations))
    obj["metadata"]["labels"] = {"gpufleet.dev/queue": "team-a", **({"gpufleet.dev/pod-group": group} if group else {})}
    store.put(Kind.POD, obj)


def add_claim(store: FakeCluster, name: str, requests: str = "", extra: str = "") -> None:
    store.put(Kind.RESOURCE_CLAIM, objects(resource_claim(name, requests=requests) + extra)[0])


def claim_status(store: FakeCluster, name: str) -> dict[str, Any]:
    found = store.object(Kind.RESOURCE_CLAIM, "ml", name)
    assert found is not None
    return dict(found.get("status") or {})


def writes(store: FakeCluster) -> list[tuple[str, str, str]]:
    return [(c.op, c.kind.kind, c.name) for c in store.calls
            if c.op in ("patch", "patch_status", "bind") and c.status < 400 and c.kind in (Kind.POD, Kind.RESOURCE_CLAIM)]


def uid(store: FakeCluster, name: str) -> str:
    found = store.object(Kind.POD, "ml", name)
    assert found is not None
    return str(found["metadata"]["uid"])


async def test_the_allocation_and_reservation_are_written_before_the_binding(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    add_claim(store, "a-gpu", requests="      - name: gpu\n        exactly: {deviceClassName: gpu.nvidia.com, "
                                       "count: 2}\n")
    add_pod(store, "a", "a-gpu")
    c = http_controller(emulator)
    async with informing_http(c):
        result = await c.cycle()
    assert result.bound == ("ml/a",) and bound_pods(store) == {"ml/a": "n1"}
    assert claim_status(store, "a-gpu") == {
        "allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"},
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1"}]},
            "nodeSelector": ON_N1},
        "reservedFor": [{"resource": "pods", "name": "a", "uid": uid(store, "a")}],
    }
    seen = writes(store)
    assert seen.index(("patch_status", "ResourceClaim", "a-gpu")) < seen.index(("bind", "Pod", "a"))
    assert [u for u in {(call.op, call.kind) for call in store.calls if call.caller == "c"} if not allowed(*u)] == []


async def test_a_fractional_pod_gets_the_drivers_mps_config(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    device_class = objects(DEVICE_CLASS)[0]
    device_class["spec"]["config"] = [{"opaque": {"driver": "gpu.nvidia.com", "parameters": {"kind": "Defaults"}}}]
    store.put(Kind.DEVICE_CLASS, device_class)
    add_claim(store, "f-gpu", extra="    config:\n    - opaque: {driver: gpu.nvidia.com, parameters: {kind: Mine}}\n")
    add_claim(store, "g-gpu", extra="    config:\n    - requests: [gpu]\n      opaque: {driver: gpu.nvidia.com, "
                                    "parameters: {kind: GpuConfig, sharing: {strategy: TimeSlicing}}}\n")
    add_pod(store, "f", "f-gpu", annotations="{gpufleet.dev/gpu-blocks: '25'}")
    add_pod(store, "g", "g-gpu", annotations="{gpufleet.dev/gpu-blocks: '50'}")
    c = http_controller(emulator)
    async with informing_http(c):
        result = await c.cycle()
    assert sorted(result.bound) == ["ml/f"]  # g's claim sets its own sharing: it waits
    config = claim_status(store, "f-gpu")["allocation"]["devices"]["config"]
    assert config == [
        {"source": "FromClass", "requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com",
                                                                "parameters": {"kind": "Defaults"}}},
        {"source": "FromClaim", "opaque": {"driver": "gpu.nvidia.com", "parameters": {"kind": "Mine"}}},
        {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com",
                                                                "parameters": MPS_PARAMETERS}},
    ]
    # A fractional pod whose claim sets its own sharing is not bound, and its claim not allocated: the
    # tenant's limits would replace its blocks' (docs/semantics-notes.md, "Dynamic Resource Allocation").
    assert "allocation" not in (claim_status(store, "g-gpu") or {})


async def test_an_allocation_is_released_when_its_pod_ends(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    add_claim(store, "a-gpu")
    add_pod(store, "a", "a-gpu")
    c = http_controller(emulator)
    async with informing_http(c):
        assert (await c.cycle()).bound == ("ml/a",)
        assert claim_status(store, "a-gpu")["reservedFor"][0]["name"] == "a"
        store.set_pod_phase("ml", "a", "Succeeded")
        await caught_up(c, store)
        await c.cycle()
    assert claim_status(store, "a-gpu") == {}
    released = [call for call in store.calls if call.op == "patch_status" and call.kind is Kind.RESOURCE_CLAIM]
    assert len(released) == 2  # the allocation, then its release


async def test_a_claim_shared_by_two_pods_is_allocated_once(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    add_claim(store, "shared")
    add_pod(store, "a", "shared")
    add_pod(store, "b", "shared")
    c = http_controller(emulator)
    async with informing_http(c):
        first = await c.cycle()
        assert first.bound == ("ml/a",)
        assert [(p.pod, p.reason) for p in first.decisions.pending] == [
            ("ml/b", 'waiting for resourceclaim "shared" to be allocated with pod ml/a')]
        allocation = claim_status(store, "shared")["allocation"]
        await caught_up(c, store)
        second = await c.cycle()
    assert second.bound == ("ml/b",) and bound_pods(store) == {"ml/a": "n1", "ml/b": "n1"}
    [binding] = second.decisions.bindings
    assert binding.devices[0].shared
    status = claim_status(store, "shared")
    assert status["allocation"] == allocation  # the same devices: no second allocation
    assert status["reservedFor"] == [{"resource": "pods", "name": "a", "uid": uid(store, "a")},
                                     {"resource": "pods", "name": "b", "uid": uid(store, "b")}]
    seen = writes(store)
    assert seen.index(("patch_status", "ResourceClaim", "shared"), seen.index(("bind", "Pod", "a"))) < seen.index(
        ("bind", "Pod", "b"))


async def test_an_unsupported_request_waits_with_its_reason(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    add_claim(store, "admin", requests="      - name: gpu\n        exactly: {deviceClassName: gpu.nvidia.com, "
                                       "adminAccess: true}\n")
    add_pod(store, "a", "admin")
    c = http_controller(emulator)
    async with informing_http(c):
        result = await c.cycle()
    assert result.bound == ()
    assert [(p.pod, p.reason) for p in result.decisions.pending] == [
        ("ml/a", 'resourceclaim "admin" request "gpu": adminAccess is not supported by gpufleet')]
    assert claim_status(store, "admin") == {}


async def test_a_failed_claim_write_leaves_the_gang_unbound(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    store.put(Kind.POD_GROUP, pod_group("job", 2))
    for i in range(2):
        add_claim(store, f"job-{i}-gpu")
        add_pod(store, f"job-{i}", f"job-{i}-gpu", group="job")
    store.fail("patch_status", 500, times=7, kind=Kind.RESOURCE_CLAIM, match=lambda ns, name: name == "job-1-gpu")
    c = http_controller(emulator)
    async with informing_http(c):
        first = await c.cycle()
        assert not first.bound and set(first.failed) == {"ml/job-0", "ml/job-1"}
        assert first.failed["ml/job-1"] == ('allocating devices: resourceclaim "job-1-gpu": its allocation not '
                                            "written: 500 InternalError: injected fault")
        assert first.failed["ml/job-0"] == "another pod of its gang failed"
        assert bound_pods(store) == {} and store.count("bind") == 0
        assert [w for w in writes(store) if w[:2] == ("patch", "Pod")] == []  # not even annotated
        await caught_up(c, store)
        second = await c.cycle()
    assert sorted(second.bound) == ["ml/job-0", "ml/job-1"]
    assert {claim_status(store, f"job-{i}-gpu")["reservedFor"][0]["name"] for i in range(2)} == {"job-0", "job-1"}


async def test_an_allocation_reserved_for_another_schedulers_pod_is_left_alone(emulator: ApiServerEmulator) -> None:
    """kube-scheduler writes a claim's allocation before its Binding too: between the two, its pod is
    pending for another scheduler (not in gpufleet's snapshot), and the allocation is not gpufleet's."""
    store = emulator.store
    held = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-3"}]}, "nodeSelector": ON_N1},
        "reservedFor": [{"resource": "pods", "name": "theirs", "uid": "u-1"}]}
    store.put(Kind.RESOURCE_CLAIM, {**objects(resource_claim("kept"))[0], "status": held})
    (theirs,) = objects(dra_pod("theirs", entries="  - {name: gpu, resourceClaimName: kept}\n"))
    theirs["spec"]["schedulerName"] = "default-scheduler"
    store.put(Kind.POD, theirs)
    store.put(Kind.RESOURCE_CLAIM, {**objects(resource_claim("gone"))[0], "status": {
        **held, "reservedFor": [{"resource": "pods", "name": "ended", "uid": "u-2"}]}})
    c = http_controller(emulator)
    async with informing_http(c):
        await c.cycle()
    assert claim_status(store, "kept") == held
    assert claim_status(store, "gone") == {}  # its pod no longer exists


async def test_a_claim_changed_between_cycles_is_read_again(emulator: ApiServerEmulator) -> None:
    """The controller keeps its reading of the DRA objects between cycles (DeviceCache): the
    informers keep an unchanged pod as the same object, so its reading is reused; its claim changed
    (8 GPUs, which no node has, then 2), the pod is read again and bound with 2 devices."""
    store = emulator.store
    eight = "      - name: gpu\n        exactly: {deviceClassName: gpu.nvidia.com, count: 8}\n"
    add_claim(store, "a-gpu", requests=eight)
    add_pod(store, "a", "a-gpu")
    c = http_controller(emulator)
    async with informing_http(c):
        await caught_up(c, store)
        assert (await c.cycle()).bound == ()
        before = c.snapshot().snapshot
        assert (await c.cycle()).bound == ()
        after = c.snapshot().snapshot
        assert next(p for p in before.pods if p.name == "a") is next(p for p in after.pods if p.name == "a")
        read = [r.new for r in c._device_cache._pods.values() if r.pod.name == "a"]
        assert len(read) == 1 and read[0].requests["nvidia.com/gpu"] == 8000
        add_claim(store, "a-gpu", requests=eight.replace("count: 8", "count: 2"))
        await caught_up(c, store)
        assert (await c.cycle()).bound == ("ml/a",)
    assert len(claim_status(store, "a-gpu")["allocation"]["devices"]["results"]) == 2
