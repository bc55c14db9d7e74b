#!/usr/bin/env python
"""CPU and memory of the node agent's GPU reading, on the fake NVML: one poll is what the agent does
each second (discovery, health counters, Xid events, utilisation, the Node metadata and its patch).

An HGX-like node: 8 H100s on NVSwitches (18 links each), two processes on each GPU with a new
utilisation sample each poll, and one Xid event per poll. The polls run back to back; the CPU time
of one poll is the share of one core the agent spends at 1 Hz. The fake's calls are Python calls:
real NVML calls (ctypes into the driver) cost differently, so this measures the reader's own work.

    .venv/bin/python scripts/bench_nvml_reader.py --polls 2000
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

from gpufleet.agent.discovery import metadata_patch, node_gpu_metadata
from gpufleet.agent.gpus.nvml import open_nvml

# What the agent imports for this work, before the test doubles (gpufleet.testing imports the API fakes)
RSS_AGENT_IMPORTS_MIB = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=2000)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()

    from gpufleet.testing.fake_nvml import FakeNvml

    rss_at_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    nvml = FakeNvml.with_gpus(args.gpus)
    nvml.nvswitch(range(args.gpus))
    reader = open_nvml(nvml)
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    cpu: list[float] = []
    calls_before = sum(nvml.calls.values())
    for poll in range(args.polls):
        for index in range(args.gpus):  # a new sample for each process
            nvml.add_process(index, 1000 + 2 * index, sm_util=poll % 100, memory_mib=20000, timestamp_us=poll + 1)
            nvml.add_process(index, 1001 + 2 * index, sm_util=50, memory_mib=10000, timestamp_us=poll + 1)
        nvml.queue_xid(poll % args.gpus, 13)
        started = time.process_time()
        gpus = reader.read()
        reader.health()
        events = reader.xid_events()
        _per_gpu, processes = reader.utilisation()
        patch = metadata_patch(node_gpu_metadata(gpus), labels, annotations)
        labels.update({k: v for k, v in patch.labels.items() if v is not None})
        annotations.update({k: v for k, v in patch.annotations.items() if v is not None})
        cpu.append(time.process_time() - started)
        assert len(events) == 1 and len(processes) == 2 * args.gpus
    calls = (sum(nvml.calls.values()) - calls_before) / args.polls
    reader.close()
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cpu.sort()
    mean = statistics.fmean(cpu)
    print(f"{args.gpus} GPUs, {args.polls} polls: {calls:.0f} NVML calls a poll")
    print(f"CPU a poll: mean {mean * 1e3:.3f} ms, median {cpu[len(cpu) // 2] * 1e3:.3f} ms, "
          f"p99 {cpu[int(len(cpu) * 0.99)] * 1e3:.3f} ms -> {mean * 100:.3f}% of one core at 1 Hz")
    print(f"peak RSS: {rss_mib:.1f} MiB; {rss_at_start:.1f} MiB before the first poll (the fake's imports "
          f"included); {RSS_AGENT_IMPORTS_MIB:.1f} MiB after importing discovery and the NVML reader alone")


if __name__ == "__main__":
    main()
