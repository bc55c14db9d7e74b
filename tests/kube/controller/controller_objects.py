"""Kubernetes objects for the controller's tests, as an API server would hold them, and helpers
to run a controller against the in-memory fake."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from gpufleet.kube.client.lightkube_api import connect
from gpufleet.kube.client.port import Kind, RealClock
from gpufleet.kube.controller.loop import Controller, ControllerConfig
from gpufleet.kube.controller.metrics import ControllerMetrics
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import FakeCluster, VirtualClock

GPU = "nvidia.com/gpu"


def node(name: str, gpus: int = 8, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)},
                   "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)}},
    }


def pod(
    name: str,
    gpus: int = 1,
    *,
    queue: str | None = "team-a",
    namespace: str = "ml",
    group: str | None = None,
    priority_class: str | None = None,
    node_name: str | None = None,
    phase: str = "Pending",
    scheduler: str = "gpufleet",
    labels: dict[str, str] | None = None,
    created: str = "2026-01-01T00:00:00Z",
    gpu_index: str | None = None,
    blocks: int | None = None,
) -> dict[str, Any]:
    all_labels = dict(labels or {})
    if queue:
        all_labels["gpufleet.dev/queue"] = queue
    if group:
        all_labels["gpufleet.dev/pod-group"] = group
    annotations: dict[str, str] = {}
    if gpu_index is not None:
        annotations["gpufleet.dev/gpu-index"] = gpu_index
    if blocks is not None:
        annotations["gpufleet.dev/gpu-blocks"] = str(blocks)
    limits = {GPU: str(gpus)} if gpus else {}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "image": "trainer:1",
                        "resources": {"limits": limits, "requests": {"cpu": "1", "memory": "1Gi", **limits}}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_name:
        spec["nodeName"] = node_name
    status: dict[str, Any] = {"phase": phase}
    if phase == "Running":
        status["startTime"] = created
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": all_labels, "annotations": annotations,
                     "creationTimestamp": created},
        "spec": spec,
        "status": status,
    }


def queue(name: str, quota: int | None = None, *, parent: str | None = None, limit: int | None = None,
          reclaim: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"preemption": {"reclaimBorrowed": reclaim}}
    if parent:
        spec["parent"] = parent
    resource: dict[str, str] = {}
    if quota is not None:
        resource["quota"] = str(quota)
    if limit is not None:
        resource["limit"] = str(limit)
    if resource:
        spec["resources"] = {GPU: resource}
    return {"metadata": {"name": name}, "spec": spec}


def pod_group(name: str, min_member: int, *, namespace: str = "ml", queue: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member}
    if queue:
        spec["queue"] = queue
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"metadata": {"name": name}, "value": value}


def pdb(name: str, match: dict[str, str], *, namespace: str = "ml", min_available: int | str = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": match}}}


def small_cluster(cluster: FakeCluster, nodes: int = 2, pending: int = 3) -> None:
    """Two 8-GPU nodes, queues team-a (quota 8) and team-b (quota 8), ``pending`` 1-GPU pods of team-a."""
    for i in range(nodes):
        cluster.put(Kind.NODE, node(f"n{i}"))
    cluster.put(Kind.QUEUE, queue("team-a", 8))
    cluster.put(Kind.QUEUE, queue("team-b", 8))
    for i in range(pending):
        cluster.put(Kind.POD, pod(f"p{i}"))


def make_controller(
    cluster: FakeCluster,
    identity: str = "controller",
    *,
    lease: Any = None,
    min_interval: float = 0.0,
    **options: Any,
) -> Controller:
    config = ControllerConfig(identity=identity, lease=lease, min_interval=min_interval, engine_in_thread=False,
                              **options)
    return Controller(cluster.client(identity), cluster.clock, config)


async def settle(rounds: int = 200) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


async def until(condition: Callable[[], bool], rounds: int = 5000, what: str = "condition") -> None:
    """Let the loop run until ``condition`` holds (no real time passes)."""
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{what} never became true")


@contextlib.asynccontextmanager
async def running(controller: Controller) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(controller.run())
    try:
        await until(lambda: controller.ready, what="informers synced")
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def bound_pods(cluster: FakeCluster) -> dict[str, str]:
    out: dict[str, str] = {}
    for obj in cluster.objects(Kind.POD):
        node_name = (obj.get("spec") or {}).get("nodeName")
        if node_name:
            out[f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"] = node_name
    return out


def clock_of(cluster: FakeCluster) -> VirtualClock:
    assert isinstance(cluster.clock, VirtualClock)
    return cluster.clock


async def eventually(condition: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    """Wait in real time (a controller over HTTP) until ``condition`` holds. The timeout only bounds a
    failure: a loaded 2-core CI machine can take several seconds where an idle one takes 0.1 s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def informing(controller: Controller, real_time: bool = False) -> AsyncIterator[None]:
    """Only the informers (cycles are run by hand with ``await controller.cycle()``); ``real_time``:
    over HTTP, where syncing takes real time."""
    from gpufleet.kube.controller.informers import INFORMED_KINDS, Informer

    tasks = [asyncio.create_task(Informer(controller.api, k, controller.cache, controller.clock).run())
             for k in INFORMED_KINDS]
    try:
        if real_time:
            await eventually(lambda: controller.ready, what="informers synced")
        else:
            await until(lambda: controller.ready, what="informers synced")
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def events(cluster: FakeCluster, reason: str | None = None, pod_name: str | None = None) -> list[dict[str, Any]]:
    return [e for e in cluster.objects(Kind.EVENT)
            if (reason is None or e["reason"] == reason) and (pod_name is None or e["regarding"]["name"] == pod_name)]


