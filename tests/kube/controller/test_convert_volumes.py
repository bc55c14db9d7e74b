"""The controller's conversion of claims, PVs and StorageClasses: the snapshot holds them, changes
that matter start a cycle, and the volumes chosen by pods held in place are applied (the overlay);
and the running controller, whose own volume writes start no endless cycles."""

from __future__ import annotations

import copy

import pytest

from gpufleet.domain import Binding, NodeName, PodKey, VolumeBinding
from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.convert import Overlay, build_snapshot, convert_object, relevant_change
from gpufleet.kube.install.rbac import allowed
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import bound_pods, make_controller, node, pod, queue, running, settle, until
from .volume_objects import FAST, LOCAL, claim, local_pv, storage_class, with_claims


def _objects() -> dict[Kind, list[object]]:
    return {
        Kind.NODE: [convert_object(Kind.NODE, node("n1"))],
        Kind.QUEUE: [convert_object(Kind.QUEUE, queue("team-a", 8))],
        Kind.POD: [convert_object(Kind.POD, with_claims(pod("a"), "data", "scratch"))],
        Kind.PERSISTENT_VOLUME_CLAIM: [convert_object(Kind.PERSISTENT_VOLUME_CLAIM, claim("data", LOCAL)),
                                       convert_object(Kind.PERSISTENT_VOLUME_CLAIM, claim("scratch", FAST))],
        Kind.PERSISTENT_VOLUME: [convert_object(Kind.PERSISTENT_VOLUME, local_pv("pv-1", "n1")),
                                 convert_object(Kind.PERSISTENT_VOLUME, local_pv("pv-2", "n1"))],
        Kind.STORAGE_CLASS: [convert_object(Kind.STORAGE_CLASS, storage_class(FAST, "ebs.csi.aws.com"))],
    }


def test_the_snapshot_holds_claims_volumes_and_classes() -> None:
    snapshot = build_snapshot(_objects()).snapshot
    assert [c.key for c in snapshot.claims] == ["ml/data", "ml/scratch"]
    assert [v.name for v in snapshot.volumes] == ["pv-1", "pv-2"]
    assert [c.name for c in snapshot.storage_classes] == [FAST]
    assert snapshot.pods[0].claims == ("data", "scratch")


def test_volumes_chosen_by_pods_in_flight_are_shown_as_written() -> None:
    chosen = Binding(PodKey("ml/a"), NodeName("n1"), (0,), volumes=(VolumeBinding("data", "pv-2"),
                                                                     VolumeBinding("scratch")))
    snapshot = build_snapshot(_objects(), Overlay(placed={PodKey("ml/a"): chosen})).snapshot
    assert {v.name: v.claim for v in snapshot.volumes} == {"pv-1": None, "pv-2": "ml/data"}
    assert {c.key: c.selected_node for c in snapshot.claims} == {"ml/data": None, "ml/scratch": "n1"}
    plain = build_snapshot(_objects(), Overlay(placed={PodKey("ml/a"): Binding(PodKey("ml/a"), NodeName("n1"))}))
    assert plain.snapshot.volumes == build_snapshot(_objects()).snapshot.volumes


def test_relevant_changes_of_storage_objects() -> None:
    c = claim("data", FAST)
    status_only = copy.deepcopy(c)
    status_only["status"] = {"phase": "Bound"}
    assert not relevant_change(Kind.PERSISTENT_VOLUME_CLAIM, c, status_only)
    selected = copy.deepcopy(c)
    selected["metadata"]["annotations"] = {"volume.kubernetes.io/selected-node": "n1"}
    assert relevant_change(Kind.PERSISTENT_VOLUME_CLAIM, c, selected)
    bound = copy.deepcopy(c)
    bound["spec"]["volumeName"] = "pv-1"
    assert relevant_change(Kind.PERSISTENT_VOLUME_CLAIM, c, bound)
    assert relevant_change(Kind.PERSISTENT_VOLUME_CLAIM, None, c)
    pv = local_pv("pv-1", "n1")
    other_annotation = copy.deepcopy(pv)
    other_annotation["metadata"]["annotations"] = {"pv.kubernetes.io/provisioned-by": "x"}
    assert not relevant_change(Kind.PERSISTENT_VOLUME, pv, other_annotation)
    released = copy.deepcopy(pv)
    released["status"] = {"phase": "Released"}
    assert relevant_change(Kind.PERSISTENT_VOLUME, pv, released)
    sc = storage_class(FAST, "ebs.csi.aws.com")
    assert relevant_change(Kind.STORAGE_CLASS, sc, storage_class(FAST, "ebs.csi.aws.com", default=True))
    assert relevant_change(Kind.STORAGE_CLASS, sc, None)
    assert not relevant_change(Kind.STORAGE_CLASS, sc, {**sc, "parameters": {"type": "gp3"}})


@pytest.mark.asyncio
async def test_the_running_controller_binds_pods_with_volumes_and_settles() -> None:
    cluster = FakeCluster()
    cluster.put(Kind.NODE, node("n1"))
    cluster.put(Kind.QUEUE, queue("team-a", 8))
    cluster.put(Kind.STORAGE_CLASS, storage_class(FAST, "ebs.csi.aws.com"))
    cluster.put(Kind.PERSISTENT_VOLUME_CLAIM, claim("scratch", FAST))
    cluster.put(Kind.POD, with_claims(pod("a"), "scratch"))
    controller = make_controller(cluster)
    async with running(controller):
        await until(lambda: "ml/a" in bound_pods(cluster), what="bound")
        await settle(2000)
        cycles = controller.cycles
        await settle(2000)  # its own writes (the claim's annotation, the pod) start no endless cycles
        assert controller.cycles == cycles
    annotations = cluster.object(Kind.PERSISTENT_VOLUME_CLAIM, "ml", "scratch")["metadata"]["annotations"]  # type: ignore[index]
    assert annotations == {"volume.kubernetes.io/selected-node": "n1"}
    assert [u for u in {(c.op, c.kind) for c in cluster.calls if c.caller == "controller"} if not allowed(*u)] == []
