"""The pod-grouper's placement for inference owners, with the real controller over HTTP against the API
server emulator: each replica of a Deployment gets a PodGroup with ``placement: spread`` and lands on its
own node where the cluster's binpack would stack them; the owner's ``gpufleet.dev/placement`` annotation
chooses otherwise, and a bad one is a Warning Event and the default (docs/semantics-notes.md,
"Placement per gang")."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.kube.client.port import Kind
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import bound_pods, eventually, node, pod, queue, running_over_http

pytestmark = pytest.mark.asyncio

JsonDict = dict[str, Any]


def _owned(obj: JsonDict, owner: JsonDict) -> JsonDict:
    meta = owner["metadata"]
    obj["metadata"]["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                           "name": meta["name"], "uid": meta["uid"], "controller": True}]
    return obj


def _deployment(store: FakeCluster, annotations: dict[str, str] | None = None, replicas: int = 3) -> None:
    """A Deployment ``serve`` of ``replicas`` one-GPU pods (through its ReplicaSet), on a cluster of
    three empty 8-GPU nodes (binpack's pick: always n0)."""
    for i in range(3):
        store.put(Kind.NODE, node(f"n{i}", 8))
    store.put(Kind.QUEUE, queue("team-a", 24))
    template = {"spec": {"schedulerName": "gpufleet", "containers": [
        {"name": "main", "image": "server:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    deploy = store.put(Kind.DEPLOYMENT, {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "serve", "namespace": "ml", "labels": {"gpufleet.dev/queue": "team-a"},
                     "annotations": annotations or {}},
        "spec": {"replicas": replicas, "template": template}})
    rs = store.put(Kind.REPLICA_SET, _owned({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
        "name": "serve-7d9c8", "namespace": "ml"}, "spec": {"replicas": replicas}}, deploy))
    for i in range(replicas):
        store.put(Kind.POD, _owned(pod(f"serve-7d9c8-{i}", 1, queue=None), rs))


def _placements(store: FakeCluster) -> list[str | None]:
    return [g["spec"].get("placement") for g in store.objects(Kind.POD_GROUP)]


@pytest.mark.parametrize(("annotations", "nodes", "placement"), [
    ({}, ["n0", "n1", "n2"], "spread"),  # the inference default: one replica per node
    ({"gpufleet.dev/placement": "binpack"}, ["n0", "n0", "n0"], "binpack"),  # the cluster's binpack stacks them
])
async def test_deployment_replicas_spread_unless_the_owner_says_binpack(
        emulator: ApiServerEmulator, annotations: dict[str, str], nodes: list[str], placement: str) -> None:
    store = emulator.store
    _deployment(store, annotations)
    async with running_over_http(emulator):
        await eventually(lambda: len(bound_pods(store)) == 3, what="replicas bound")
        assert sorted(bound_pods(store).values()) == nodes
        assert _placements(store) == [placement] * 3


async def test_bad_placement_annotation_warns_and_spreads(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    _deployment(store, {"gpufleet.dev/placement": "fast"})
    async with running_over_http(emulator):
        await eventually(lambda: len(bound_pods(store)) == 3, what="replicas bound, not held back")
        assert sorted(bound_pods(store).values()) == ["n0", "n1", "n2"]
        assert _placements(store) == ["spread"] * 3
        await eventually(lambda: any(e["reason"] == "BadAnnotation" for e in store.objects(Kind.EVENT)),
                         what="warning Event")
        warnings = [e for e in store.objects(Kind.EVENT) if e["reason"] == "BadAnnotation"]
        assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
        assert warnings[0]["regarding"]["kind"] == "Deployment"
        assert 'gpufleet.dev/placement: "fast" is not binpack or spread; spread is used' in warnings[0]["note"]