async def drive(cluster: FakeCluster, awaitable: Any, step: float = 0.05, limit: int = 2000) -> Any:
    """Await ``awaitable`` while moving the virtual clock (retries back off on it)."""
    task = asyncio.ensure_future(awaitable)
    clock = clock_of(cluster)
    for _ in range(limit):
        if task.done():
            return task.result()
        await clock.advance(step)
    task.cancel()
    raise AssertionError("did not finish")


# --- the controller over HTTP against the API server emulator (volumes, DRA) -------------------------


def http_controller(emulator: Any) -> Controller:
    """A controller on ``emulator`` (an ApiServerEmulator) through the real lightkube adapter, cycles by hand."""
    from gpufleet.kube.client.lightkube_api import connect
    from gpufleet.kube.client.port import RealClock
    from gpufleet.kube.controller.metrics import ControllerMetrics

    config = ControllerConfig(identity="c", min_interval=0.0, concurrency=16, engine_in_thread=False)
    c = Controller(connect(server=emulator.url_text, field_manager="c", timeout=5.0), RealClock(), config,
                   ControllerMetrics())
    c.binder.backoff = 0.001
    return c


@contextlib.asynccontextmanager
async def informing_http(c: Controller) -> AsyncIterator[None]:
    """Only the informers (cycles are run by hand), then the connection closed."""
    try:
        async with informing(c, real_time=True):
            yield
    finally:
        await c.api.close()


async def caught_up(c: Controller, store: FakeCluster) -> None:
    """Wait until the controller's cache shows every object as the store holds it."""
    from gpufleet.kube.controller.informers import INFORMED_KINDS

    def same() -> bool:
        return all(
            (c.cache.get(kind, *key) or {}).get("metadata", {}).get("resourceVersion") == obj["metadata"][
                "resourceVersion"]
            for kind in INFORMED_KINDS for key, obj in store._stores[kind].objects.items()
        )
    await eventually(same, what="the cache caught up")


class SetClock(RealClock):
    """Real sleeps, and a time the test sets."""

    def __init__(self, now: float) -> None:
        self.time = now

    def now(self) -> float:
        return self.time


@contextlib.asynccontextmanager
async def running_over_http(emulator: ApiServerEmulator, clock: RealClock | None = None,
                            **options: Any) -> AsyncIterator[Controller]:
    """The real controller against the API server emulator, over HTTP, once its informers (the
    pod-grouper's too) have synced; ``clock``: its clock (default: the real one)."""
    config = ControllerConfig(identity="c", min_interval=0.0, concurrency=16, engine_in_thread=False, **options)
    c = Controller(connect(server=emulator.url_text, field_manager="c", timeout=5.0), clock or RealClock(), config,
                   ControllerMetrics())
    c.binder.backoff = 0.001
    task = asyncio.create_task(c.run())
    try:
        await eventually(lambda: c.ready and (c.grouper is None or c.grouper.synced), what="informers synced")
        yield c
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await c.api.close()
