"""`gpufleet explain` names a grouped pod's owner, read from the PodGroup the controller's pod-grouper
wrote, with its gang's progress: a snapshot of the HTTP API server emulator after the real controller
grouped a PyTorchJob."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpufleet.domain import LABEL_POD_GROUP
from gpufleet.kube.client.lightkube_api import connect
from gpufleet.kube.client.port import Kind
from gpufleet.kube.inspect.explain import Explanation, GroupOwner, explain_in_cluster, group_owner
from gpufleet.testing.emulator import ApiServerEmulator

from ..controller.controller_objects import bound_pods, eventually, node, pod, queue, running_over_http
from .cluster_objects import cluster_objects, fake_cluster

ROLE = "training.kubeflow.org/replica-type"


def pytorchjob(name: str, workers: int) -> dict[str, Any]:
    template = {"spec": {"schedulerName": "gpufleet", "containers": [
        {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    return {"apiVersion": Kind.PYTORCH_JOB.api_version, "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "ml", "labels": {"gpufleet.dev/queue": "team-a"}},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": workers, "template": template}}}}


def member(name: str, owner: dict[str, Any], role: str) -> dict[str, Any]:
    obj = pod(name, 1, queue=None, labels={ROLE: role})
    meta = owner["metadata"]
    obj["metadata"]["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                           "name": meta["name"], "uid": meta["uid"], "controller": True}]
    return obj


async def explain(emulator: ApiServerEmulator, name: str) -> Explanation:
    api = connect(server=emulator.url_text, field_manager="explain", timeout=5.0)
    try:
        return await explain_in_cluster(api, "ml", name)
    finally:
        await api.close()


@pytest.mark.asyncio
async def test_explain_names_the_pytorchjob_and_its_gangs_progress() -> None:
    async with ApiServerEmulator() as emulator:
        store = emulator.store
        store.put(Kind.NODE, node("n0", 3))  # 3 of the 4 pods fit: the gang waits
        store.put(Kind.QUEUE, queue("team-a", 16))
        async with running_over_http(emulator):
            owner = store.put(Kind.PYTORCH_JOB, pytorchjob("llama-ft", 3))
            store.put(Kind.POD, member("llama-ft-master-0", owner, "master"))
            for i in range(3):
                store.put(Kind.POD, member(f"llama-ft-worker-{i}", owner, "worker"))
            await eventually(lambda: all((p["metadata"].get("labels") or {}).get(LABEL_POD_GROUP)
                                         for p in store.objects(Kind.POD)), what="pods labelled")
            waiting = await explain(emulator, "llama-ft-worker-2")
            assert waiting.lines[0] == ("PyTorchJob ml/llama-ft: 0 of 4 pods placed; waiting: gang of 4 does not fit: "
                                        "3 of 4 placeable; no eligible victims.")
            assert waiting.lines[1] == "ml/llama-ft-worker-2 is pending; it asks for 1 whole GPU, in gang ml/" + (
                store.objects(Kind.POD_GROUP)[0]["metadata"]["name"] + ".")
            assert waiting.report["owner"] == {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                               "namespace": "ml", "name": "llama-ft", "placed": 0, "members": 4}
            store.put(Kind.NODE, node("n1", 1))
            await eventually(lambda: len(bound_pods(store)) == 4, what="gang bound")
        running = await explain(emulator, "llama-ft-master-0")
        assert running.lines[0] == "PyTorchJob ml/llama-ft: 4 of 4 pods placed."
        assert running.report["owner"]["placed"] == 4


@pytest.mark.asyncio
async def test_a_tenants_pod_labels_never_name_an_owner() -> None:
    async with ApiServerEmulator() as emulator:
        store = emulator.store
        store.put(Kind.NODE, node("n0", 3))
        store.put(Kind.QUEUE, queue("team-a", 16))
        fake_owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "vip", "uid": "u",
                      "controller": True}
        store.put(Kind.POD_GROUP, {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "PodGroup",
                                   "metadata": {"name": "mine", "namespace": "ml",  # hand-written: no grouper label
                                                "ownerReferences": [fake_owner]},
                                   "spec": {"minMember": 1, "queue": "team-a"}})
        store.put(Kind.POD, pod("p", 1, group="mine", labels={
            "app.kubernetes.io/managed-by": "gpufleet-pod-grouper"}))
        explained = await explain(emulator, "p")
        assert not any(line.startswith("PyTorchJob") for line in explained.lines)
        assert explained.report["owner"] is None


def test_group_owner_reads_only_the_grouper_s_controller_reference() -> None:
    labels = {"app.kubernetes.io/managed-by": "gpufleet-pod-grouper"}
    ref = {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "tune", "uid": "u", "controller": True}
    group = {"metadata": {"name": "g", "namespace": "ml", "labels": labels, "ownerReferences": [ref]}}
    assert group_owner(group) == GroupOwner("ray.io/v1", "RayJob", "ml", "tune")
    assert group_owner({"metadata": {**group["metadata"], "labels": {}}}) is None
    assert group_owner({"metadata": {**group["metadata"], "ownerReferences": [{**ref, "controller": False}]}}) is None
    assert group_owner(None) is None and group_owner({"metadata": "x"}) is None


def test_a_podgroup_that_cannot_be_read_leaves_the_owner_out_with_a_warning() -> None:
    objects = cluster_objects()
    member_pod = objects[Kind.POD][0]
    member_pod["metadata"]["labels"][LABEL_POD_GROUP] = "g"
    objects[Kind.POD_GROUP] = [{"apiVersion": "gpufleet.dev/v1alpha1", "kind": "PodGroup",
                                "metadata": {"name": "g", "namespace": member_pod["metadata"]["namespace"]},
                                "spec": {"minMember": 1}}]
    cluster = fake_cluster(objects)
    cluster.fail("get", 403, kind=Kind.POD_GROUP, message="forbidden")
    meta = member_pod["metadata"]
    explained = asyncio.run(explain_in_cluster(cluster.client("gpufleet"), meta["namespace"], meta["name"]))
    assert explained.report["owner"] is None and explained.lines
    assert any(f"reading podgroup {meta['namespace']}/g: HTTP 403: forbidden" in w for w in explained.warnings)
