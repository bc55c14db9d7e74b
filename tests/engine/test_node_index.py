"""The free-GPU node index (engine/nodeindex.py) chooses exactly what the vectorised argmin chooses.

Random clusters (GPU counts, unhealthy GPUs, labels, taints, unschedulable nodes) and random
sequences of whole-GPU pods placed, released and placed again: before every placement the
index's node must be the brute-force argmin (fewest free GPUs for binpack, most for spread, ties
to the lowest node index, among the nodes the pod's static mask allows whose free resources and
GPUs cover it), and the Placer with the index must return the same assignment (node and GPUs)
as the Placer without it. The engine-level property: ``schedule()`` decides the same with and
without the indexes (free-GPU buckets, per-domain sums, passes over one domain's nodes), on
random snapshots and on gangs with a required or preferred rack.
"""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain import (
    CPU,
    GPU,
    MEMORY,
    MILLI,
    PODS,
    Node,
    NodeName,
    Placement,
    Pod,
    SchedulerConfig,
    Snapshot,
    Taint,
    TaintEffect,
    Toleration,
)
from gpufleet.engine import nodeindex, schedule
from gpufleet.engine.cluster import BoolArray, ClusterState
from gpufleet.engine.nodeindex import FALLBACK, FreeGpuIndex
from gpufleet.engine.placement import Placer
from gpufleet.engine.session import PlacementSession

from .strategies import gang_snapshots, snapshots

GIB = 1024**3 * MILLI
NS = "ml"
ZONE = "zone"
TAINT = Taint("dedicated", "x", TaintEffect.NO_SCHEDULE)

NODE = st.tuples(
    st.sampled_from([0, 1, 2, 4, 8]),  # GPUs
    st.integers(2, 24),  # CPUs
    st.sampled_from(["a", "b", None]),  # zone label
    st.integers(0, 9),  # 0: unschedulable, 1: tainted, 2: one GPU unhealthy
)
POD = st.tuples(
    st.sampled_from([1, 1, 2, 3, 4, 8]),  # whole GPUs
    st.integers(1, 8),  # CPUs
    st.sampled_from(["a", "b", None]),  # nodeSelector zone
    st.booleans(),  # tolerates the taint
)
OPS = st.lists(st.one_of(st.tuples(st.just("place"), POD), st.tuples(st.just("release"), st.integers(0, 50))),
               min_size=1, max_size=40)


def make_node(i: int, spec: tuple[int, int, str | None, int]) -> Node:
    gpus, cpu, zone, flag = spec
    return Node(
        NodeName(f"n{i:02d}"),
        allocatable={CPU: cpu * MILLI, MEMORY: 64 * GIB, PODS: 110 * MILLI, GPU: gpus * MILLI},
        labels={ZONE: zone} if zone else {},
        unschedulable=flag == 0,
        taints=(TAINT,) if flag == 1 else (),
        unhealthy_gpus=(0,) if flag == 2 and gpus else (),
    )


def make_pod(i: int, spec: tuple[int, int, str | None, bool]) -> Pod:
    whole, cpu, zone, tolerates = spec
    return Pod(NS, f"p{i:03d}", requests={CPU: cpu * MILLI, MEMORY: GIB, GPU: whole * MILLI},
               node_selector={ZONE: zone} if zone else {},
               tolerations=(Toleration("dedicated", "Equal", "x", TaintEffect.NO_SCHEDULE),) if tolerates else (),
               creation_time=1_000_000.0 + i)


def brute_force(session: PlacementSession, pod: Pod, spread: bool) -> int:
    """The argmin of the placement's score, node by node in Python (-1: no node fits)."""
    c = session.cluster
    static = session.feasibility.mask(pod)
    best: tuple[int, int] | None = None
    for i in range(len(c.nodes)):
        free = {r: int(c.free[i, j]) for r, j in c.res_index.items()}
        fits = (static[i] and free[CPU] >= pod.requests[CPU] and free[MEMORY] >= pod.requests[MEMORY]
                and free[PODS] >= MILLI and int(c.free_whole[i]) >= pod.requests[GPU] // MILLI)
        if fits:
            score = -int(c.free_whole[i]) if spread else int(c.free_whole[i])
            if best is None or (score, i) < best:
                best = (score, i)
    return -1 if best is None else best[1]


@settings(max_examples=60, deadline=None)
@given(st.lists(NODE, min_size=1, max_size=14), OPS, st.booleans(), st.sampled_from([16, 1]))
def test_index_is_the_brute_force_argmin(nodes: list[tuple[int, int, str | None, int]],
                                         ops: list[tuple[str, object]], spread: bool, limit: int) -> None:
    cluster_nodes = [make_node(i, spec) for i, spec in enumerate(nodes)]
    config = SchedulerConfig(placement=Placement.SPREAD if spread else Placement.BINPACK)
    indexed, plain = PlacementSession(cluster_nodes, config), PlacementSession(cluster_nodes, config)
    plain.placer.USE_INDEX = False
    placed: list[Pod] = []
    with mock.patch.object(nodeindex, "SCAN_LIMIT", limit):  # 1: the fallback path is taken too
        for i, (op, arg) in enumerate(ops):
            if op == "release":
                if placed:
                    gone = placed.pop(int(str(arg)) % len(placed))
                    indexed.release(gone.key)
                    plain.release(gone.key)
                continue
            assert isinstance(arg, tuple)
            pod = make_pod(i, arg)
            want = brute_force(indexed, pod, spread)
            info = indexed._info(pod)
            assert info is not None
            index = indexed.placer._index or FreeGpuIndex(indexed.cluster)
            indexed.placer._index = index
            static = indexed.feasibility.mask(pod)
            got = index.choose(indexed.feasibility.key(pod), lambda: static, info.whole, info.res,  # noqa: B023
                               spread)
            assert got in (want, FALLBACK)
            a, b = indexed.place(pod), plain.place(pod)
            assert a == b
            assert (a.node if a else -1) == (cluster_nodes[want].name if want >= 0 else -1)
            if a is not None:
                placed.append(pod)


def test_bulk_changes_rebuild_the_buckets() -> None:
    """Many changes at once (running pods bound in bulk) rebuild the buckets instead of pushing."""
    nodes = [make_node(i, (8, 16, None, 3)) for i in range(4)]
    cluster = ClusterState(nodes, ())
    index = FreeGpuIndex(cluster)
    static = cluster.schedulable.copy()

    def mask() -> BoolArray:
        return static

    res = cluster.alloc[0] * 0
    assert index.choose("k", mask, 8, res, False) == 0
    for _ in range(3):
        for n in range(4):
            cluster.take(n, res, (0,), None) if cluster.gpu_free[n, 0] else cluster.give_back(n, res, (0,), None)
    cluster.take(2, res, (1,), None)
    assert index.choose("k", mask, 1, res, False) == 2  # 6 free: fewest
    assert index.choose("k", mask, 7, res, False) == 0
    assert index.choose("k", mask, 8, res, False) == -1
    assert index.choose("k", mask, 7, res, True) == 0


@settings(max_examples=60, deadline=None)
@given(st.one_of(snapshots(), gang_snapshots(min_nodes=4, max_nodes=16, max_running=8, max_pending=8)))
def test_schedule_decides_the_same_without_the_index(snapshot: Snapshot) -> None:
    with_index = schedule(snapshot)
    with mock.patch.object(Placer, "USE_INDEX", False):
        without = schedule(snapshot)
    assert with_index == without
