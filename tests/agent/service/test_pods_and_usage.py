"""The pods on the node (for the usage export) over the HTTP emulator, and the loop feeding the export."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from gpufleet.agent.gpus import GpuUtilisation, ProcessUtilisation
from gpufleet.agent.service import AgentLoop
from gpufleet.agent.service.pods import PodsOnNode
from gpufleet.kube import Kind, RealClock, connect
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import VirtualClock

from .agent_fixtures import NODE, ScriptedReader, make_agent, node_object

pytestmark = pytest.mark.asyncio


def pod(name: str, node: str | None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "c"}], **({"nodeName": node} if node else {})}}


async def until(condition: Any) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not within 5 s")


async def test_pods_on_node_follow_the_watch_and_a_relist() -> None:
    async with ApiServerEmulator() as emulator:
        store = emulator.store
        store.put(Kind.POD, pod("here", NODE))
        store.put(Kind.POD, pod("elsewhere", "other"))
        api = connect(server=emulator.url_text, timeout=5.0)
        pods = PodsOnNode(api, NODE, RealClock())
        task = asyncio.create_task(pods.run())
        try:
            await until(lambda: [p["metadata"]["name"] for p in pods()] == ["here"])
            store.put(Kind.POD, pod("bound-later", None))
            store._patch(Kind.POD, "ml", "bound-later", {"spec": {"nodeName": NODE}})
            await until(lambda: len(pods()) == 2)
            store.delete(Kind.POD, "ml", "here")
            await until(lambda: [p["metadata"]["name"] for p in pods()] == ["bound-later"])
            await emulator.stop()  # an API server restart over compacted history: the watch resumes by a list
            store.compact()
            store.put(Kind.POD, pod("after-restart", NODE))
            await emulator.start()
            await until(lambda: len(pods()) == 2)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await api.close()


class RecordingUsage:
    def __init__(self) -> None:
        self.fed: list[tuple[int, int, list[str], str]] = []

    def update(self, gpus: Sequence[GpuUtilisation], processes: Sequence[ProcessUtilisation],
               pods: Sequence[Mapping[str, Any]], node_name: str, now: float) -> None:
        self.fed.append((len(gpus), len(processes), [p["metadata"]["name"] for p in pods], node_name))

    def render(self) -> bytes:
        return b"gpufleet_test 1\n"


async def test_each_poll_feeds_the_usage_export_with_the_pods_on_the_node() -> None:
    async with ApiServerEmulator() as emulator:
        emulator.store.put(Kind.NODE, node_object())
        agent: AgentLoop[Any] = make_agent(emulator, VirtualClock(), ScriptedReader)
        usage = RecordingUsage()
        agent.usage = usage
        agent.pods = lambda: (pod("p", NODE),)
        await agent.poll()
        await agent.poll()
        assert usage.fed == [(8, 0, ["p"], NODE)] * 2
        await agent.writer.api.close()
