"""The device plugin's life on the node: serve each resource on its socket, register, re-register.

For each resource (:data:`RESOURCES`) the plugin serves its DevicePlugin service on
``<kubelet dir>/<socket>`` and calls the kubelet's ``Registration.Register`` on
``<kubelet dir>/kubelet.sock``. A kubelet that restarts removes every socket of the directory and
makes a new ``kubelet.sock``: the :class:`PathWatcher` (injected; :class:`PollingWatcher` on the
clock in production) reports that one of the plugin's sockets or ``kubelet.sock`` was removed or
replaced, and the plugin stops its servers, waits for ``kubelet.sock``, serves and registers again.
A plugin that starts removes a stale socket of its own name first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import grpc

from gpufleet.agent.deviceplugin.api import API_VERSION, KUBELET_SOCKET, pb, pb_grpc
from gpufleet.agent.deviceplugin.paths import DEFAULT_KUBELET_DIR
from gpufleet.agent.deviceplugin.pods import NodePods
from gpufleet.agent.deviceplugin.service import DevicePluginService, Inventory, PluginSettings
from gpufleet.agent.gpus import GpuReader
from gpufleet.domain import GPU
from gpufleet.domain.wire import RESOURCE_MPS_SHARE
from gpufleet.kube import Clock, ClusterApi

__all__ = ["DEFAULT_KUBELET_DIR", "RESOURCES", "DevicePlugin", "PathWatcher", "PollingWatcher"]

log = logging.getLogger(__name__)

# resource -> the socket the plugin serves it on, in the kubelet's device plugins directory
RESOURCES: Mapping[str, str] = {GPU: "gpufleet-gpu.sock", RESOURCE_MPS_SHARE: "gpufleet-mps-share.sock"}
REGISTER_TIMEOUT_S = 10.0
# Each registration dials the kubelet afresh: gRPC shares subchannels between channels of the same target by
# default, and a new channel would take over the failed one of the previous attempt, still backing off in
# real time, and fail at once with its old error although the kubelet listens again.
REGISTER_CHANNEL_OPTIONS = (("grpc.use_local_subchannel_pool", 1),)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return (stat.st_dev, stat.st_ino)


class PathWatcher(Protocol):
    async def replaced(self, paths: Sequence[Path]) -> Path:
        """Return the first of ``paths`` removed or replaced after the call began."""
        ...

    async def exists(self, path: Path) -> None:
        """Return once ``path`` exists."""
        ...


class PollingWatcher:
    """Looks at the paths every ``interval`` seconds of ``clock`` (tests advance a virtual clock)."""

    def __init__(self, clock: Clock, interval: float = 1.0) -> None:
        self.clock = clock
        self.interval = interval

    async def replaced(self, paths: Sequence[Path]) -> Path:
        before = {path: _identity(path) for path in paths}
        while True:
            await self.clock.sleep(self.interval)
            for path in paths:
                if _identity(path) != before[path]:
                    return path

    async def exists(self, path: Path) -> None:
        while _identity(path) is None:
            await self.clock.sleep(self.interval)


class DevicePlugin:
    """Both resources of one node, from their GPUs (``reader``) and pods (``api``)."""

    def __init__(self, settings: PluginSettings, reader: GpuReader, api: ClusterApi, clock: Clock,
                 watcher: PathWatcher, kubelet_dir: str | Path = DEFAULT_KUBELET_DIR,
                 retry_interval: float = 5.0) -> None:
        self.settings = settings
        self.reader = reader
        self.clock = clock
        self.watcher = watcher
        self.kubelet_dir = Path(kubelet_dir)
        self.retry_interval = retry_interval
        self.inventory = Inventory(reader.read())
        self.pods = NodePods(api, settings.node, clock)
        self.services = {resource: DevicePluginService(resource, settings, self.inventory, self.pods)
                         for resource in RESOURCES}
        self._servers: list[grpc.aio.Server] = []
        self.registrations = 0  # Register calls the kubelet accepted
        self.failed_registrations = 0  # and those it did not answer or refused

    def socket(self, resource: str) -> Path:
        return self.kubelet_dir / RESOURCES[resource]

    async def run(self) -> None:
        """Serve until cancelled."""
        tasks = [asyncio.create_task(self.pods.run(), name="pods"),
                 asyncio.create_task(self._follow_health(), name="gpu-health")]
        try:
            await self.pods.synced.wait()
            while True:
                await self._serve_and_register()
                paths = [self.socket(resource) for resource in RESOURCES] + [self.kubelet_dir / KUBELET_SOCKET]
                gone = await self.watcher.replaced(paths)
                log.info("%s was removed or replaced (the kubelet restarted?): registering again", gone)
                await self._stop_servers()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._stop_servers()
            with contextlib.suppress(asyncio.CancelledError):
                await self.pods.flush()

    async def _follow_health(self) -> None:
        while True:
            await self.reader.changed()
            gpus = self.reader.read()
            log.info("GPU health changed: unhealthy %s", ",".join(g.uuid for g in gpus if not g.healthy) or "none")
            await self.inventory.update(gpus)

    async def _serve_and_register(self) -> None:
        await self.watcher.exists(self.kubelet_dir / KUBELET_SOCKET)
        for resource, service in self.services.items():
            path = self.socket(resource)
            path.unlink(missing_ok=True)  # a stale socket of a plugin that stopped without cleaning up
            server = grpc.aio.server()
            pb_grpc.add_DevicePluginServicer_to_server(service, server)
            server.add_insecure_port(f"unix://{path}")
            await server.start()
            self._servers.append(server)
        for resource in RESOURCES:
            await self._register(resource)

    async def _register(self, resource: str) -> None:
        request = pb.RegisterRequest(
            version=API_VERSION, endpoint=RESOURCES[resource], resource_name=resource,
            options=pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True))
        while True:
            try:
                async with grpc.aio.insecure_channel(f"unix://{self.kubelet_dir / KUBELET_SOCKET}",
                                                     options=REGISTER_CHANNEL_OPTIONS) as channel:
                    await pb_grpc.RegistrationStub(channel).Register(request, timeout=REGISTER_TIMEOUT_S)
            except grpc.aio.AioRpcError as err:
                self.failed_registrations += 1
                log.warning("the kubelet refused to register %s (%s: %s); trying again in %.0fs", resource,
                            err.code().name, err.details(), self.retry_interval)
                await self.clock.sleep(self.retry_interval)
                continue
            self.registrations += 1
            log.info("registered %s with the kubelet (socket %s)", resource, self.socket(resource))
            return

    async def _stop_servers(self) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            await server.stop(grace=None)
        if servers:  # leave no socket behind for the kubelet to dial
            for resource in RESOURCES:
                self.socket(resource).unlink(missing_ok=True)
