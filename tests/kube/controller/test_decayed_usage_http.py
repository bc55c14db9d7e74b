"""The controller keeps each Queue's decayed usage (docs/semantics.md, "Fairness over time") and writes it
in the Queue's status, over HTTP against the API server emulator. The controller's clock is injected (its
time moves only when the test says; its sleeps are real, so cycles keep coming); nothing waits on it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpufleet.domain import Queue, QueueName
from gpufleet.kube.client.lightkube_api import connect
from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.decayed_usage import DecayedUsage
from gpufleet.kube.controller.loop import Controller, ControllerConfig
from gpufleet.kube.controller.metrics import ControllerMetrics
from gpufleet.testing.emulator import ApiServerEmulator

from .controller_objects import SetClock, bound_pods, eventually, node, pod, queue

START = 1_767_225_600.0  # 2026-01-01T00:00:00Z
HOUR = 3600.0


@contextlib.asynccontextmanager
async def running(emulator: ApiServerEmulator, clock: SetClock) -> AsyncIterator[Controller]:
    config = ControllerConfig(identity="c", min_interval=0.0, resync=0.02, concurrency=16, engine_in_thread=False)
    c = Controller(connect(server=emulator.url_text, field_manager="c", timeout=5.0), clock, config,
                   ControllerMetrics())
    c.binder.backoff = 0.001
    task = asyncio.create_task(c.run())
    try:
        await eventually(lambda: c.ready, what="informers synced")
        yield c
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await c.api.close()


def decayed(emulator: ApiServerEmulator, name: str) -> tuple[str | None, str | None]:
    status: dict[str, Any] = (emulator.store.object(Kind.QUEUE, "", name) or {}).get("status") or {}
    return (status.get("decayedUsage") or {}).get("nvidia.com/gpu"), status.get("decayedUsageTime")


@pytest.mark.asyncio
async def test_decayed_usage_is_written_grows_with_running_pods_and_survives_a_restart(
        emulator: ApiServerEmulator) -> None:
    store = emulator.store
    store.put(Kind.NODE, node("n0", 8))
    store.put(Kind.QUEUE, queue("team-a", 8))
    store.put(Kind.QUEUE, queue("team-b", 8))
    store.put(Kind.SCHEDULER_CONFIG, {"metadata": {"name": "default"}, "spec": {"fairShare": {"usageHalfLife": "1h"}}})
    clock = SetClock(START)
    async with running(emulator, clock) as c:
        store.put(Kind.POD, pod("a-1", 4, queue="team-a"))
        await eventually(lambda: len(bound_pods(store)) == 1, what="a-1 bound")
        await eventually(lambda: decayed(emulator, "team-a") == ("0", "2026-01-01T00:00:00Z"), what="written")
        clock.time = START + HOUR  # one half-life holding 4 GPUs: half of them
        await eventually(lambda: decayed(emulator, "team-a") == ("2", "2026-01-01T01:00:00Z"), what="grown")
        metric = 'gpufleet_queue_decayed_usage{queue="team-a",resource="nvidia.com/gpu"} 2.0'
        await eventually(lambda: metric in c.metrics.render().decode(), what="exported")
        assert decayed(emulator, "team-b") == ("0", "2026-01-01T01:00:00Z")  # nothing running: nothing
        clock.time = START + HOUR + 30  # within a minute of the last write: the status stays as it is
        await asyncio.sleep(0.2)
        assert decayed(emulator, "team-a") == ("2", "2026-01-01T01:00:00Z")
    clock.time = START + 2 * HOUR  # a new controller continues from the status: 2 * 1/2 + 4 * 1/2
    async with running(emulator, clock):
        await eventually(lambda: decayed(emulator, "team-a") == ("3", "2026-01-01T02:00:00Z"), what="continued")


def test_a_parent_holds_the_sum_of_its_children_and_off_means_nothing() -> None:
    queues = [Queue(QueueName("org")), Queue(QueueName("a"), parent=QueueName("org")),
              Queue(QueueName("b"), parent=QueueName("org"))]
    usage = {"a": {"nvidia.com/gpu": 4000}, "b": {"nvidia.com/gpu": 2000}}
    counters = DecayedUsage(write_every=0.0)
    counters.update(queues, usage, lambda name: None, HOUR, START)
    got = counters.update(queues, usage, lambda name: None, HOUR, START + HOUR)
    assert {n: dict(v.usage) for n, v in got.items()} == {
        "org": {"nvidia.com/gpu": 3000}, "a": {"nvidia.com/gpu": 2000}, "b": {"nvidia.com/gpu": 1000}}
    assert counters.update(queues, usage, lambda name: None, 0.0, START + 2 * HOUR) == {}
