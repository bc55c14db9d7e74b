"""The per-queue, per-project and health metrics (docs/metrics.md), read back from the /metrics text
with prometheus_client's parser after cycles over hand-made clusters."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.metrics import ControllerMetrics
from gpufleet.kube.controller.metrics_export import ALLOWED_LABELS
from gpufleet.kube.controller.metrics_queues import GpuUsageFacts, completion_seconds
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import (
    clock_of,
    informing,
    make_controller,
    node,
    pod,
    priority_class,
    queue,
    settle,
)
from .test_controller_projects import project

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(metrics: ControllerMetrics) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(found: Samples, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


def _cluster(cluster: FakeCluster) -> None:
    """n0: 8 GPUs, 6 held by team-b (quota 2: 4 borrowed, lent by team-a, quota 8, which holds 2);
    n1: 4 GPUs, 1 unhealthy, cordoned; a PriorityClass, a 2-GPU pod of team-a pending."""
    cluster.put(Kind.NODE, node("n0"))
    sick = node("n1", 4)
    sick["spec"]["unschedulable"] = True
    sick["metadata"]["annotations"] = {"gpufleet.dev/unhealthy-gpus": "3"}
    cluster.put(Kind.NODE, sick)
    cluster.put(Kind.QUEUE, queue("team-a", 8))
    cluster.put(Kind.QUEUE, queue("team-b", 2))
    cluster.put(Kind.PROJECT, project("vision", names=["ml"], queues=["team-a", "team-b"]))
    cluster.put(Kind.PRIORITY_CLASS, priority_class("train", 10))
    for i in range(6):
        cluster.put(Kind.POD, pod(f"b{i}", queue="team-b", node_name="n0", phase="Running", gpu_index=str(i)))
    cluster.put(Kind.POD, pod("a0", 2, queue="team-a", priority_class="train"))


@pytest.mark.asyncio
async def test_queue_figures_after_a_cycle() -> None:
    cluster = FakeCluster()
    _cluster(cluster)
    cluster.put(Kind.POD, pod("b9", 4, queue="team-b"))  # a borrower reclaims nothing: it waits
    controller = make_controller(cluster)
    async with informing(controller):
        await clock_of(cluster).advance(90)
        await controller.cycle()
    found = samples(controller.metrics)
    a, b = {"queue": "team-a", "project": "vision"}, {"queue": "team-b", "project": "vision"}
    assert value(found, "gpufleet_queue_allocated_gpus", **a) == 2.0
    assert value(found, "gpufleet_queue_allocated_gpus", **b) == 6.0
    assert value(found, "gpufleet_queue_quota_gpus", **a) == 8.0
    assert value(found, "gpufleet_queue_borrowed_gpus", **b) == 4.0
    assert value(found, "gpufleet_queue_lent_gpus", **a) == 4.0
    assert value(found, "gpufleet_queue_lent_gpus", **b) == 0.0
    assert value(found, "gpufleet_queue_pending_gangs", **b) == 1.0
    assert value(found, "gpufleet_queue_pending_gpus", **b) == 4.0
    assert value(found, "gpufleet_queue_pending_gpus", **a) == 0.0
    # no telemetry: no used or idle series at all (not NaN)
    assert not [k for k in found if k[0] in ("gpufleet_queue_used_gpus", "gpufleet_queue_idle_gpus")]
    # a0 waited 90 s (created at the clock's start), in the train PriorityClass
    wait = {"queue": "team-a", "project": "vision", "priority_class": "train"}
    assert value(found, "gpufleet_queue_wait_seconds_count", **wait) == 1.0
    assert value(found, "gpufleet_queue_wait_seconds_sum", **wait) == 90.0
    assert value(found, "gpufleet_queue_wait_seconds_bucket", **wait, le="60.0") == 0.0
    assert value(found, "gpufleet_queue_wait_seconds_bucket", **wait, le="300.0") == 1.0
    assert value(found, "gpufleet_gpus", health="unhealthy") == 1.0
    assert value(found, "gpufleet_gpus", health="healthy") == 11.0
    assert value(found, "gpufleet_nodes", state="cordoned") == 1.0
    assert value(found, "gpufleet_nodes", state="ready") == 1.0


@pytest.mark.asyncio
async def test_used_and_idle_gpus_come_from_telemetry() -> None:
    cluster = FakeCluster()
    _cluster(cluster)
    controller = make_controller(cluster)
    controller.gpu_usage = lambda now, bound: GpuUsageFacts({"ml/b0": 50.0, "ml/b1": 100.0, "ml/b2": 2.0, "ml/gone": 90.0},
                                                     idle=frozenset({"ml/b2", "ml/gone"}))
    async with informing(controller):
        await controller.cycle()
    found = samples(controller.metrics)
    b = {"queue": "team-b", "project": "vision"}
    assert value(found, "gpufleet_queue_used_gpus", **b) == pytest.approx(1.52)
    assert value(found, "gpufleet_queue_idle_gpus", **b) == 1.0
    assert value(found, "gpufleet_queue_used_gpus", queue="team-a", project="vision") == 0.0


@pytest.mark.asyncio
async def test_reclaims_count_with_the_gpu_seconds_their_victims_had_run() -> None:
    cluster = FakeCluster(graceful_eviction=True)
    _cluster(cluster)
    cluster.put(Kind.POD, pod("a1", 4, queue="team-a"))  # needs 4 of team-b's borrowed GPUs back
    controller = make_controller(cluster)
    async with informing(controller):
        await clock_of(cluster).advance(3600)
        first = await controller.cycle()
    assert len(first.decisions.evictions) == 4
    found = samples(controller.metrics)
    b = {"queue": "team-b", "project": "vision", "reason": "reclaim"}
    assert value(found, "gpufleet_queue_preemptions_total", **b) == 4.0
    assert value(found, "gpufleet_queue_preempted_gpu_seconds_total", **b) == 4 * 3600.0


@pytest.mark.asyncio
async def test_series_of_a_deleted_queue_are_removed() -> None:
    cluster = FakeCluster()
    _cluster(cluster)
    cluster.put(Kind.QUEUE, queue("team-c", 1))
    controller = make_controller(cluster)
    async with informing(controller):
        await controller.cycle()
        assert value(samples(controller.metrics), "gpufleet_queue_quota_gpus", queue="team-c", project="") == 1.0
        cluster.delete(Kind.QUEUE, "", "team-c")
        await settle()
        await controller.cycle()
    assert not [k for k in samples(controller.metrics) if ("queue", "team-c") in k[1]]


@pytest.mark.asyncio
async def test_a_pod_that_succeeds_is_one_completion_of_its_queue() -> None:
    cluster = FakeCluster()
    _cluster(cluster)
    controller = make_controller(cluster)
    async with informing(controller):
        await controller.cycle()
        obj = cluster.object(Kind.POD, "ml", "b0")
        assert obj is not None
        cluster.put(Kind.POD, {**obj, "status": {"phase": "Succeeded", "containerStatuses": [
            {"name": "main", "state": {"terminated": {"finishedAt": "2026-01-01T02:00:00Z"}}}]}})
        await settle()
    found = samples(controller.metrics)
    assert value(found, "gpufleet_queue_job_completion_seconds_count", queue="team-b", project="vision") == 1.0
    assert value(found, "gpufleet_queue_job_completion_seconds_sum", queue="team-b", project="vision") == 7200.0


def test_completion_only_on_the_change_to_succeeded() -> None:
    done: dict[str, Any] = {"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}, "status": {
        "phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {"finishedAt": "2026-01-01T00:01:00Z"}}}]}}
    running = {**done, "status": {"phase": "Running"}}
    assert completion_seconds(running, done) == 60.0
    assert completion_seconds(None, done) is None  # a first listing
    assert completion_seconds(done, done) is None
    assert completion_seconds(running, {**done, "metadata": {"creationTimestamp": "junk"}}) is None


@pytest.mark.asyncio
async def test_every_label_is_in_the_allowed_set_and_no_value_names_a_pod() -> None:
    cluster = FakeCluster(graceful_eviction=True)
    _cluster(cluster)
    cluster.put(Kind.POD, pod("a1", 4, queue="team-a"))
    controller = make_controller(cluster)
    controller.gpu_usage = lambda now, bound: GpuUsageFacts({"ml/b0": 50.0}, idle=frozenset({"ml/b0"}))
    async with informing(controller):
        await controller.cycle()
    controller.metrics.api_error("bind", 500)
    controller.metrics.evictions.labels("reclaim", "evicted").inc()
    found = samples(controller.metrics)
    names = {n for n, _ in found}
    assert {"gpufleet_queue_preemptions_total", "gpufleet_queue_idle_gpus", "gpufleet_gpus"} <= names
    pods = {o["metadata"]["name"] for o in cluster.objects(Kind.POD)}
    bounded = {"queue": {"team-a", "team-b"}, "project": {"vision", ""}, "priority_class": {"train", ""},
               "reason": {"reclaim", "preempt"}, "health": {"healthy", "unhealthy"},
               "state": {"ready", "not_ready", "cordoned"}, "resource": {"nvidia.com/gpu"}}
    for name, labels in found:
        assert {k for k, _ in labels} - {"le"} <= ALLOWED_LABELS, labels
        assert not {v for _, v in labels} & pods, labels
        if name.startswith(("gpufleet_queue_", "gpufleet_gpus", "gpufleet_nodes")):
            assert all(v in bounded[k] for k, v in labels if k != "le"), (name, labels)


def _page(at: float, util: dict[str, float]) -> Any:
    from gpufleet.telemetry import PodKey, PodUsage, TelemetryPage

    pods = {}
    for key, percent in util.items():
        namespace, _, name = key.partition("/")
        k = PodKey(namespace, name)
        pods[k] = PodUsage(k, at, ("GPU-1",), percent, None, None)
    return TelemetryPage("test", at, pods, len(pods))


def test_telemetry_usage_follows_allocations_and_finds_idle_pods() -> None:
    from gpufleet.kube.controller.metrics_usage import TelemetryUsage
    from gpufleet.telemetry import IdleSettings

    usage = TelemetryUsage(IdleSettings(threshold_percent=10, window_s=600, stale_after_s=120))
    assert usage.facts(0, {"ml/a", "ml/b"}) == GpuUsageFacts({}, frozenset())
    for t in range(0, 700, 60):
        usage.observe(_page(t, {"ml/a": 3.0, "ml/b": 80.0, "ml/other": 1.0}))
    facts = usage.facts(660, {"ml/a", "ml/b"})
    assert facts.util_percent["ml/a"] == 3.0 and facts.idle == frozenset({"ml/a"})
    assert usage.facts(660, {"ml/b"}).idle == frozenset()  # a released pod is forgotten
    assert usage.facts(1000, {"ml/b"}).util_percent == {}  # the last page is stale


@pytest.mark.asyncio
async def test_a_parent_sums_its_children_which_take_its_project() -> None:
    cluster = FakeCluster()
    _cluster(cluster)
    cluster.put(Kind.QUEUE, queue("org", 12))
    cluster.put(Kind.QUEUE, queue("org-x", 4, parent="org"))
    cluster.put(Kind.QUEUE, queue("org-y", 4, parent="org"))
    cluster.put(Kind.PROJECT, project("research", names=["lab"], queues=["org"]))
    cluster.put(Kind.POD, pod("x0", 3, queue="org-x", namespace="lab", node_name="n1", phase="Running",
                              gpu_index="0,1,2"))
    controller = make_controller(cluster)
    async with informing(controller):
        await controller.cycle()
    found = samples(controller.metrics)
    org, x = {"queue": "org", "project": "research"}, {"queue": "org-x", "project": "research"}
    assert value(found, "gpufleet_queue_leaf", **org) == 0.0
    assert value(found, "gpufleet_queue_leaf", **x) == 1.0
    assert value(found, "gpufleet_queue_allocated_gpus", **x) == 3.0
    assert value(found, "gpufleet_queue_allocated_gpus", **org) == 3.0


@pytest.mark.asyncio
async def test_a_replica_that_stops_leading_drops_its_queue_gauges() -> None:
    cluster = FakeCluster()
    _cluster(cluster)
    controller = make_controller(cluster)
    async with informing(controller):
        await controller.cycle()
    assert value(samples(controller.metrics), "gpufleet_queue_quota_gpus", queue="team-a", project="vision") == 8.0
    controller._on_leadership(False)
    found = samples(controller.metrics)
    assert not [k for k in found if k[0].startswith("gpufleet_queue_") and k[0].endswith("_gpus")]
    assert value(found, "gpufleet_queue_wait_seconds_count", queue="team-a", project="vision",
                 priority_class="train") == 1.0  # histograms stay
