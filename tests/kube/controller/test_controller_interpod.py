"""The controller honours inter-pod rules as replay does: it reads them through the same converters."""

from __future__ import annotations

import pytest

from gpufleet.kube.client.port import Kind
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import bound_pods, make_controller, node, pod, queue, running, settle, until


def two_nodes_and_a_queue() -> FakeCluster:
    cluster = FakeCluster()
    for i in range(2):
        cluster.put(Kind.NODE, node(f"n{i}"))
    cluster.put(Kind.QUEUE, queue("team-a", 8))
    return cluster


@pytest.mark.asyncio
async def test_replicas_with_hostname_anti_affinity_land_on_different_nodes() -> None:
    cluster = two_nodes_and_a_queue()
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


def _namespace(name: str, labels: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": labels}}


def _web_avoiding_team_ml_db() -> dict[str, object]:
    obj = pod("web", labels={"app": "web"})
    obj["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "namespaceSelector": {"matchLabels": {"team": "ml"}},
         "topologyKey": "kubernetes.io/hostname"}]}}
    return obj


@pytest.mark.asyncio
async def test_namespace_selector_matches_the_watched_namespace_labels() -> None:
    cluster = two_nodes_and_a_queue()
    cluster.put(Kind.NAMESPACE, _namespace("infra", {"team": "ml"}))
    # Another scheduler's db pod in infra fills half of n0 (binpack's choice); web must avoid it.
    cluster.put(Kind.POD, pod("db", 4, queue=None, namespace="infra", node_name="n0", phase="Running",
                              scheduler="default-scheduler", labels={"app": "db"}))
    cluster.put(Kind.POD, _web_avoiding_team_ml_db())
    controller = make_controller(cluster)
    async with running(controller):
        await until(lambda: "ml/web" in bound_pods(cluster), what="web bound")
    assert bound_pods(cluster)["ml/web"] == "n1"


def test_a_namespace_label_change_is_relevant() -> None:
    from gpufleet.kube.controller.convert import relevant_change

    before = {"metadata": {"name": "infra", "labels": {"team": "ml"}, "resourceVersion": "1"}}
    assert relevant_change(Kind.NAMESPACE, before, {"metadata": {"name": "infra", "labels": {"team": "web"}}})
    assert not relevant_change(Kind.NAMESPACE, before, {"metadata": {"name": "infra", "labels": {"team": "ml"},
                                                                    "resourceVersion": "2"}})
