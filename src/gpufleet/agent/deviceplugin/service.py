"""The DevicePlugin gRPC service of one resource: ``nvidia.com/gpu`` or ``gpufleet.dev/mps-share``.

- ``ListAndWatch``: the node's GPUs (not in MIG mode) by UUID, Healthy or Unhealthy as the reader
  says, sent again on every health change; for ``mps-share``, :data:`SHARES_PER_GPU` virtual
  devices per GPU (``<UUID>::00`` ...) with their GPU's health.
- ``GetPreferredAllocation``: the devices gpufleet annotated on the pod being started.
- ``Allocate``: those devices, or a FAILED_PRECONDITION error naming the pod and the devices when
  the request contradicts the annotation (:mod:`.lookup` has the rules). Whole GPUs: the CDI device
  ``nvidia.com/gpu=<UUID>`` and its ``/dev/nvidia<minor>`` (``--device-list-strategy cdi``, with
  ``NVIDIA_VISIBLE_DEVICES=void`` so that a legacy NVIDIA runtime hook adds nothing from the
  image's environment), or ``NVIDIA_VISIBLE_DEVICES=<UUIDs>`` (``envvar``). MPS shares: the same
  for the pod's one GPU, plus that GPU's MPS pipe directory and shared memory only, and the MPS
  limits from the pod's annotations.
- ``PreStartContainer``: not required (the options say so); answers empty.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from gpufleet.agent.deviceplugin.api import HEALTHY, UNHEALTHY, pb, pb_grpc
from gpufleet.agent.deviceplugin.lookup import (
    SHARES_PER_GPU,
    Choice,
    Refusal,
    choose_for_allocate,
    choose_preferred,
    share_device_id,
)
from gpufleet.agent.deviceplugin.pods import NodePods
from gpufleet.agent.gpus import GpuInfo
from gpufleet.domain import GPU
from gpufleet.domain.wire import MPS_HOST_ROOT, MPS_PIPE_IN_CONTAINER, RESOURCE_MPS_SHARE

__all__ = ["DEVICE_LIST_STRATEGIES", "DevicePluginService", "Inventory", "PluginSettings", "container_response"]

log = logging.getLogger(__name__)

DEVICE_LIST_STRATEGIES = ("cdi", "envvar")
CDI_KIND = "nvidia.com/gpu"  # NVIDIA's CDI spec (nvidia-ctk cdi generate): nvidia.com/gpu=<UUID>
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"


@dataclass(frozen=True, slots=True)
class PluginSettings:
    node: str
    device_list_strategy: str = "cdi"
    mps_host_root: str = MPS_HOST_ROOT
    # How long a request that matches no pod waits for the pod informer to catch up (the kubelet
    # and the plugin learn of a binding from two watches) before it is refused; on the clock.
    lookup_grace_s: float = 2.0

    def __post_init__(self) -> None:
        if self.device_list_strategy not in DEVICE_LIST_STRATEGIES:
            raise ValueError(f"device list strategy must be one of {', '.join(DEVICE_LIST_STRATEGIES)}")


class Inventory:
    """The GPUs as last read, with a version that ListAndWatch streams wait on."""

    def __init__(self, gpus: Sequence[GpuInfo]) -> None:
        self.gpus = tuple(gpus)
        self.version = 0
        self._condition = asyncio.Condition()

    async def update(self, gpus: Sequence[GpuInfo]) -> None:
        async with self._condition:
            if tuple(gpus) != self.gpus:
                self.gpus = tuple(gpus)
                self.version += 1
                self._condition.notify_all()

    async def after(self, version: int) -> tuple[tuple[GpuInfo, ...], int]:
        """The GPUs once their version is past ``version``."""
        async with self._condition:
            await self._condition.wait_for(lambda: self.version > version)
            return self.gpus, self.version


def _devices(resource: str, gpus: Sequence[GpuInfo]) -> list[pb.Device]:
    out: list[pb.Device] = []
    for gpu in gpus:
        if gpu.mig_enabled:
            continue
        health = HEALTHY if gpu.healthy else UNHEALTHY
        if resource == GPU:
            out.append(pb.Device(ID=gpu.uuid, health=health))
        else:
            out.extend(pb.Device(ID=share_device_id(gpu.uuid, n), health=health) for n in range(SHARES_PER_GPU))
    return out


def container_response(resource: str, choice: Choice, settings: PluginSettings) -> pb.ContainerAllocateResponse:
    """What the kubelet gives the container: the pod's annotated GPUs (and, for a share, its MPS)."""
    gpus = choice.gpus
    response = pb.ContainerAllocateResponse()
    if settings.device_list_strategy == "cdi":
        response.cdi_devices.extend(pb.CDIDevice(name=f"{CDI_KIND}={gpu.uuid}") for gpu in gpus)
        response.devices.extend(pb.DeviceSpec(container_path=f"/dev/nvidia{gpu.minor}",
                                              host_path=f"/dev/nvidia{gpu.minor}", permissions="rw") for gpu in gpus)
        response.envs[VISIBLE_DEVICES] = "void"
    else:
        response.envs[VISIBLE_DEVICES] = ",".join(gpu.uuid for gpu in gpus)
    if resource == RESOURCE_MPS_SHARE:
        gpu_dir = f"{settings.mps_host_root.rstrip('/')}/gpu-{gpus[0].index}"
        response.mounts.extend([
            pb.Mount(container_path=MPS_PIPE_IN_CONTAINER, host_path=f"{gpu_dir}/pipe", read_only=False),
            pb.Mount(container_path="/dev/shm", host_path=f"{gpu_dir}/shm", read_only=False),
        ])
        response.envs["CUDA_MPS_PIPE_DIRECTORY"] = MPS_PIPE_IN_CONTAINER
        response.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(choice.pod.blocks)
        if choice.pod.mem_limit:
            response.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = choice.pod.mem_limit
    return response


