"""The invariant over what the controller writes for DRA claims (issue 11): no GPU device is ever
held by a whole-GPU claim and any other claim, shares of one device never exceed it, unhealthy
devices get nothing new, and every binding's devices are the GPUs it was bound to.

The controller writes exactly ``resolve_devices`` + ``schedule`` + ``attach``; random clusters with
held allocations (whole and fractional) and pending whole, fractional and shared claims."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.adapters import resolve_devices
from gpufleet.domain import (
    CPU,
    MEMORY,
    MILLI,
    PODS,
    Device,
    DeviceClass,
    DeviceRequest,
    DeviceResult,
    Node,
    NodeName,
    Pod,
    PodClaim,
    ResourceClaim,
    ResourceSlice,
    Snapshot,
)
from gpufleet.engine import schedule

# cel-python's parser raises the recursion limit on its first use: use it before hypothesis watches.
celpy = __import__("celpy")
celpy.Environment().compile("true")

DRIVER = "gpu.nvidia.com"
CLASS = DeviceClass(DRIVER, selectors=(f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'",))


@st.composite
def clusters(draw: st.DrawFn) -> Snapshot:
    nodes: list[Node] = []
    slices: list[ResourceSlice] = []
    pods: list[Pod] = []
    claims: list[ResourceClaim] = []
    n_nodes = draw(st.integers(1, 3))
    for n in range(n_nodes):
        name = f"n{n}"
        gpus = draw(st.integers(1, 8))
        unhealthy = draw(st.frozensets(st.integers(0, gpus - 1), max_size=2))
        nodes.append(Node(NodeName(name), allocatable={CPU: 64 * MILLI, MEMORY: 2**40 * MILLI, PODS: 110 * MILLI},
                          unhealthy_gpus=unhealthy, gpu_memory_mib=81920))
        slices.append(ResourceSlice(f"{name}-s", DRIVER, name, NodeName(name), 1, tuple(
            Device(f"gpu-{g}", {f"{DRIVER}/type": "gpu", f"{DRIVER}/index": g}) for g in range(gpus))))
        # Held allocations: each free device is left alone, held whole, or shared by fractional pods.
        for g in range(gpus):
            kind = draw(st.sampled_from(["free", "free", "whole", "shares"]))
            holders = [("whole", None)] if kind == "whole" else (
                [("share", draw(st.integers(10, 50))) for _ in range(draw(st.integers(1, 2)))] if kind == "shares" else [])
            for k, (_what, blocks) in enumerate(holders):
                pname = f"run-{name}-{g}-{k}"
                cname = f"{pname}-gpu"
                claims.append(ResourceClaim("ml", cname, requests=(DeviceRequest("gpu", DRIVER),),
                                            allocation=(DeviceResult("gpu", DRIVER, name, f"gpu-{g}"),),
                                            allocated_node=NodeName(name), reserved_for=(pname,)))
                pods.append(Pod("ml", pname, requests={CPU: MILLI}, node_name=NodeName(name), phase="Running",
                                gpu_blocks=blocks, resource_claims=(PodClaim("gpu", claim=cname),)))
    for i in range(draw(st.integers(1, 10))):
        pname = f"p-{i:02d}"
        shape = draw(st.sampled_from(["whole", "share", "shared-claim"]))
        if shape == "shared-claim" and i > 0:
            cname = f"p-{draw(st.integers(0, i - 1)):02d}-gpu"
            blocks = None
        else:
            cname = f"{pname}-gpu"
            blocks = draw(st.integers(5, 100)) if shape == "share" else None
            count = 1 if blocks is not None else draw(st.integers(1, 4))
            claims.append(ResourceClaim("ml", cname, requests=(DeviceRequest("gpu", DRIVER, count),)))
        pods.append(Pod("ml", pname, requests={CPU: MILLI}, gpu_blocks=blocks, creation_time=float(i),
                        resource_claims=(PodClaim("gpu", claim=cname),)))
    present = {c.name for c in claims}
    pods = [p for p in pods if all(e.claim in present for e in p.resource_claims)]
    return Snapshot(nodes=tuple(nodes), pods=tuple(pods), resource_slices=tuple(slices), device_classes=(CLASS,),
                    resource_claims=tuple(claims))


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_no_device_is_held_whole_and_by_anything_else(snapshot: Snapshot) -> None:
    view = resolve_devices(snapshot)
    decisions = view.attach(schedule(view.snapshot))
    by_name = {p.name: p for p in snapshot.pods}
    # device -> claims holding it, and blocks of fractional claims on it
    holders: dict[tuple[str, str], set[str]] = defaultdict(set)
    whole: dict[tuple[str, str], set[str]] = defaultdict(set)
    blocks: dict[tuple[str, str], int] = defaultdict(int)
    for c in snapshot.resource_claims:
        if c.allocation:
            pod = by_name[c.reserved_for[0]]
            for r in c.allocation:
                holders[(r.pool, r.device)].add(c.name)
                if pod.gpu_blocks is None:
                    whole[(r.pool, r.device)].add(c.name)
                else:
                    blocks[(r.pool, r.device)] += pod.gpu_blocks
    unhealthy = {(n.name, f"gpu-{g}") for n in snapshot.nodes for g in n.unhealthy_gpus}
    for b in decisions.bindings:
        pod = by_name[b.pod.split("/")[1]]
        for alloc in b.devices:
            results = [(r.pool, r.device) for r in alloc.results]
            if alloc.shared:  # joins a claim held by a pod on the same node
                assert all(pool == b.node for pool, _ in results)
                continue
            assert results == [(b.node, f"gpu-{g}") for g in (b.gpus if pod.gpu_blocks is None else b.gpus[:1])]
            for device in results:
                assert device not in unhealthy, (b, device)
                holders[device].add(alloc.claim)
                if pod.gpu_blocks is None:
                    whole[device].add(alloc.claim)
                else:
                    blocks[device] += pod.gpu_blocks
    for device, claims in holders.items():
        if whole[device]:
            assert claims == whole[device] and len(claims) == 1, (device, claims)
        assert blocks[device] <= 100, (device, blocks[device])
