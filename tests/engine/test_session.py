"""PlacementSession: one pod at a time with the engine's own placement code.

The main property: for pods of one queue and one priority, no gangs, placed in creation order,
the session's bindings equal the bindings of ``schedule()`` for the same pods (same config).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain import (
    CPU,
    GPU,
    MEMORY,
    MILLI,
    PODS,
    Binding,
    Node,
    NodeName,
    Placement,
    Pod,
    PodKey,
    SchedulerConfig,
    Snapshot,
)
from gpufleet.engine import schedule
from gpufleet.engine.fragmentation import TargetShape, TargetWorkload
from gpufleet.engine.session import PlacementSession

GIB = 1024**3 * MILLI
NS = "ml"


def node(name: str, gpus: int, cpu: int = 16, memory_gib: int = 64) -> Node:
    return Node(NodeName(name), allocatable={CPU: cpu * MILLI, MEMORY: memory_gib * GIB, PODS: 110 * MILLI,
                                             GPU: gpus * MILLI})


def pod(i: int, whole: int = 0, blocks: int | None = None, cpu: int = 1, memory_gib: int = 1) -> Pod:
    requests = {CPU: cpu * MILLI, MEMORY: memory_gib * GIB}
    if whole:
        requests[GPU] = whole * MILLI
    return Pod(NS, f"p{i:03d}", requests=requests, gpu_blocks=blocks, creation_time=1_000_000.0 + i)


NODES = st.lists(
    st.builds(lambda g, c, m: (g, c, m), st.sampled_from([0, 1, 2, 4, 8]), st.integers(2, 32), st.integers(4, 64)),
    min_size=1, max_size=5,
)
PODS_ = st.lists(
    st.one_of(
        st.builds(lambda c, m: ("cpu", 0, c, m), st.integers(1, 12), st.integers(1, 16)),
        st.builds(lambda w, c, m: ("whole", w, c, m), st.sampled_from([1, 2, 4, 8]), st.integers(1, 12),
                  st.integers(1, 16)),
        st.builds(lambda b, c, m: ("share", b, c, m), st.integers(1, 99), st.integers(1, 8), st.integers(1, 16)),
    ),
    min_size=1, max_size=14,
)


def build(node_specs: list[tuple[int, int, int]], pod_specs: list[tuple[str, int, int, int]]) -> tuple[
        list[Node], list[Pod]]:
    nodes = [node(f"n{i}", g, c, m) for i, (g, c, m) in enumerate(node_specs)]
    pods = []
    for i, (kind, amount, cpu, mem) in enumerate(pod_specs):
        if kind == "cpu":
            pods.append(pod(i, cpu=cpu, memory_gib=mem))
        elif kind == "whole":
            pods.append(pod(i, whole=amount, cpu=cpu, memory_gib=mem))
        else:
            pods.append(pod(i, blocks=amount, cpu=cpu, memory_gib=mem))
    return nodes, pods


@settings(max_examples=120, deadline=None, derandomize=True)
@given(node_specs=NODES, pod_specs=PODS_, placement=st.sampled_from(list(Placement)))
def test_session_places_like_schedule(node_specs: list[tuple[int, int, int]],
                                      pod_specs: list[tuple[str, int, int, int]], placement: Placement) -> None:
    nodes, pods = build(node_specs, pod_specs)
    config = SchedulerConfig(placement=placement)
    decided = schedule(Snapshot(nodes=tuple(nodes), pods=tuple(pods), config=config))
    # defrag in schedule() keeps room for the snapshot's pods; give the session the same target
    session = PlacementSession(nodes, config, target=pods)
    placed = [b for p in pods if (b := session.place(p)) is not None]
    assert sorted(placed, key=lambda b: b.pod) == list(decided.bindings)
    assert session.bound == len(placed)


def test_place_commits_and_release_gives_back() -> None:
    session = PlacementSession([node("a", 1), node("b", 2)], SchedulerConfig())
    first = session.place(pod(1, whole=1))
    assert first is not None
    # binpack: the node with the fewest free GPUs
    assert first == Binding(PodKey(f"{NS}/p001"), NodeName("a"), (0,))
    assert session.place(pod(2, whole=2)) == Binding(PodKey(f"{NS}/p002"), NodeName("b"), (0, 1))
    assert session.place(pod(3, whole=1)) is None  # full
    session.release(first.pod)
    assert session.place(pod(3, whole=1)) == Binding(PodKey(f"{NS}/p003"), NodeName("a"), (0,))


def test_share_binding_carries_its_blocks() -> None:
    session = PlacementSession([node("a", 2)], SchedulerConfig())
    b = session.place(pod(1, blocks=30))
    assert b is not None and b.gpu_blocks == 30 and b.gpus == (0,)


def test_a_pod_asking_for_a_resource_no_node_has_fits_nowhere() -> None:
    session = PlacementSession([node("a", 2)], SchedulerConfig())
    odd = Pod(NS, "odd", requests={CPU: 1000, "example.com/fpga": 1000})
    assert session.place(odd) is None
    assert session.place(Pod(NS, "done", requests={CPU: 1000}, phase="Succeeded")) is None


def test_placing_the_same_pod_twice_is_an_error() -> None:
    session = PlacementSession([node("a", 2)], SchedulerConfig())
    session.place(pod(1, whole=1))
    try:
        session.place(pod(1, whole=1))
    except ValueError as err:
        assert "already placed" in str(err)
    else:  # pragma: no cover
        raise AssertionError("expected ValueError")


def test_defrag_session_keeps_a_whole_gpu_for_the_target() -> None:
    # Target: whole-GPU tasks. A share of 30 blocks on a node whose GPU 0 already holds 60 blocks:
    # on GPU 0 it keeps GPU 1 whole (no fragment), on GPU 1 it would leave no full GPU (every free
    # block a fragment). binpack agrees here (fewest free blocks that fit) ...
    target = TargetWorkload((TargetShape(cpu=1000, gpus=1, blocks=100),), (1,))
    session = PlacementSession([node("a", 2)], SchedulerConfig(placement=Placement.DEFRAG), target=target)
    assert session.place(pod(1, blocks=60)) is not None
    second = session.place(pod(2, blocks=30))
    assert second is not None and second.gpus == (0,)
    # ... and a 10-block share now fills GPU 0 (0 left) rather than breaking GPU 1.
    third = session.place(pod(3, blocks=10))
    assert third is not None and third.gpus == (0,)


def test_defrag_with_an_empty_target_still_places() -> None:
    # No shapes to keep room for: every cost is 0, the fullest node wins.
    session = PlacementSession([node("a", 2), node("b", 1)], SchedulerConfig(placement=Placement.DEFRAG),
                               target=TargetWorkload((), ()))
    first = session.place(pod(1, whole=1))
    assert first is not None and first.node == "b"
    second = session.place(pod(2, blocks=50))
    assert second is not None and second.node == "a"
