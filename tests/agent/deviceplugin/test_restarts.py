"""Restarts: the kubelet's (its directory emptied, a new kubelet.sock) and the plugin's own."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from gpufleet.agent.deviceplugin import DevicePlugin, PollingWatcher
from gpufleet.agent.deviceplugin.api import pb

from .kubelet import WAIT, running_node, until

pytestmark = pytest.mark.asyncio

GPU = "nvidia.com/gpu"


async def test_a_kubelet_restart_is_followed_by_a_new_registration(tmp_path: Path) -> None:
    async with running_node(tmp_path) as node:
        await node.registered()
        await node.kubelet.restart()  # removes the plugin's sockets too
        assert not node.plugin.socket(GPU).exists()
        await node.clock.advance(1.0)  # the watcher looks once a second, on the clock
        again = await node.registered()
        assert sorted(again) == ["gpufleet.dev/mps-share", GPU]
        options = await node.stub(GPU).GetDevicePluginOptions(pb.Empty(), timeout=WAIT)
        assert options.get_preferred_allocation_available


async def test_nothing_happens_while_the_sockets_stay(tmp_path: Path) -> None:
    async with running_node(tmp_path) as node:
        await node.registered()
        await node.clock.advance(30.0)
        assert node.kubelet.requests.empty()
        assert node.plugin.registrations == 2


async def test_a_restarted_plugin_replaces_its_stale_socket_and_registers_again(tmp_path: Path) -> None:
    async with running_node(tmp_path) as node:
        await node.registered()
        node.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await node.task
        assert not node.plugin.socket(GPU).exists()  # a clean stop leaves no socket
        node.plugin.socket(GPU).write_text("stale")  # as if the plugin had been killed
        second = DevicePlugin(node.plugin.settings, node.gpus, node.cluster.client("device-plugin-2"), node.clock,
                              PollingWatcher(node.clock), node.directory)
        node.start_plugin(second)
        got = await node.registered()
        assert sorted(got) == ["gpufleet.dev/mps-share", GPU]
        options = await node.stub(GPU).GetDevicePluginOptions(pb.Empty(), timeout=WAIT)
        assert options.get_preferred_allocation_available


async def test_registration_is_retried_until_the_kubelet_answers(tmp_path: Path) -> None:
    async with running_node(tmp_path) as node:
        await node.registered()
        await node.kubelet.stop()  # gRPC removes kubelet.sock
        await node.clock.advance(1.0)  # the plugin sees kubelet.sock go, stops, and waits for a new one
        (node.directory / "kubelet.sock").write_text("not listening yet")
        await node.clock.advance(1.0)
        # Register fails on a socket nobody listens on: tried again every 5 s of the clock.
        await until(lambda: node.plugin.failed_registrations == 1)
        (node.directory / "kubelet.sock").unlink()
        await node.kubelet.start()
        await node.clock.advance(5.0)
        got = await node.registered()
        assert sorted(got) == ["gpufleet.dev/mps-share", GPU]
