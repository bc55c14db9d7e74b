"""Volumes through the real lightkube adapter over HTTP (the API server emulator): the storage kinds
over the port, and the binder's writes before a Binding (docs/semantics-notes.md, "Volumes")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from gpufleet.domain import Binding, NodeName, PodKey, VolumeBinding
from gpufleet.kube.client.lightkube_api import LightkubeApi, connect
from gpufleet.kube.client.port import Kind, RealClock
from gpufleet.kube.controller.binder import Binder
from gpufleet.kube.controller.lifecycle import BindStage
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import node, pod
from .volume_objects import BOUND_BY, FAST, LOCAL, SELECTED, claim, local_pv, storage_class, with_claims

pytestmark = pytest.mark.asyncio

@pytest_asyncio.fixture
async def emulator() -> AsyncIterator[ApiServerEmulator]:
    async with ApiServerEmulator() as server:
        yield server


def client(emulator: ApiServerEmulator) -> LightkubeApi:
    return connect(server=emulator.url_text, field_manager="test", timeout=5.0)


def binder(api: LightkubeApi, store: FakeCluster) -> Binder:
    return Binder(api, RealClock(), lambda: True, backoff=0.001, cached=store.object)


def writes(store: FakeCluster) -> list[tuple[str, str, str]]:
    """The writes the emulator saw, in order: (op, kind, name)."""
    return [(c.op, c.kind.kind, c.name) for c in store.calls
            if c.op in ("patch", "bind") and c.status < 400]


def volume_cluster(store: FakeCluster) -> None:
    store.put(Kind.NODE, node("n1"))
    store.put(Kind.STORAGE_CLASS, storage_class(FAST, "ebs.csi.aws.com"))
    store.put(Kind.STORAGE_CLASS, storage_class(LOCAL, "kubernetes.io/no-provisioner"))
    store.put(Kind.PERSISTENT_VOLUME, local_pv("pv-1", "n1"))
    store.put(Kind.PERSISTENT_VOLUME_CLAIM, claim("scratch", FAST))
    store.put(Kind.PERSISTENT_VOLUME_CLAIM, claim("data", LOCAL))


def chose(name: str, node_name: str = "n1", *volumes: VolumeBinding) -> Binding:
    return Binding(PodKey(f"ml/{name}"), NodeName(node_name), (0,), volumes=volumes)


@pytest.mark.parametrize("fast_http", [True, False])
async def test_the_storage_kinds_are_listed_watched_and_patched_over_http(emulator: ApiServerEmulator,
                                                                          fast_http: bool) -> None:
    store = emulator.store
    volume_cluster(store)
    api = connect(server=emulator.url_text, field_manager="test", timeout=5.0, fast_http=fast_http)
    try:
        listed = {kind: [o["metadata"]["name"] for o in (await api.list(kind)).items]
                  for kind in (Kind.STORAGE_CLASS, Kind.PERSISTENT_VOLUME, Kind.PERSISTENT_VOLUME_CLAIM)}
        assert listed == {Kind.STORAGE_CLASS: [FAST, LOCAL], Kind.PERSISTENT_VOLUME: ["pv-1"],
                          Kind.PERSISTENT_VOLUME_CLAIM: ["scratch", "data"]}
        since = str(store.resource_version)
        await api.patch(Kind.PERSISTENT_VOLUME, "", "pv-1", {"metadata": {"annotations": {BOUND_BY: "yes"}}})
        await api.patch(Kind.PERSISTENT_VOLUME_CLAIM, "ml", "data", {"metadata": {"annotations": {SELECTED: "n1"}}})

        async def first(kind: Kind) -> dict[str, Any]:
            async for event in api.watch(kind, since):
                return event.object
            raise AssertionError("the watch ended")

        pv = await asyncio.wait_for(first(Kind.PERSISTENT_VOLUME), 5)
        pvc = await asyncio.wait_for(first(Kind.PERSISTENT_VOLUME_CLAIM), 5)
        assert pv["metadata"]["annotations"] == {BOUND_BY: "yes"}
        assert pvc["metadata"]["annotations"] == {SELECTED: "n1"}
    finally:
        await api.close()


async def test_volumes_are_written_before_the_binding(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    volume_cluster(store)
    store.put(Kind.POD, with_claims(pod("a"), "data", "scratch"))
    api = client(emulator)
    b = binder(api, store)
    binding = chose("a", "n1", VolumeBinding("data", "pv-1"), VolumeBinding("scratch"))
    [outcome] = await b.bind_gangs([("ml/a", [binding])], lambda key: store.object(Kind.POD, "ml", "a"))
    await api.close()
    assert outcome.bound == ("ml/a",) and not outcome.failed
    seen = writes(store)
    assert sorted(seen[:2]) == [("patch", "PersistentVolume", "pv-1"), ("patch", "PersistentVolumeClaim", "scratch")]
    assert seen[2:] == [("patch", "Pod", "a"), ("bind", "Pod", "a")]
    pv = store.object(Kind.PERSISTENT_VOLUME, "", "pv-1")
    data_uid = store.object(Kind.PERSISTENT_VOLUME_CLAIM, "ml", "data")["metadata"]["uid"]  # type: ignore[index]
    assert pv is not None and pv["spec"]["claimRef"] == {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "ml", "name": "data", "uid": data_uid}
    assert pv["metadata"]["annotations"] == {BOUND_BY: "yes"}
    scratch = store.object(Kind.PERSISTENT_VOLUME_CLAIM, "ml", "scratch")
    assert scratch is not None and scratch["metadata"]["annotations"] == {SELECTED: "n1"}
    assert b.inflight[PodKey("ml/a")].stage is BindStage.BOUND


@pytest.mark.parametrize("status", [409, 500])
async def test_a_failed_volume_write_binds_no_pod_of_the_gang(emulator: ApiServerEmulator, status: int) -> None:
    store = emulator.store
    volume_cluster(store)
    store.put(Kind.NODE, node("n2"))
    store.put(Kind.PERSISTENT_VOLUME, local_pv("pv-2", "n2"))
    store.put(Kind.PERSISTENT_VOLUME_CLAIM, claim("data-2", LOCAL))
    store.put(Kind.POD, with_claims(pod("g-0", group="g"), "data"))
    store.put(Kind.POD, with_claims(pod("g-1", group="g"), "data-2"))
    # 409: the PV changed since it was read (never retried as is); 500: every retry fails too.
    store.fail("patch", status, times=1 if status == 409 else 7, kind=Kind.PERSISTENT_VOLUME,
               match=lambda ns, name: name == "pv-2")
    api = client(emulator)
    b = binder(api, store)
    gang = [chose("g-0", "n1", VolumeBinding("data", "pv-1")), chose("g-1", "n2", VolumeBinding("data-2", "pv-2"))]

    def pods(key: PodKey) -> dict[str, Any] | None:
        return store.object(Kind.POD, "ml", key.split("/")[1])

    [first] = await b.bind_gangs([("ml/g", gang)], pods)
    assert first.bound == () and set(first.failed) == {"ml/g-0", "ml/g-1"}
    assert 'persistentvolumeclaim "data-2": the claimRef of persistentvolume "pv-2" not written' in first.failed["ml/g-1"]
    assert first.failed["ml/g-0"] == "another pod of its gang failed"
    assert not b.inflight
    assert store.count("bind") == 0 and [w for w in writes(store) if w[1] == "Pod"] == []
    [second] = await b.bind_gangs([("ml/g", gang)], pods)  # the next cycle
    await api.close()
    assert sorted(second.bound) == ["ml/g-0", "ml/g-1"]
    claimed = {name: store.object(Kind.PERSISTENT_VOLUME, "", name)["spec"]["claimRef"]["name"]  # type: ignore[index]
               for name in ("pv-1", "pv-2")}
    assert claimed == {"pv-1": "data", "pv-2": "data-2"}
    # pv-1's write went through in the first attempt: it is not made again
    assert [w for w in writes(store) if w[2] == "pv-1"] == [("patch", "PersistentVolume", "pv-1")]


async def test_a_stale_pv_is_never_taken_over(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    volume_cluster(store)
    store.put(Kind.POD, with_claims(pod("a"), "data"))
    stale = store.object(Kind.PERSISTENT_VOLUME, "", "pv-1")
    # The PV controller gives pv-1 to another claim after the controller's cache read it.
    store._patch(Kind.PERSISTENT_VOLUME, "", "pv-1", {"spec": {"claimRef": {"namespace": "x", "name": "other"}}})
    api = client(emulator)
    b = Binder(api, RealClock(), lambda: True, backoff=0.001,
               cached=lambda kind, ns, name: stale if kind is Kind.PERSISTENT_VOLUME else store.object(kind, ns, name))
    [outcome] = await b.bind_gangs([("ml/a", [chose("a", "n1", VolumeBinding("data", "pv-1"))])],
                                   lambda key: store.object(Kind.POD, "ml", "a"))
    await api.close()
    assert outcome.bound == () and "409" in outcome.failed["ml/a"]
    assert store.object(Kind.PERSISTENT_VOLUME, "", "pv-1")["spec"]["claimRef"]["name"] == "other"  # type: ignore[index]
    assert [c.status for c in store.calls if c.op == "patch"] == [409]  # not retried with the same version


async def test_volume_writes_already_in_place_are_not_made_again(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    volume_cluster(store)
    store.put(Kind.POD, with_claims(pod("a"), "data", "scratch"))
    store.fail("bind", 422)  # the first Binding fails after the volumes were written
    api = client(emulator)
    b = binder(api, store)
    binding = chose("a", "n1", VolumeBinding("data", "pv-1"), VolumeBinding("scratch"))
    [first] = await b.bind_gangs([("ml/a", [binding])], lambda key: store.object(Kind.POD, "ml", "a"))
    assert first.bound == ()
    b2 = binder(api, store)  # as after a restart: nothing remembered but what the API server shows
    [second] = await b2.bind_gangs([("ml/a", [binding])], lambda key: store.object(Kind.POD, "ml", "a"))
    await api.close()
    assert second.bound == ("ml/a",)
    volume_writes = [w for w in writes(store) if w[1] != "Pod"]
    assert sorted(volume_writes) == [("patch", "PersistentVolume", "pv-1"), ("patch", "PersistentVolumeClaim", "scratch")]


async def test_a_claim_gone_from_the_cache_fails_the_binding_naming_it(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    volume_cluster(store)
    store.put(Kind.POD, with_claims(pod("a"), "gone"))
    api = client(emulator)
    [outcome] = await binder(api, store).bind_gangs([("ml/a", [chose("a", "n1", VolumeBinding("gone"))])],
                                                   lambda key: store.object(Kind.POD, "ml", "a"))
    await api.close()
    assert outcome.failed == {"ml/a": 'binding volumes: persistentvolumeclaim "gone" not found'}
    assert writes(store) == []
