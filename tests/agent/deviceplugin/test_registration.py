"""Each registration dials the kubelet afresh. gRPC shares subchannels between the channels of one address by
default: the plugin's next channel took over the failed subchannel of the previous attempt, still backing off
in real time, and failed at once with its old error although the kubelet listened again (under CPU load, most
runs of test_restarts.py's retry test failed so)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from gpufleet.agent.deviceplugin import DevicePlugin, PluginSettings, PollingWatcher
from gpufleet.testing import FakeCluster, FakeGpuReader, VirtualClock, fake_gpus

from .kubelet import NODE, WAIT, FakeKubelet

pytestmark = pytest.mark.asyncio


async def test_a_registration_after_a_failed_one_dials_the_new_kubelet(tmp_path: Path) -> None:
    socket = tmp_path / "kubelet.sock"
    socket.write_text("nobody listens")
    # another client of the same address keeps the shared subchannel, and its failure, alive meanwhile
    other = grpc.aio.insecure_channel(f"unix://{socket}")
    try:
        with pytest.raises(grpc.aio.AioRpcError):
            await other.unary_unary("/x/y")(b"", timeout=5)
        clock = VirtualClock()
        plugin = DevicePlugin(PluginSettings(node=NODE), FakeGpuReader(fake_gpus(1)),
                              FakeCluster(clock).client("p"), clock, PollingWatcher(clock), tmp_path)
        socket.unlink()
        kubelet = FakeKubelet(tmp_path)
        await kubelet.start()
        try:
            await asyncio.wait_for(plugin._register("nvidia.com/gpu"), WAIT)  # a failure waits on the clock
            assert plugin.failed_registrations == 0
        finally:
            await kubelet.stop()
    finally:
        await other.close()
