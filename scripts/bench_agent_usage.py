#!/usr/bin/env python
"""Per-poll cost of the node agent's utilisation export (gpufleet.agent.usage): 8 GPUs x 20 processes.

Each poll is what the agent service does at 1 Hz: ``UsageExporter.update`` with the GPUs' and the
processes' utilisation (as ``GpuReader.utilisation`` gives them) and the node's pods; that reads one
``/proc/<pid>/stat`` per GPU process (to tell a reused PID), a ``cgroup`` for each new process, and
sums the pods' shares. A scrape (``render``: prometheus-client's ``generate_latest``) is timed apart:
Prometheus scrapes every 15-60 s, not every poll.

    .venv/bin/python scripts/bench_agent_usage.py                   # pods' processes in a proc-like tree
    .venv/bin/python scripts/bench_agent_usage.py --proc real       # this machine's /proc (live PIDs, host cgroups)
    .venv/bin/python scripts/bench_agent_usage.py --gpus 8 --per-gpu 20 --polls 2000

Reported: CPU seconds per poll (``time.process_time``; median of ``--repeat`` runs of ``--polls``
polls), the share of one core at 1 Hz, the cold first poll (every cgroup read), per render, and
the process's peak RSS (the interpreter, gpufleet's imports and prometheus-client included).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path


def _tree(root: Path, pids: list[int], uids: list[str]) -> None:
    for n, pid in enumerate(pids):
        directory = root / str(pid)
        directory.mkdir(parents=True)
        uid = uids[n % len(uids)]
        fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194560", *["0"] * 12, "20", "0", "8", "0"]
        fields[19] = str(100_000 + pid)
        (directory / "stat").write_text(f"{pid} (python3) {' '.join(fields)} 123456 789\n")
        (directory / "cgroup").write_text(
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice/"
            f"cri-containerd-{n:064x}.scope\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--per-gpu", type=int, default=20, help="processes per GPU")
    parser.add_argument("--pods", type=int, default=8, help="pods the processes belong to")
    parser.add_argument("--polls", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--proc", choices=["tree", "real"], default="tree")
    args = parser.parse_args()

    from gpufleet.agent.gpus import GpuUtilisation, ProcessUtilisation
    from gpufleet.agent.usage import HostProcReader, PodEntry, UsageExporter
    from gpufleet.testing.fake_gpus import fake_gpus

    gpus = fake_gpus(args.gpus)
    count = args.gpus * args.per_gpu
    uids = [f"{n:08x}-0000-4000-8000-{n:012x}" for n in range(args.pods)]
    pods = {uid: PodEntry(f"ns-{n}", f"pod-{n}", {f"{m:064x}": "main" for m in range(n, count, args.pods)})
            for n, uid in enumerate(uids)}
    with tempfile.TemporaryDirectory() as scratch:
        if args.proc == "real":
            root = "/proc"
            live = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())[:count]
            pids = [live[n % len(live)] for n in range(count)]  # fewer live PIDs: some on several GPUs
        else:
            root = scratch
            pids = list(range(1000, 1000 + count))
            _tree(Path(scratch), pids, uids)
        util = [GpuUtilisation(index=g.index, uuid=g.uuid, gpu_util_percent=87.0, memory_used_mib=40_000,
                               memory_total_mib=g.memory_mib) for g in gpus]
        processes = [ProcessUtilisation(index=n % args.gpus, uuid=gpus[n % args.gpus].uuid, pid=pid,
                                        sm_util_percent=4.0, memory_used_mib=2_000) for n, pid in enumerate(pids)]
        exporter = UsageExporter("bench-node", HostProcReader(root), driver_version="550.90.07")
        start = time.process_time()
        exporter.update(util, processes, pods, now=0.0, devices=gpus)
        cold = time.process_time() - start
        runs = []
        for _ in range(args.repeat):
            start = time.process_time()
            for poll in range(args.polls):
                exporter.update(util, processes, pods, now=float(poll), devices=gpus)
            runs.append((time.process_time() - start) / args.polls)
        renders = []
        for _ in range(args.repeat):
            start = time.process_time()
            for _ in range(100):
                page = exporter.render()
            renders.append((time.process_time() - start) / 100)
    per_poll = statistics.median(runs)
    print(json.dumps({
        "proc": args.proc, "gpus": args.gpus, "processes": count, "distinct_pids": len(set(pids)), "pods": args.pods,
        "shares": len(exporter.sample.shares), "cgroup_reads": exporter.owners.cgroup_reads,
        "cold_poll_ms": round(cold * 1e3, 3), "poll_ms": round(per_poll * 1e3, 3),
        "poll_ms_runs": [round(r * 1e3, 3) for r in runs], "core_share_at_1hz_percent": round(per_poll * 100, 3),
        "render_ms": round(statistics.median(renders) * 1e3, 3), "page_bytes": len(page),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }, indent=1))


if __name__ == "__main__":
    main()
