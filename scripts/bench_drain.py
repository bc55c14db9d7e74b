#!/usr/bin/env python
"""How fast the controller drains a whole spot pool and requeues its gangs, over HTTP (the emulator).

The store holds ``--spot-nodes`` spot nodes (8 GPUs, ``karpenter.sh/capacity-type=spot``) full of running
gangs (``--gang-size`` pods of 4 GPUs each, two pods a node: a gang spans gang-size/2 nodes), each gang with
its PodGroup, and as many on-demand nodes, empty. The controller (the real lightkube adapter over HTTP)
starts and syncs; then every spot node gets the AWS Node Termination Handler's spot notice taint at once
and the clock starts. The script plays the kubelet and the gangs' owner: an evicted pod is deleted at
once (no grace: the time measured is the controller's) and its owner makes it again (a new pod, the same
PodGroup). The clock stops when every replacement is bound; the marks on the way: every pod evicted,
every replacement bound. It checks that every gang was drained whole, once, and landed on the on-demand
pool only.

    .venv/bin/python scripts/bench_drain.py                       # 1,000 spot nodes, gangs of 4
    .venv/bin/python scripts/bench_drain.py --spot-nodes 200 --repeat 3

The emulator runs on the controller's event loop (in-process): its CPU is the controller's too, so the
figures are, if anything, pessimistic.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

GPU = "nvidia.com/gpu"
ITN = "aws-node-termination-handler/spot-itn"
CREATED = "2026-01-01T00:00:00Z"


def _node(name: str, spot: bool) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, **({"karpenter.sh/capacity-type": "spot"} if spot else {})}
    amounts = {"cpu": "128", "memory": "1Ti", "pods": "110", GPU: "8"}
    return {"metadata": {"name": name, "labels": labels}, "spec": {},
            "status": {"allocatable": amounts, "capacity": amounts}}


def _pod(name: str, group: str, node: str | None = None, index: str | None = None) -> dict[str, Any]:
    annotations = {"gpufleet.dev/gpu-index": index} if index is not None else {}
    spec: dict[str, Any] = {
        "schedulerName": "gpufleet",
        "containers": [{"name": "main", "image": "trainer:1",
                        "resources": {"limits": {GPU: "4"}, "requests": {"cpu": "1", "memory": "1Gi", GPU: "4"}}}],
    }
    status: dict[str, Any] = {"phase": "Pending"}
    if node is not None:
        spec["nodeName"] = node
        status = {"phase": "Running", "startTime": CREATED}
    return {"metadata": {"name": name, "namespace": "ml", "creationTimestamp": CREATED, "annotations": annotations,
                         "labels": {"gpufleet.dev/queue": "train", "gpufleet.dev/pod-group": group}},
            "spec": spec, "status": status}


def _node_of(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else (obj.get("spec") or {}).get("nodeName")


def _store(spot_nodes: int, gang_size: int) -> tuple[Any, dict[str, str]]:
    """The loaded store, and each running pod's gang."""
    from gpufleet.kube import Kind
    from gpufleet.testing.fake_cluster import FakeCluster

    store = FakeCluster()
    store.put(Kind.QUEUE, {"metadata": {"name": "train"}, "spec": {}})
    for i in range(spot_nodes):
        store.put(Kind.NODE, _node(f"spot-{i:04d}", True))
        store.put(Kind.NODE, _node(f"od-{i:04d}", False))
    gang_of: dict[str, str] = {}
    slots = [(f"spot-{n:04d}", index) for n in range(spot_nodes) for index in ("0,1,2,3", "4,5,6,7")]
    for g in range(len(slots) // gang_size):
        group = f"g{g:05d}"
        store.put(Kind.POD_GROUP, {"metadata": {"name": group, "namespace": "ml", "creationTimestamp": CREATED},
                                   "spec": {"minMember": gang_size}})
        for m in range(gang_size):
            node, index = slots[g * gang_size + m]
            name = f"{group}-{m}"
            store.put(Kind.POD, _pod(name, group, node, index))
            gang_of[name] = group
    store.calls.clear()
    return store, gang_of


async def _run(spot_nodes: int, gang_size: int, concurrency: int) -> dict[str, Any]:
    from gpufleet.kube import Kind
    from gpufleet.kube.client.lightkube_api import connect
    from gpufleet.kube.client.port import RealClock
    from gpufleet.kube.controller.loop import Controller, ControllerConfig
    from gpufleet.testing.emulator import ApiServerEmulator

    store, gang_of = _store(spot_nodes, gang_size)
    async with ApiServerEmulator(store=store) as emulator:
        api = connect(server=emulator.url_text, field_manager="bench", timeout=30.0)
        config = ControllerConfig(identity="bench", min_interval=0.05, concurrency=concurrency,
                                  scheduled_events=False)
        controller = Controller(api, RealClock(), config)
        task = asyncio.create_task(controller.run())
        while not controller.ready or controller.cycles == 0:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        started = time.perf_counter()
        cpu0 = time.process_time()
        for i in range(spot_nodes):  # the notices, all at once
            obj = dict(store.object(Kind.NODE, "", f"spot-{i:04d}") or {})
            obj["spec"] = {"taints": [{"key": ITN, "effect": "NoSchedule"}]}
            store.put(Kind.NODE, obj)
        waiting = set(gang_of)  # original pods not yet gone
        replacements: set[str] = set()
        unbound: set[str] = set()  # replacements not bound yet (the checks shrink with the work left)
        evicted_at = first_evicted_at = None
        while True:
            for name in [n for n in waiting if store.object(Kind.POD, "ml", n) is None]:
                waiting.discard(name)
                store.put(Kind.POD, _pod(f"{name}-r", gang_of[name]))  # its owner makes it again
                replacements.add(f"{name}-r")
                unbound.add(f"{name}-r")
            if len(waiting) < len(gang_of) and first_evicted_at is None:
                first_evicted_at = time.perf_counter() - started
            if not waiting and evicted_at is None:
                evicted_at = time.perf_counter() - started
            unbound = {r for r in unbound if not _node_of(store.object(Kind.POD, "ml", r))}
            if not waiting and not unbound:
                break
            if time.perf_counter() - started > 300:
                raise SystemExit("not done within 300 s")
            await asyncio.sleep(0.05)
        requeued_at = time.perf_counter() - started
        cpu = time.process_time() - cpu0
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()
    evictions = [c for c in store.calls if c.op == "evict" and c.status == 201]
    refused = sum(1 for c in store.calls if c.op == "evict" and c.status != 201)
    per_pod: dict[str, int] = {}
    for call in evictions:
        per_pod[call.name] = per_pod.get(call.name, 0) + 1
    landed = {(store.object(Kind.POD, "ml", r) or {})["spec"]["nodeName"][:3] for r in replacements}
    assert set(per_pod) == set(gang_of) and set(per_pod.values()) == {1}, "every pod evicted exactly once"
    assert landed == {"od-"}, f"replacements landed on {landed}"
    return {"spot_nodes": spot_nodes, "gangs": len(set(gang_of.values())), "pods": len(gang_of),
            "first_evicted_s": round(first_evicted_at or 0.0, 3), "all_evicted_s": round(evicted_at or 0.0, 3),
            "all_requeued_and_bound_s": round(requeued_at, 3),
            "cpu_s": round(cpu, 2), "evict_calls": len(evictions), "evict_refused": refused,
            "podgroup_patches": sum(1 for c in store.calls if c.op == "patch" and c.kind is Kind.POD_GROUP)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spot-nodes", type=int, default=1000)
    parser.add_argument("--gang-size", type=int, default=4, help="pods per gang (even: two pods a node)")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    runs = [asyncio.run(_run(args.spot_nodes, args.gang_size, args.concurrency)) for _ in range(args.repeat)]
    for run in runs:
        print(json.dumps(run))
    if len(runs) > 1:
        print(json.dumps({"median_all_requeued_and_bound_s":
                          statistics.median(r["all_requeued_and_bound_s"] for r in runs)}))


if __name__ == "__main__":
    main()