class DevicePluginService(pb_grpc.DevicePluginServicer):
    def __init__(self, resource: str, settings: PluginSettings, inventory: Inventory, pods: NodePods) -> None:
        self.resource = resource
        self.settings = settings
        self.inventory = inventory
        self.pods = pods

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    async def ListAndWatch(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        gpus, version = self.inventory.gpus, self.inventory.version
        while True:
            yield pb.ListAndWatchResponse(devices=_devices(self.resource, gpus))
            gpus, version = await self.inventory.after(version)

    async def _decide(self, decide: Any) -> Any:
        """``decide()`` again while it refuses and the pods change within the grace period."""
        outcome = decide()
        deadline_left = self.settings.lookup_grace_s
        clock = self.pods.clock
        while isinstance(outcome, Refusal) and deadline_left > 0:
            start = clock.now()
            if not await self.pods.wait_change(deadline_left):
                break
            deadline_left -= clock.now() - start
            outcome = decide()
        return outcome

    async def _refuse(self, context: grpc.aio.ServicerContext[Any, Any], refusal: Refusal) -> None:
        log.warning("%s: %s", self.resource, refusal.message)
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"gpufleet device plugin: {refusal.message}")

    async def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.PreferredAllocationResponse:
        response = pb.PreferredAllocationResponse()
        for ask in request.container_requests:
            outcome = await self._decide(lambda ask=ask: choose_preferred(
                self.pods.pods(), self.inventory.gpus, self.settings.node, self.resource,
                list(ask.available_deviceIDs), list(ask.must_include_deviceIDs), ask.allocation_size))
            if isinstance(outcome, Refusal):
                await self._refuse(context, outcome)
            response.container_responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=outcome))
        return response

    async def Allocate(
        self, request: pb.AllocateRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.AllocateResponse:
        response = pb.AllocateResponse()
        for ask in request.container_requests:
            devices = list(ask.devices_ids)
            outcome = await self._decide(lambda devices=devices: choose_for_allocate(
                self.pods.pods(), self.inventory.gpus, self.settings.node, self.resource, devices))
            if isinstance(outcome, Refusal):
                await self._refuse(context, outcome)
            assert isinstance(outcome, Choice)
            self.pods.mark_served(outcome.pod, outcome.container, self.resource, devices)
            log.info("%s: pod %s container %s gets %s", self.resource, outcome.pod.ref, outcome.container,
                     ",".join(gpu.uuid for gpu in outcome.gpus))
            response.container_responses.append(container_response(self.resource, outcome, self.settings))
        return response

    async def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()
