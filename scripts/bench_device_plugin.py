#!/usr/bin/env python
"""Latency of the device plugin's Allocate, as the kubelet sees it: over the real gRPC unix socket.

One node of 8 GPUs (the fake GPU reader) and 110 pods of gpufleet's bound to it in the plugin's pod
cache (fed by list + watch from the in-memory API, gpufleet.testing.FakeCluster): 76 running
fractional pods (19 of 5 blocks on each of GPUs 0-3), 33 running pods without GPUs, and the pod
being started. Each round puts a new pending pod (a whole GPU among GPUs 4-7, or a share of 5 blocks
of GPUs 0-3, alternately) in place of the previous one (finished and deleted), lets the informer
take it in, then times one Allocate call from the client's side (the kubelet's): the lookup over the
110 pods, the checks, the response and the gRPC round trip. The background annotation patch of the
previous round runs on the same event loop, as it would.

    .venv/bin/python scripts/bench_device_plugin.py --calls 5000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import grpc

from gpufleet.agent.deviceplugin import DevicePlugin, PluginSettings, PollingWatcher
from gpufleet.agent.deviceplugin.api import pb, pb_grpc
from gpufleet.domain.wire import RESOURCE_MPS_SHARE
from gpufleet.kube import Kind
from gpufleet.testing import FakeCluster, FakeGpuReader, VirtualClock, fake_gpus

NODE = "gpu-node-1"


class Kubelet(pb_grpc.RegistrationServicer):
    def __init__(self) -> None:
        self.registered = asyncio.Event()
        self.count = 0

    async def Register(self, request: pb.RegisterRequest, context: Any) -> pb.Empty:
        self.count += 1
        if self.count == 2:
            self.registered.set()
        return pb.Empty()


def pod(name: str, *, gpus: int = 0, shares: int = 0, index: str | None = None, blocks: str | None = None,
        phase: str = "Pending") -> dict[str, Any]:
    annotations = {}
    if index is not None:
        annotations["gpufleet.dev/gpu-index"] = index
    if blocks is not None:
        annotations["gpufleet.dev/gpu-blocks"] = blocks
        annotations["gpufleet.dev/mps-mem-limit"] = f"0={int(blocks) * 81559 // 100}M"
    limits = {"cpu": "1"}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    if shares:
        limits[RESOURCE_MPS_SHARE] = str(shares)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "bench", "annotations": annotations},
            "spec": {"schedulerName": "gpufleet", "nodeName": NODE,
                     "containers": [{"name": "main", "image": "cuda", "resources": {"limits": limits}}]},
            "status": {"phase": phase}}


async def run(calls: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        kubelet = Kubelet()
        server = grpc.aio.server()
        pb_grpc.add_RegistrationServicer_to_server(kubelet, server)
        server.add_insecure_port(f"unix://{directory / 'kubelet.sock'}")
        await server.start()
        clock = VirtualClock()
        cluster = FakeCluster(clock)
        cluster.log_calls = False
        for gpu in range(4):
            for n in range(19):
                cluster.put(Kind.POD, pod(f"frac-{gpu}-{n}", shares=1, index=str(gpu), blocks="5", phase="Running"))
        for n in range(33):
            cluster.put(Kind.POD, pod(f"cpu-{n}", phase="Running"))
        reader = FakeGpuReader(fake_gpus(8))
        uuids = [gpu.uuid for gpu in reader.read()]
        plugin = DevicePlugin(PluginSettings(node=NODE, lookup_grace_s=0.0), reader, cluster.client("device-plugin"),
                              clock, PollingWatcher(clock), directory)
        handler_ms: dict[str, list[float]] = {r: [] for r in plugin.services}
        for resource, service in plugin.services.items():
            inner = service.Allocate

            async def timed(request: Any, context: Any, inner: Any = inner, out: list[float] = handler_ms[resource]
                            ) -> Any:
                start = time.perf_counter()
                try:
                    return await inner(request, context)
                finally:
                    out.append((time.perf_counter() - start) * 1000)

            service.Allocate = timed  # type: ignore[method-assign]
        task = asyncio.create_task(plugin.run())
        await asyncio.wait_for(kubelet.registered.wait(), 30)
        channels = {r: grpc.aio.insecure_channel(f"unix://{plugin.socket(r)}") for r in ("nvidia.com/gpu",
                                                                                        RESOURCE_MPS_SHARE)}
        stubs = {r: pb_grpc.DevicePluginStub(c) for r, c in channels.items()}
        times: dict[str, list[float]] = {"nvidia.com/gpu": [], RESOURCE_MPS_SHARE: []}
        previous = None
        for i in range(calls + 200):  # the first 200: warm-up, not counted
            whole = i % 2 == 0
            name = f"start-{i}"
            if whole:
                gpu = 4 + (i // 2) % 4
                cluster.put(Kind.POD, pod(name, gpus=1, index=str(gpu)))
                resource, devices = "nvidia.com/gpu", [uuids[gpu]]
            else:
                gpu = (i // 2) % 4
                cluster.put(Kind.POD, pod(name, shares=1, index=str(gpu), blocks="5"))
                resource, devices = RESOURCE_MPS_SHARE, [f"{uuids[gpu]}::{i % 100:02d}"]
            if previous is not None:
                cluster.delete(Kind.POD, "bench", previous)
            previous = name
            while len(plugin.pods) != 110 or not any(p.name == name for p in plugin.pods.pods()):
                await asyncio.sleep(0)
            request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=devices)])
            start = time.perf_counter()
            response = await stubs[resource].Allocate(request, timeout=10)
            elapsed = time.perf_counter() - start
            assert len(response.container_responses) == 1
            if i >= 200:
                times[resource].append(elapsed * 1000)
        for channel in channels.values():
            await channel.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await server.stop(grace=None)
        for resource, values in handler_ms.items():
            times[f"{resource} (in the plugin)"] = values[200 // 2:]
        return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000, help="Allocate calls timed (half whole, half shares)")
    args = parser.parse_args()
    times = asyncio.run(run(args.calls))
    print(f"node: 8 GPUs, 110 pods in the cache; {args.calls} Allocate calls over the unix socket")
    for resource, values in times.items():
        values.sort()
        p50 = statistics.median(values)
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
        print(f"{resource:38s} n={len(values):5d}  p50 {p50:.3f} ms  p99 {p99:.3f} ms  max {values[-1]:.3f} ms")


if __name__ == "__main__":
    main()
