#!/usr/bin/env python
"""Footprint of the node agent's loop: CPU (% of one core) and peak RSS of the agent's process.

The agent runs alone in a child process, polling a fake reader of 8 GPUs at 1 Hz (``--interval``)
for ``--seconds`` of real time, writing its Node through the real lightkube adapter over HTTP to the
API server emulator (``--api emulator``, which runs in another process so its CPU is not counted),
or to the in-memory store (``--api memory``: a no-op writer's cost). The pods informer for the usage
export runs too (``--pods`` pods bound to the node). One GPU gets a critical Xid a third of the way
in, so that a health change, its Node writes and its Event are part of the run.

The parent reads the child's CPU time and peak RSS from ``os.wait4`` (its rusage): CPU % of one
core = (user + system seconds) / wall seconds of the child's whole life (imports and start-up
included); the child also reports its steady state (``time.process_time`` over the polls after the
first two seconds).

    .venv/bin/python scripts/bench_agent.py --seconds 60
    .venv/bin/python scripts/bench_agent.py --seconds 60 --api memory
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import time
from typing import Any

NODE = "gpu-node-1"


def _node() -> dict[str, Any]:
    return {"metadata": {"name": NODE, "uid": "uid-1", "labels": {"kubernetes.io/hostname": NODE}},
            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "8"}, "capacity": {"nvidia.com/gpu": "8"},
                                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}


def _pod(i: int) -> dict[str, Any]:
    return {"metadata": {"name": f"p{i}", "namespace": "ml", "uid": f"uid-p{i}"},
            "spec": {"nodeName": NODE if i % 10 == 0 else f"other-{i}", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}}


def _serve_emulator(pods: int, ready: Any, stop: Any) -> None:
    from gpufleet.kube import Kind
    from gpufleet.testing.emulator import ApiServerEmulator

    async def main() -> None:
        async with ApiServerEmulator() as emulator:
            emulator.store.log_calls = False
            emulator.store.put(Kind.NODE, _node())
            for i in range(pods):
                emulator.store.put(Kind.POD, _pod(i))
            ready.send(emulator.url_text)
            while not stop.poll():
                await asyncio.sleep(0.2)

    asyncio.run(main())


def run_agent(server: str | None, seconds: float, interval: float, pods: int) -> None:
    """The child: the agent's loop until ``seconds`` pass; prints polls and writes as JSON."""
    import gpufleet.cli
    import gpufleet.commands.agent  # noqa: F401 - what the `gpufleet agent` process imports besides
    from gpufleet.agent.gpus import GpuHealthReading, GpuInfo, GpuUtilisation, ProcessUtilisation, XidEvent
    from gpufleet.agent.service import AgentLoop, AgentSettings, HealthPolicy, NodeWriter
    from gpufleet.agent.service.pods import PodsOnNode
    from gpufleet.agent.service.wiring import agent_parts
    from gpufleet.kube import Kind, RealClock, connect
    from gpufleet.kube.controller.events import EventRecorder

    class Reader:
        """8 H100s, as NVML would give them (not gpufleet.testing's fake: its module brings the
        in-memory API store's imports, which the agent does not carry)."""

        def __init__(self) -> None:
            self.gpus = tuple(GpuInfo(index=i, uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000",
                                      product="NVIDIA H100 80GB HBM3", memory_mib=81559, mig_enabled=False,
                                      healthy=True, minor=i, nvswitch=True) for i in range(8))
            self.pending: tuple[XidEvent, ...] = ()

        def read(self) -> tuple[GpuInfo, ...]:
            return self.gpus

        def health(self) -> tuple[GpuHealthReading, ...]:
            return tuple(GpuHealthReading(index=g.index, uuid=g.uuid, ecc_dbe_volatile=0, retired_pages_sbe=0,
                                          retired_pages_dbe=0, row_remap_failure=False) for g in self.gpus)

        def xid_events(self) -> tuple[XidEvent, ...]:
            events, self.pending = self.pending, ()
            return events

        def utilisation(self) -> tuple[tuple[GpuUtilisation, ...], tuple[ProcessUtilisation, ...]]:
            return tuple(GpuUtilisation(index=g.index, uuid=g.uuid, gpu_util_percent=50.0, memory_used_mib=1000,
                                        memory_total_mib=g.memory_mib) for g in self.gpus), ()

        async def changed(self) -> None:
            await asyncio.Event().wait()

        def close(self) -> None:
            return None

    async def main() -> dict[str, Any]:
        if server is None:
            from gpufleet.testing.fake_cluster import FakeCluster

            store = FakeCluster()
            store.log_calls = False
            store.put(Kind.NODE, _node())
            for i in range(pods):
                store.put(Kind.POD, _pod(i))
            api: Any = store.client("gpufleet-agent")
        else:
            api = connect(server=server, field_manager="gpufleet-agent", timeout=10.0)
        clock = RealClock()
        reader = Reader()
        rules, describe, usage = agent_parts(HealthPolicy())
        writer = NodeWriter(api, NODE, clock, EventRecorder(api, clock, identity=NODE))
        pods_on_node = PodsOnNode(api, NODE, clock)
        loop = AgentLoop(AgentSettings(node=NODE, interval_s=interval), lambda: reader, rules, describe,
                         writer, clock, usage=usage, pods=pods_on_node)
        informer = asyncio.create_task(pods_on_node.run())
        agent = asyncio.create_task(loop.run())
        await asyncio.sleep(min(2.0, seconds / 10))  # the first list and the first writes: start-up
        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.sleep(seconds / 3)
        reader.pending = (XidEvent(index=5, uuid=reader.read()[5].uuid, xid=79),)
        await asyncio.sleep(seconds - seconds / 3)
        steady = 100 * (time.process_time() - cpu0) / (time.monotonic() - wall0)
        agent.cancel()
        informer.cancel()
        await asyncio.gather(agent, informer, return_exceptions=True)
        await api.close()
        return {"polls": loop.polls, "node_writes": writer.writes, "pods_on_node": len(pods_on_node()),
                "steady_cpu_percent_of_one_core": round(steady, 2)}

    print(json.dumps(asyncio.run(main())), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--pods", type=int, default=500, help="pods in the cluster; one in ten on the node")
    parser.add_argument("--api", choices=["emulator", "memory"], default="emulator")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        run_agent(None if args.child == "memory" else args.child, args.seconds, args.interval, args.pods)
        return
    stop_recv, stop_send = multiprocessing.Pipe(duplex=False)
    ready_recv, ready_send = multiprocessing.Pipe(duplex=False)
    emulator = None
    target = "memory"
    if args.api == "emulator":
        emulator = multiprocessing.get_context("spawn").Process(target=_serve_emulator,
                                                                args=(args.pods, ready_send, stop_recv))
        emulator.start()
        target = ready_recv.recv()
    command = [sys.executable, __file__, "--child", target, "--seconds", str(args.seconds),
               "--interval", str(args.interval), "--pods", str(args.pods)]
    started = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - started
    assert child.stdout is not None
    result = json.loads(child.stdout.read() or b"{}")
    if emulator is not None:
        stop_send.send(True)
        emulator.join(10)
    cpu = usage.ru_utime + usage.ru_stime
    report = {"seconds": args.seconds, "interval_s": args.interval, "gpus": 8, "api": args.api, "pods": args.pods,
              **result, "exit_status": os.waitstatus_to_exitcode(status), "wall_s": round(wall, 2),
              "cpu_s": round(cpu, 3), "cpu_percent_of_one_core": round(100 * cpu / wall, 2),
              "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "load_average": os.getloadavg()}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
