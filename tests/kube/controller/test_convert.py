"""The controller sees a cluster as `gpufleet replay` sees a snapshot of it: same decisions."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from gpufleet.adapters.k8s_yaml import load_snapshot_text
from gpufleet.adapters.k8s_yaml_writer import snapshot_to_documents
from gpufleet.bench.shapes import make_shape
from gpufleet.engine import schedule
from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.convert import Overlay, build_snapshot, label_selector_matches, relevant_change
from gpufleet.kube.inspect.snapshot import read_cluster
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import informing, make_controller, node, pod

_KINDS = {k.kind: k for k in Kind}


def _load(cluster: FakeCluster, documents: Iterable[dict[str, Any]]) -> None:
    for doc in documents:
        cluster.put(_KINDS[doc["kind"]], doc)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", ["basic", "gang-small", "preemption", "topology"])
async def test_controller_and_replay_of_a_snapshot_decide_the_same(shape: str) -> None:
    cluster = FakeCluster()
    _load(cluster, snapshot_to_documents(make_shape(shape, scale=0.02)))
    cluster.put(Kind.POD, pod("stray", scheduler="default-scheduler", node_name=None))  # not ours, not bound
    controller = make_controller(cluster)
    async with informing(controller):
        view = controller.snapshot()
    assert not view.problems and not view.rejected
    from_controller = schedule(view.snapshot)
    # what `gpufleet snapshot` reads through the same port
    replayed = schedule(load_snapshot_text((await read_cluster(cluster.client("snapshot"))).to_yaml(), "snapshot.yaml"))
    assert from_controller.bindings == replayed.bindings
    assert from_controller.evictions == replayed.evictions
    assert from_controller.pending == replayed.pending
    assert from_controller.bindings or from_controller.pending
    assert bool(from_controller.evictions) == (shape == "preemption")


def test_overlay_places_in_flight_pods_and_hides_evicted_ones() -> None:
    from gpufleet.domain import Binding, NodeName, PodKey
    from gpufleet.kube.controller.convert import convert_object

    pods = [convert_object(Kind.POD, pod("a")), convert_object(Kind.POD, pod("v", node_name="n0", phase="Running"))]
    view = build_snapshot(
        {Kind.NODE: [convert_object(Kind.NODE, node("n0"))], Kind.POD: pods},
        Overlay(placed={PodKey("ml/a"): Binding(PodKey("ml/a"), NodeName("n0"), (3,))}, gone=frozenset({"ml/v"})),
    )
    assert set(view.pods) == {"ml/a"}
    placed = view.pods[PodKey("ml/a")]
    assert placed.node_name == "n0" and placed.gpu_index == (3,)


def test_relevant_changes() -> None:
    a = node("n0")
    heartbeat = {**a, "status": {**a["status"], "conditions": [{"type": "Ready"}]}}
    assert not relevant_change(Kind.NODE, a, heartbeat)
    assert relevant_change(Kind.NODE, a, {**a, "spec": {"unschedulable": True}})
    other = pod("x", scheduler="default-scheduler")
    assert not relevant_change(Kind.POD, None, other)  # a pending pod of another scheduler
    assert relevant_change(Kind.POD, other, {**other, "spec": {**other["spec"], "nodeName": "n0"}})
    q = {"metadata": {"name": "q"}, "spec": {}}
    assert not relevant_change(Kind.QUEUE, q, {**q, "status": {"usage": {}}})
    assert relevant_change(Kind.QUEUE, q, {**q, "spec": {"weight": 2}})


def test_label_selector() -> None:
    labels = {"app": "web", "tier": "1"}
    assert label_selector_matches({"matchLabels": {"app": "web"}}, labels)
    assert not label_selector_matches({"matchLabels": {"app": "db"}}, labels)
    assert label_selector_matches({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["1"]}]}, labels)
    assert not label_selector_matches({"matchExpressions": [{"key": "x", "operator": "Exists"}]}, labels)
    assert not label_selector_matches(None, labels)


def test_the_fast_relabel_equals_dataclasses_replace() -> None:
    """The snapshot's relabel of grouped pods must be exactly ``dataclasses.replace``: every field
    copied, the group label set, and no ``__post_init__`` a copy would skip."""
    import dataclasses as _dc

    from gpufleet.domain import Pod as _Pod
    from gpufleet.kube.controller.convert import _with_group_label

    assert not hasattr(_Pod, "__post_init__")
    pod = _Pod("ml", "p", labels={"a": "b"}, requests={"nvidia.com/gpu": 1000}, priority=5, gpu_index=(1, 2))
    relabelled = _with_group_label(pod, "g")
    assert relabelled == _dc.replace(pod, group_label="g") and relabelled is not pod
    assert pod.group_label is None
