"""Footprint of the node agent: CPU (% of one core) and peak RSS of the agent's process.

The real agent runs alone in a child process: the NVML reader (``NvmlGpuReader``) over the fake NVML
with 8 H100s on NVSwitch and ``--processes`` GPU processes (PIDs of live processes of this machine,
so the usage export reads this machine's ``/proc`` for their cgroups), the health rules, discovery,
the usage export and the agent's metrics, polling at 1 Hz (``--interval``) for ``--seconds`` of
real time, writing its Node through the real lightkube adapter over HTTP to the API server emulator
(``--api emulator``, which runs in another process so its CPU is not counted), or to the in-memory
store (``--api memory``). The pods watcher follows this node's pods by field selector (``--pods``
in the cluster, one in ten on the node), and ``/metrics`` is rendered every 15 s (a Prometheus
scrape). A third of the way in, GPU 5 reports a storm of 50 Xid 79 and falls off the bus, so that a
health change, its Node writes, its Event and the counters are part of the run.

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


def _fake_nvml_module() -> Any:
    """``gpufleet.testing.fake_nvml`` loaded from its file: the ``gpufleet.testing`` package's other
    modules (the in-memory API store) are not what the agent carries, and must not count."""
    import importlib.util
    from pathlib import Path

    import gpufleet

    path = Path(gpufleet.__file__).parent / "testing" / "fake_nvml.py"
    spec = importlib.util.spec_from_file_location("bench_fake_nvml", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _live_pids(count: int) -> list[int]:
    """PIDs of processes of this machine (their /proc/<pid>/cgroup is what the export reads)."""
    pids = [os.getpid(), os.getppid()]
    for name in sorted(os.listdir("/proc"), key=lambda n: (len(n), n)):
        if name.isdigit() and int(name) not in pids:
            pids.append(int(name))
        if len(pids) >= count:
            break
    return pids[:count]


def run_agent(server: str | None, seconds: float, interval: float, pods: int, processes: int) -> None:
    """The child: the agent until ``seconds`` pass; prints polls and writes as JSON."""
    import gpufleet.cli
    import gpufleet.commands.agent  # noqa: F401 - what the `gpufleet agent` process imports besides
    from gpufleet.agent.gpus.nvml import open_nvml
    from gpufleet.agent.health import HealthPolicy
    from gpufleet.agent.service import AgentLoop, AgentSettings, NodeWriter
    from gpufleet.agent.service.pods import PodsOnNode
    from gpufleet.agent.service.wiring import agent_parts
    from gpufleet.kube import Kind, RealClock, connect
    from gpufleet.kube.controller.events import EventRecorder

    nvml = _fake_nvml_module().FakeNvml.with_gpus(8)
    nvml.nvswitch(range(8))
    for n, pid in enumerate(_live_pids(processes)):
        nvml.gpu(n % 8).utilisation = (60, 40)
        nvml.add_process(n % 8, pid=pid, sm_util=50, memory_mib=4000, timestamp_us=1_000)

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
        metrics, usage = agent_parts(NODE, "/proc")
        writer = NodeWriter(api, NODE, clock, EventRecorder(api, clock, identity=NODE))
        pods_on_node = PodsOnNode(api, NODE, clock)
        settings = AgentSettings(node=NODE, interval_s=interval, policy=HealthPolicy(clean_period_s=600.0))
        loop = AgentLoop(settings, lambda: open_nvml(nvml), writer, clock, metrics=metrics, usage=usage,
                         pods=pods_on_node)
        informer = asyncio.create_task(pods_on_node.run())
        agent = asyncio.create_task(loop.run())
        page = b""

        async def scrape() -> None:
            nonlocal page
            while True:
                await asyncio.sleep(15.0)
                page = metrics.render()

        scraper = asyncio.create_task(scrape())
        await asyncio.sleep(min(2.0, seconds / 10))  # the first list and the first writes: start-up
        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.sleep(seconds / 3)
        nvml.queue_xid(5, 79, count=50)
        nvml.lose_gpu(5)
        await asyncio.sleep(seconds - seconds / 3)
        steady = 100 * (time.process_time() - cpu0) / (time.monotonic() - wall0)
        for task in (agent, informer, scraper):
            task.cancel()
        await asyncio.gather(agent, informer, scraper, return_exceptions=True)
        await api.close()
        return {"polls": loop.polls, "node_writes": writer.writes, "pods_on_node": len(pods_on_node()),
                "gpu_processes": processes, "metrics_page_bytes": len(page),
                "unhealthy": sorted(i for i, g in (loop.state or {}).items() if g.state.value == "Unhealthy"),
                "steady_cpu_percent_of_one_core": round(steady, 2)}

    print(json.dumps(asyncio.run(main())), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--pods", type=int, default=500, help="pods in the cluster; one in ten on the node")
    parser.add_argument("--processes", type=int, default=16, help="GPU processes (live PIDs of this machine)")
    parser.add_argument("--api", choices=["emulator", "memory"], default="emulator")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        run_agent(None if args.child == "memory" else args.child, args.seconds, args.interval, args.pods,
                  args.processes)
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
               "--interval", str(args.interval), "--pods", str(args.pods), "--processes", str(args.processes)]
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
