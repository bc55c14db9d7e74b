"""The pods on the node (for the usage export) over the HTTP emulator, and the loop feeding the export."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from gpufleet.agent.gpus import GpuInfo, GpuUtilisation, ProcessUtilisation
from gpufleet.agent.service.pods import PodsOnNode
from gpufleet.kube import ApiError, FieldSelector, Kind, RealClock, connect
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import VirtualClock

from .agent_fixtures import NODE, Opener, fake_nvml, make_agent, node_object

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
        self.fed: list[tuple[int, int, int, list[str]]] = []

    def update(self, gpus: Sequence[GpuUtilisation], processes: Sequence[ProcessUtilisation],
               devices: Sequence[GpuInfo], pods: Sequence[Mapping[str, Any]], now: float) -> None:
        self.fed.append((len(gpus), len(processes), len(devices), [p["metadata"]["name"] for p in pods]))

    def clear(self, now: float) -> None:
        self.fed.append((0, 0, 0, []))


async def test_each_poll_feeds_the_usage_export_with_the_pods_on_the_node() -> None:
    async with ApiServerEmulator() as emulator:
        emulator.store.put(Kind.NODE, node_object())
        usage = RecordingUsage()
        agent = make_agent(emulator, VirtualClock(), Opener(fake_nvml()), usage=usage,
                           pods=lambda: (pod("p", NODE),))
        await agent.poll()
        await agent.poll()
        assert usage.fed == [(8, 0, 8, ["p"])] * 2
        await agent.writer.api.close()


async def test_the_api_server_sends_only_this_nodes_pods() -> None:
    """The field selector is applied by the API server (the emulator as a real one): a list and a
    watch of ``spec.nodeName=<node>`` carry no other node's pod; a field it cannot select on is 400."""
    async with ApiServerEmulator() as emulator:
        store = emulator.store
        store.put(Kind.POD, pod("here", NODE))
        store.put(Kind.POD, pod("elsewhere", "other"))
        api = connect(server=emulator.url_text, timeout=5.0)
        mine = FieldSelector.equals("spec.nodeName", NODE)
        try:
            listed = await api.list(Kind.POD, mine)
            assert [p["metadata"]["name"] for p in listed.items] == ["here"]
            assert [p["metadata"]["name"] for p in (await api.list(Kind.POD, FieldSelector.parse(
                f"spec.nodeName!={NODE}"))).items] == ["elsewhere"]
            seen: list[str] = []

            async def watch() -> None:
                async for event in api.watch(Kind.POD, listed.resource_version, mine):
                    seen.append(event.object["metadata"]["name"])

            task = asyncio.create_task(watch())
            store.put(Kind.POD, pod("also-elsewhere", "other"))
            store.put(Kind.POD, pod("new-here", NODE))
            await until(lambda: seen == ["new-here"])
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            with pytest.raises(ApiError) as refused:
                await api.list(Kind.POD, FieldSelector.equals("spec.containers", "x"))
            assert refused.value.status == 400 and "field label not supported" in str(refused.value)
        finally:
            await api.close()


async def test_pods_on_node_asks_with_its_field_selector() -> None:
    class Recording:
        def __init__(self, api: Any) -> None:
            self.api, self.asked = api, []

        async def list(self, kind: Kind, field_selector: FieldSelector | None = None) -> Any:
            self.asked.append(("list", field_selector))
            return await self.api.list(kind, field_selector)

        def watch(self, kind: Kind, version: str, field_selector: FieldSelector | None = None) -> Any:
            self.asked.append(("watch", field_selector))
            return self.api.watch(kind, version, field_selector)

    async with ApiServerEmulator() as emulator:
        api = connect(server=emulator.url_text, timeout=5.0)
        recording = Recording(api)
        pods = PodsOnNode(recording, NODE, RealClock())  # type: ignore[arg-type]
        task = asyncio.create_task(pods.run())
        await until(lambda: len(recording.asked) == 2)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
    assert recording.asked == [("list", FieldSelector.equals("spec.nodeName", NODE)),
                               ("watch", FieldSelector.equals("spec.nodeName", NODE))]
