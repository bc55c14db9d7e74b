#!/usr/bin/env python
"""What the pod-grouper adds to the controller's time to bind gangs (issue 16's target: under 20%).

1,250 PyTorchJobs of 8 pods each (Master 1 + Worker 7, one GPU a pod: 10,000 pods) arrive at once
in the API server emulator (a child process, as in scripts/bench_controller.py), with 1,250 nodes of
8 GPUs. Two runs of the real controller, started cold over HTTP:

* ``grouped``: the pods carry only their ownerReferences; the pod-grouper (``--group-workloads``)
  creates the 1,250 PodGroups and labels the 10,000 pods before the engine binds the gangs;
* ``hand``: the PodGroups and the pods' labels are written beforehand, the pod-grouper is off.

The clock stops when the controller's cache shows every pod bound.

    .venv/bin/python scripts/bench_grouper.py --jobs 1250 --repeat 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import statistics
import time
from multiprocessing.connection import Connection
from typing import Any

ROLE = "training.kubeflow.org/replica-type"


def _template() -> dict[str, Any]:
    return {"spec": {"schedulerName": "gpufleet", "containers": [
        {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": "1"},
                                                              "requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}}


def _store(jobs: int, hand: bool) -> Any:
    from gpufleet.adapters import owner_from_dict
    from gpufleet.domain import LABEL_POD_GROUP
    from gpufleet.kube import Kind
    from gpufleet.kube.controller.grouper import group_body
    from gpufleet.policy import ProjectIndex
    from gpufleet.policy.grouping import GroupFacts, group_for
    from gpufleet.testing.fake_cluster import FakeCluster

    store = FakeCluster()
    store.log_calls = False
    for i in range(jobs):
        store.put(Kind.NODE, {"metadata": {"name": f"n{i}", "labels": {"kubernetes.io/hostname": f"n{i}"}},
                              "spec": {}, "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110",
                                                                     "nvidia.com/gpu": "8"}}})
    store.put(Kind.QUEUE, {"metadata": {"name": "team-a"}, "spec": {}})
    facts = GroupFacts(projects=ProjectIndex.build((), {}))
    for i in range(jobs):
        owner = store.put(Kind.PYTORCH_JOB, {
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": f"job-{i}", "namespace": "ml", "labels": {"gpufleet.dev/queue": "team-a"}},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": _template()},
                                             "Worker": {"replicas": 7, "template": _template()}}}})
        labels: dict[str, str] = {}
        if hand:
            [plan] = group_for(owner_from_dict(owner), facts)  # type: ignore[misc]
            store.put(Kind.POD_GROUP, group_body(plan))
            labels[LABEL_POD_GROUP] = plan.name
        ref = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": f"job-{i}",
               "uid": owner["metadata"]["uid"], "controller": True}
        for r in range(8):
            role = "master" if r == 0 else "worker"
            store.put(Kind.POD, {"metadata": {"name": f"job-{i}-{role}-{r}", "namespace": "ml",
                                              "labels": {**labels, ROLE: role}, "ownerReferences": [ref],
                                              "creationTimestamp": "2026-01-01T00:00:00Z"},
                                 "spec": _template()["spec"], "status": {"phase": "Pending"}})
    store.calls.clear()
    store.log_calls = True
    return store


def _serve(jobs: int, hand: bool, conn: Connection) -> None:
    from gpufleet.testing.emulator import ApiServerEmulator

    async def main() -> None:
        store = _store(jobs, hand)
        async with ApiServerEmulator(store=store) as emulator:
            conn.send(emulator.url_text)
            await asyncio.get_running_loop().run_in_executor(None, conn.recv)
            ops: dict[str, int] = {}
            for call in store.calls:
                ops[call.op] = ops.get(call.op, 0) + 1
            conn.send(ops)

    asyncio.run(main())


async def _bind_all(url: str, pods: int, group: bool) -> dict[str, Any]:
    from gpufleet.kube import Controller, ControllerConfig, Kind, RealClock, connect

    api = connect(server=url, field_manager="gpufleet", concurrency=64, timeout=60.0, list_chunk_size=None)
    config = ControllerConfig(identity="bench", min_interval=0.0, concurrency=64, group_workloads=group)
    controller = Controller(api, RealClock(), config)
    bound = {"n": 0}
    done = asyncio.Event()

    def count(kind: Kind, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if kind is Kind.POD:
            now, was = bool(new and new["spec"].get("nodeName")), bool(old and old["spec"].get("nodeName"))
            bound["n"] += int(now) - int(was)
            if bound["n"] >= pods:
                done.set()

    controller.cache.hooks.append(count)
    cpu0, t0 = time.process_time(), time.perf_counter()
    task = asyncio.create_task(controller.run())
    while not done.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(done.wait()), 0.05)
        if task.done():
            task.result()
            raise RuntimeError("the controller stopped")
        if time.perf_counter() - t0 > 600:
            raise RuntimeError(f"only {bound['n']} of {pods} bound after 600 s")
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await api.close()
    return {"seconds": round(seconds, 2), "controller_cpu_s": round(cpu, 2), "cycles": controller.cycles}


def run_once(jobs: int, mode: str) -> dict[str, Any]:
    parent, child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=_serve, args=(jobs, mode == "hand", child), daemon=True)
    server.start()
    url = parent.recv()
    try:
        result = asyncio.run(_bind_all(url, jobs * 8, mode == "grouped"))
    finally:
        parent.send("stop")
        ops = parent.recv() if parent.poll(60) else {}
        server.join(10)
    return {"mode": mode, "jobs": jobs, "pods": jobs * 8, **result,
            "api_calls": {k: v for k, v in sorted(ops.items()) if k not in ("list", "watch")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1250)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {"hand": [], "grouped": []}
    for _ in range(args.repeat):
        for mode in ("hand", "grouped"):
            result = run_once(args.jobs, mode)
            results[mode].append(result)
            print(json.dumps(result), flush=True)
    best = {mode: min(r["seconds"] for r in runs) for mode, runs in results.items()}
    median = {mode: statistics.median(r["seconds"] for r in runs) for mode, runs in results.items()}
    # Each grouped run against the hand run just before it: the machine's load drifts over a run of
    # minutes, and a pair shares most of it.
    paired = statistics.median(g["seconds"] / h["seconds"] for h, g in zip(results["hand"], results["grouped"],
                                                                            strict=True))
    cpu = {mode: statistics.median(r["controller_cpu_s"] for r in runs) for mode, runs in results.items()}
    print(json.dumps({"best_seconds": best, "median_seconds": median, "median_controller_cpu_s": cpu,
                      "grouping_adds_best": f"{100 * (best['grouped'] / best['hand'] - 1):.1f}%",
                      "grouping_adds_median": f"{100 * (median['grouped'] / median['hand'] - 1):.1f}%",
                      "grouping_adds_paired_median": f"{100 * (paired - 1):.1f}%",
                      "grouping_adds_cpu_median": f"{100 * (cpu['grouped'] / cpu['hand'] - 1):.1f}%"}))


if __name__ == "__main__":
    main()
