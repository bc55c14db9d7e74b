"""A fake kubelet for the device plugin's tests: a real gRPC server on ``kubelet.sock`` in a temporary
directory, implementing ``Registration`` with the generated messages, and the test's side of the
DevicePlugin calls (the test acts as the kubelet's device manager)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from gpufleet.agent.deviceplugin import DevicePlugin, PluginSettings, PollingWatcher
from gpufleet.agent.deviceplugin.api import pb, pb_grpc
from gpufleet.domain import ANNOTATION_GPU_BLOCKS, ANNOTATION_GPU_INDEX, ANNOTATION_MPS_MEM_LIMIT
from gpufleet.domain.wire import RESOURCE_MPS_SHARE
from gpufleet.kube import Kind
from gpufleet.testing import FakeCluster, FakeGpuReader, VirtualClock, fake_gpus

NODE = "gpu-node-1"
WAIT = 10.0  # a safety net for awaiting events: tests never sleep


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run (gRPC's I/O included) until ``condition`` holds; WAIT is only a safety net."""

    async def spin() -> None:
        while not condition():
            await asyncio.sleep(0)

    await asyncio.wait_for(spin(), WAIT)


class FakeKubelet(pb_grpc.RegistrationServicer):
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.requests: asyncio.Queue[pb.RegisterRequest] = asyncio.Queue()
        self.server: grpc.aio.Server | None = None
        self.accepted = 0  # Register calls answered, over restarts

    async def Register(self, request: pb.RegisterRequest, context: Any) -> pb.Empty:
        await self.requests.put(request)
        self.accepted += 1
        return pb.Empty()

    async def start(self) -> None:
        self.server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{self.directory / 'kubelet.sock'}")
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=None)
            self.server = None

    async def restart(self) -> None:
        """What a kubelet restart does to the directory: every socket removed, a new kubelet.sock."""
        await self.stop()
        for path in self.directory.iterdir():
            path.unlink()
        self.requests = asyncio.Queue()
        await self.start()

    async def registered(self, count: int = 2) -> dict[str, pb.RegisterRequest]:
        got: dict[str, pb.RegisterRequest] = {}
        while len(got) < count:
            request = await asyncio.wait_for(self.requests.get(), WAIT)
            got[request.resource_name] = request
        return got


@dataclass
class Node:
    """One node: the fake kubelet, the plugin under test, its GPUs, pods and clock."""

    directory: Path
    kubelet: FakeKubelet
    cluster: FakeCluster
    clock: VirtualClock
    gpus: FakeGpuReader
    plugin: DevicePlugin
    task: asyncio.Task[None]
    channels: list[grpc.aio.Channel] = field(default_factory=list)
    accepted_before: int = 0  # the kubelet's accepted registrations before this plugin started

    def stub(self, resource: str) -> pb_grpc.DevicePluginAsyncStub:
        channel = grpc.aio.insecure_channel(f"unix://{self.plugin.socket(resource)}")
        self.channels.append(channel)
        return pb_grpc.DevicePluginStub(channel)

    async def registered(self) -> dict[str, pb.RegisterRequest]:
        """The next registration of both resources, once the plugin has seen the kubelet's answers
        (and so watches the sockets)."""
        got = await self.kubelet.registered()
        await until(lambda: self.plugin.registrations >= self.kubelet.accepted - self.accepted_before)
        return got

    def start_plugin(self, plugin: DevicePlugin) -> None:
        self.plugin = plugin
        self.accepted_before = self.kubelet.accepted
        self.task = asyncio.create_task(plugin.run())

    def uuid(self, index: int) -> str:
        return self.gpus.read()[index].uuid

    def add_pod(self, name: str, *, gpus: int = 0, shares: int = 0, index: str | None = None,
                blocks: str | None = None, mem_limit: str | None = None, node: str = NODE,
                scheduler: str = "gpufleet", phase: str = "Pending", containers: int = 1) -> None:
        annotations: dict[str, str] = {}
        if index is not None:
            annotations[ANNOTATION_GPU_INDEX] = index
        if blocks is not None:
            annotations[ANNOTATION_GPU_BLOCKS] = blocks
        if mem_limit is not None:
            annotations[ANNOTATION_MPS_MEM_LIMIT] = mem_limit
        limits = {"nvidia.com/gpu": str(gpus)} if gpus else {RESOURCE_MPS_SHARE: str(shares)} if shares else {}
        self.cluster.put(Kind.POD, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team-a", "annotations": annotations},
            "spec": {"schedulerName": scheduler, "nodeName": node,
                     "containers": [{"name": f"c{i}", "image": "cuda", "resources": {"limits": limits}}
                                    for i in range(containers)]},
            "status": {"phase": phase},
        })

    async def settle(self) -> None:
        """Let the plugin's informer take in what the test put in the cluster."""
        await self.clock.advance(0)


@contextlib.asynccontextmanager
async def running_node(tmp_path: Path, gpu_count: int = 4, *, strategy: str = "cdi",
                       grace: float = 0.0) -> AsyncIterator[Node]:
    directory = tmp_path / "device-plugins"
    directory.mkdir()
    kubelet = FakeKubelet(directory)
    await kubelet.start()
    clock = VirtualClock()
    cluster = FakeCluster(clock)
    reader = FakeGpuReader(fake_gpus(gpu_count))
    settings = PluginSettings(node=NODE, device_list_strategy=strategy, mps_host_root="/run/gpufleet/mps",
                              lookup_grace_s=grace)
    plugin = DevicePlugin(settings, reader, cluster.client("device-plugin"), clock, PollingWatcher(clock),
                          directory)
    task = asyncio.create_task(plugin.run())
    node = Node(directory, kubelet, cluster, clock, reader, plugin, task)
    try:
        yield node
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for channel in node.channels:
            await channel.close()
        await kubelet.stop()  # what is left is collected on this loop by conftest's fixture
