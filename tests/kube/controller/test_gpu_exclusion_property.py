"""The invariant over the controller's output (issue 11): after its cycles, no GPU is ever held by a
whole-GPU pod and any other pod, and the blocks on one GPU never exceed it. Random clusters with
running whole and fractional pods (their gpu-index annotations as the scheduler wrote them) and
pending ones, scheduled by the real controller over the in-memory API; the GPUs held are read back
from what the controller wrote on the pods (the annotations the device plugin and the webhook read)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.kube.client.port import Kind
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import informing, make_controller, node, pod, queue

GPUS = 4


@st.composite
def clusters(draw: st.DrawFn) -> list[tuple[Kind, dict[str, Any]]]:
    objects: list[tuple[Kind, dict[str, Any]]] = [(Kind.QUEUE, queue("team-a", 64))]
    for n in range(draw(st.integers(1, 2))):
        name = f"n{n}"
        objects.append((Kind.NODE, node(name, gpus=GPUS, labels={"nvidia.com/gpu.memory": "81920"})))
        for g in range(GPUS):  # each GPU: free, held whole, or shared by running fractional pods
            kind = draw(st.sampled_from(["free", "free", "whole", "shares"]))
            if kind == "whole":
                objects.append((Kind.POD, pod(f"run-{name}-{g}", 1, node_name=name, phase="Running",
                                              gpu_index=str(g))))
            elif kind == "shares":
                for k in range(draw(st.integers(1, 2))):
                    objects.append((Kind.POD, pod(f"run-{name}-{g}-{k}", 0, node_name=name, phase="Running",
                                                  gpu_index=str(g), blocks=draw(st.integers(10, 45)))))
    for i in range(draw(st.integers(1, 8))):
        if draw(st.booleans()):
            objects.append((Kind.POD, pod(f"p-{i}", draw(st.integers(1, 3)), created=f"2026-01-01T00:00:{i:02d}Z")))
        else:
            objects.append((Kind.POD, pod(f"p-{i}", 0, blocks=draw(st.integers(5, 100)),
                                          created=f"2026-01-01T00:00:{i:02d}Z")))
    return objects


async def _schedule(objects: list[tuple[Kind, dict[str, Any]]]) -> FakeCluster:
    cluster = FakeCluster()
    for kind, obj in objects:
        cluster.put(kind, obj)
    controller = make_controller(cluster)
    async with informing(controller):
        for _ in range(2):
            await controller.cycle()
            for _ in range(50):
                await asyncio.sleep(0)
    return cluster


@settings(max_examples=40, deadline=None)
@given(clusters())
def test_no_gpu_is_held_whole_and_by_any_other_pod(objects: list[tuple[Kind, dict[str, Any]]]) -> None:
    cluster = asyncio.run(_schedule(objects))
    whole: dict[tuple[str, int], list[str]] = defaultdict(list)
    shares: dict[tuple[str, int], list[int]] = defaultdict(list)
    bound_new = 0
    for obj in cluster.objects(Kind.POD):
        node_name = (obj.get("spec") or {}).get("nodeName")
        if not node_name:
            continue
        bound_new += obj["metadata"]["name"].startswith("p-")
        annotations = obj["metadata"].get("annotations") or {}
        indices = [int(g) for g in annotations.get("gpufleet.dev/gpu-index", "").split(",") if g]
        blocks = annotations.get("gpufleet.dev/gpu-blocks")
        for g in indices:
            assert 0 <= g < GPUS, obj["metadata"]["name"]
            if blocks is None:
                whole[(node_name, g)].append(obj["metadata"]["name"])
            else:
                shares[(node_name, g)].append(int(blocks))
        if blocks is not None:
            assert len(indices) == 1, obj["metadata"]["name"]
    for cell, holders in whole.items():
        assert len(holders) == 1 and not shares.get(cell), (cell, holders, shares.get(cell))
    for cell, blocks in shares.items():
        assert sum(blocks) <= 100, (cell, blocks)
