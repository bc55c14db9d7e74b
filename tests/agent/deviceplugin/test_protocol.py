"""The device plugin against a fake kubelet: a real gRPC server on a unix socket, the generated messages."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import pytest

from gpufleet.agent.deviceplugin.api import pb
from gpufleet.domain.wire import ANNOTATION_DEVICES_ALLOCATED, RESOURCE_MPS_SHARE
from gpufleet.kube import Kind

from .kubelet import NODE, WAIT, Node, running_node, until

pytestmark = pytest.mark.asyncio

GPU = "nvidia.com/gpu"
U = "GPU-00000000-0000-0000-0000-00000000000"  # + index: fake_gpus' UUIDs


async def allocate(node: Node, resource: str, devices: list[str]) -> pb.ContainerAllocateResponse:
    request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=devices)])
    response = await node.stub(resource).Allocate(request, timeout=WAIT)
    assert len(response.container_responses) == 1
    return response.container_responses[0]


async def refused(node: Node, resource: str, devices: list[str]) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await allocate(node, resource, devices)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    return str(info.value.details())


async def preferred(node: Node, resource: str, available: list[str], size: int) -> list[str]:
    request = pb.PreferredAllocationRequest(container_requests=[pb.ContainerPreferredAllocationRequest(
        available_deviceIDs=available, allocation_size=size)])
    response = await node.stub(resource).GetPreferredAllocation(request, timeout=WAIT)
    return list(response.container_responses[0].deviceIDs)


async def test_registers_both_resources_with_the_kubelet(tmp_path: Path) -> None:
    async with running_node(tmp_path) as node:
        got = await node.registered()
        assert sorted(got) == [RESOURCE_MPS_SHARE, GPU]
        assert got[GPU].version == "v1beta1"
        assert got[GPU].endpoint == "gpufleet-gpu.sock"
        assert got[RESOURCE_MPS_SHARE].endpoint == "gpufleet-mps-share.sock"
        assert got[GPU].options.get_preferred_allocation_available
        assert not got[GPU].options.pre_start_required
        options = await node.stub(GPU).GetDevicePluginOptions(pb.Empty(), timeout=WAIT)
        assert options.get_preferred_allocation_available and not options.pre_start_required
        assert await node.stub(GPU).PreStartContainer(pb.PreStartContainerRequest(devices_ids=[f"{U}0"]),
                                                      timeout=WAIT) == pb.PreStartContainerResponse()


async def test_list_and_watch_sends_the_gpus_and_their_health_changes(tmp_path: Path) -> None:
    async with running_node(tmp_path, gpu_count=2) as node:
        await node.registered()
        gpus = node.stub(GPU).ListAndWatch(pb.Empty())
        shares = node.stub(RESOURCE_MPS_SHARE).ListAndWatch(pb.Empty())
        first = await asyncio.wait_for(gpus.read(), WAIT)
        assert [(d.ID, d.health) for d in first.devices] == [(f"{U}0", "Healthy"), (f"{U}1", "Healthy")]
        first_shares = await asyncio.wait_for(shares.read(), WAIT)
        assert len(first_shares.devices) == 200
        assert f"{U}0::00" == first_shares.devices[0].ID and f"{U}1::99" == first_shares.devices[199].ID
        node.gpus.set_healthy(f"{U}1", False)
        second = await asyncio.wait_for(gpus.read(), WAIT)
        assert [(d.ID, d.health) for d in second.devices] == [(f"{U}0", "Healthy"), (f"{U}1", "Unhealthy")]
        second_shares = await asyncio.wait_for(shares.read(), WAIT)
        assert {d.health for d in second_shares.devices[:100]} == {"Healthy"}
        assert {d.health for d in second_shares.devices[100:]} == {"Unhealthy"}
        gpus.cancel()
        shares.cancel()


async def test_preferred_allocation_and_allocate_give_the_annotated_gpus(tmp_path: Path) -> None:
    async with running_node(tmp_path) as node:
        await node.registered()
        node.add_pod("train", gpus=2, index="2,3")
        await node.settle()
        all_gpus = [f"{U}{i}" for i in range(4)]
        assert await preferred(node, GPU, all_gpus, 2) == [f"{U}2", f"{U}3"]
        got = await allocate(node, GPU, [f"{U}3", f"{U}2"])
        assert [d.name for d in got.cdi_devices] == [f"nvidia.com/gpu={U}2", f"nvidia.com/gpu={U}3"]
        assert [(d.container_path, d.host_path, d.permissions) for d in got.devices] == [
            ("/dev/nvidia2", "/dev/nvidia2", "rw"), ("/dev/nvidia3", "/dev/nvidia3", "rw")]
        assert dict(got.envs) == {"NVIDIA_VISIBLE_DEVICES": "void"}
        assert list(got.mounts) == []
        await node.plugin.pods.flush()
        pod = node.cluster.object(Kind.POD, "team-a", "train")
        assert pod is not None
        assert json.loads(pod["metadata"]["annotations"][ANNOTATION_DEVICES_ALLOCATED]) == {
            "c0": {GPU: [f"{U}3", f"{U}2"]}}
        # Served once: the same request again finds no pod waiting.
        assert await refused(node, GPU, [f"{U}3", f"{U}2"]) == (
            f"gpufleet device plugin: no pod of gpufleet's bound to node {NODE} waits for 2 nvidia.com/gpu with a "
            f"gpufleet.dev/gpu-index annotation; refusing devices {U}3,{U}2")


async def test_envvar_strategy_names_the_gpus_in_nvidia_visible_devices(tmp_path: Path) -> None:
    async with running_node(tmp_path, strategy="envvar") as node:
        await node.registered()
        node.add_pod("train", gpus=2, index="0,1")
        await node.settle()
        got = await allocate(node, GPU, [f"{U}0", f"{U}1"])
        assert dict(got.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{U}0,{U}1"}
        assert list(got.cdi_devices) == [] and list(got.devices) == []


async def test_allocate_refuses_what_contradicts_the_annotation(tmp_path: Path) -> None:
    async with running_node(tmp_path) as node:
        await node.registered()
        assert await refused(node, GPU, [f"{U}0"]) == (
            f"gpufleet device plugin: no pod of gpufleet's bound to node {NODE} waits for 1 nvidia.com/gpu with a "
            f"gpufleet.dev/gpu-index annotation; refusing devices {U}0")
        node.add_pod("train", gpus=2, index="2,3")
        await node.settle()
        # Other devices:
        assert await refused(node, GPU, [f"{U}0", f"{U}2"]) == (
            f"gpufleet device plugin: pod team-a/train waits for 2 nvidia.com/gpu on node {NODE} and gpufleet gave it "
            f"{U}2,{U}3; refusing devices {U}0,{U}2")
        # Another count:
        assert await refused(node, GPU, [f"{U}2"]) == (
            f"gpufleet device plugin: no pod of gpufleet's bound to node {NODE} waits for 1 nvidia.com/gpu with a "
            f"gpufleet.dev/gpu-index annotation; refusing devices {U}2")
        # GetPreferredAllocation refuses alike when no pod waits:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await preferred(node, GPU, [f"{U}0", f"{U}1"], 1)
        assert info.value.details() == (
            f"gpufleet device plugin: no pod of gpufleet's bound to node {NODE} waits for 1 nvidia.com/gpu with a "
            f"gpufleet.dev/gpu-index annotation; refusing devices none")
        pod = node.cluster.object(Kind.POD, "team-a", "train")
        assert pod is not None and ANNOTATION_DEVICES_ALLOCATED not in pod["metadata"]["annotations"]


async def test_tenant_written_annotations_gain_no_gpu(tmp_path: Path) -> None:
    """Annotations are tenant-writable: a pod that is not gpufleet's, or whose annotation is bogus or
    names a GPU another pod holds, gets nothing."""
    async with running_node(tmp_path) as node:
        await node.registered()
        node.add_pod("not-ours", gpus=1, index="0", scheduler="default-scheduler")
        node.add_pod("other-node", gpus=1, index="0", node="gpu-node-2")
        await node.settle()
        assert await refused(node, GPU, [f"{U}0"]) == (
            f"gpufleet device plugin: no pod of gpufleet's bound to node {NODE} waits for 1 nvidia.com/gpu with a "
            f"gpufleet.dev/gpu-index annotation; refusing devices {U}0")
        node.add_pod("twice", gpus=2, index="1,1")
        await node.settle()
        assert await refused(node, GPU, [f"{U}1", f"{U}2"]) == (
            "gpufleet device plugin: pod team-a/twice on node gpu-node-1: its gpufleet.dev/gpu-index annotation "
            f"'1,1' is not a list of GPU indices; refusing devices {U}1,{U}2")
        node.add_pod("beyond", gpus=1, index="7")
        await node.settle()
        assert await refused(node, GPU, [f"{U}3"]) == (
            "gpufleet device plugin: pod team-a/beyond was given GPU 7 by gpufleet, which node gpu-node-1 does "
            f"not have (or has in MIG mode); refusing devices {U}3")
        node.add_pod("first", gpus=1, index="3")
        node.add_pod("second", gpus=1, index="3")
        await node.settle()
        await allocate(node, GPU, [f"{U}3"])  # "first": earlier in the kubelet's order (same time, then name)
        assert await refused(node, GPU, [f"{U}3"]) == (
            f"gpufleet device plugin: GPU 3 ({U}3) of pod team-a/second is held by the whole-GPU pod team-a/first: "
            "a whole GPU goes to one pod")


async def test_whole_gpu_on_a_gpu_of_a_running_fractional_pod_is_refused(tmp_path: Path) -> None:
    """Whole and fractional pods on one GPU are impossible by construction, both ways."""
    async with running_node(tmp_path) as node:
        await node.registered()
        node.add_pod("notebook", shares=1, index="1", blocks="25", phase="Running")
        node.add_pod("train", gpus=1, index="1")
        await node.settle()
        assert await refused(node, GPU, [f"{U}1"]) == (
            f"gpufleet device plugin: GPU 1 ({U}1) of pod team-a/train is held by the fractional pod "
            "team-a/notebook: a whole GPU and MPS shares never go together")
        node.cluster.set_pod_phase("team-a", "notebook", "Succeeded")
        node.add_pod("whole", gpus=1, index="2", phase="Running")
        node.add_pod("share", shares=1, index="2", blocks="10")
        await node.settle()
        await allocate(node, GPU, [f"{U}1"])  # the fractional pod finished: its GPU is free
        assert await refused(node, RESOURCE_MPS_SHARE, [f"{U}2::00"]) == (
            f"gpufleet device plugin: GPU 2 ({U}2) of pod team-a/share is held by the whole-GPU pod team-a/whole: "
            "a whole GPU and MPS shares never go together")


async def test_mps_share_gets_only_its_gpus_pipe_and_shared_memory_and_limits(tmp_path: Path) -> None:
    async with running_node(tmp_path) as node:
        await node.registered()
        node.add_pod("notebook", shares=1, index="2", blocks="25", mem_limit="0=20389M")
        node.add_pod("neighbour", shares=1, index="2", blocks="75", phase="Running")
        await node.settle()
        available = [f"{U}{g}::{n:02d}" for g in range(4) for n in range(3)]
        assert await preferred(node, RESOURCE_MPS_SHARE, available, 1) == [f"{U}2::00"]
        got = await allocate(node, RESOURCE_MPS_SHARE, [f"{U}2::00"])
        assert [d.name for d in got.cdi_devices] == [f"nvidia.com/gpu={U}2"]
        assert [(d.container_path, d.host_path) for d in got.devices] == [("/dev/nvidia2", "/dev/nvidia2")]
        assert [(m.container_path, m.host_path, m.read_only) for m in got.mounts] == [
            ("/run/gpufleet/mps-pipe", "/run/gpufleet/mps/gpu-2/pipe", False),
            ("/dev/shm", "/run/gpufleet/mps/gpu-2/shm", False)]
        assert dict(got.envs) == {
            "NVIDIA_VISIBLE_DEVICES": "void",
            "CUDA_MPS_PIPE_DIRECTORY": "/run/gpufleet/mps-pipe",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20389M",
        }
        # A share of another GPU than the annotated one is refused, as is a GPU past 100 blocks.
        node.add_pod("late", shares=1, index="2", blocks="5")
        await node.settle()
        assert await refused(node, RESOURCE_MPS_SHARE, [f"{U}1::00"]) == (
            f"gpufleet device plugin: pod team-a/late waits for 1 gpufleet.dev/mps-share on node {NODE} and "
            f"gpufleet gave it {U}2; refusing devices {U}1::00")
        assert await refused(node, RESOURCE_MPS_SHARE, [f"{U}2::01"]) == (
            f"gpufleet device plugin: GPU 2 ({U}2) of pod team-a/late would hold 105 blocks of fractional pods, "
            "more than 100")


async def test_a_pod_the_informer_has_not_seen_yet_is_waited_for(tmp_path: Path) -> None:
    """The kubelet and the plugin learn of a binding from two watches: a miss waits for the informer
    (up to the grace period on the clock) before it is refused."""
    async with running_node(tmp_path, grace=2.0) as node:
        await node.registered()
        call = asyncio.ensure_future(allocate(node, GPU, [f"{U}0"]))
        await until(lambda: node.plugin.pods.waiting == 1)
        assert not call.done()
        node.add_pod("late", gpus=1, index="0")
        got = await asyncio.wait_for(call, WAIT)
        assert [d.name for d in got.cdi_devices] == [f"nvidia.com/gpu={U}0"]
        missing = asyncio.ensure_future(refused(node, GPU, [f"{U}1"]))
        await until(lambda: node.plugin.pods.waiting == 1)
        assert not missing.done()
        await node.clock.advance(2.0)
        assert (await asyncio.wait_for(missing, WAIT)).startswith("gpufleet device plugin: no pod of gpufleet's")
