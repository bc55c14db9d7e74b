"""Running pods whose gpu-index annotations conflict (two pods on one GPU, a share on a GPU held
whole, shares above 100 blocks) or name GPUs their node does not have: the engine warns and keeps
its accounting safe (docs/semantics-notes.md, "Cluster state the engine does not trust")."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain import (
    BLOCKS_PER_GPU,
    CPU,
    GPU,
    MEMORY,
    MILLI,
    Node,
    NodeName,
    Pod,
    PriorityClass,
    Queue,
    QueueName,
    QueueResource,
    Snapshot,
)
from gpufleet.engine.scheduler import Engine

NS = "ml"
QUEUE = QueueName("q")
MAX_INDEX = 6  # annotations name GPUs 0..6 of nodes with 0..4 GPUs: many out of range


@dataclass(frozen=True)
class Case:
    snapshot: Snapshot
    running: tuple[Pod, ...]


def _pod(name: str, *, gpus: int = 0, blocks: int | None = None, node: str | None = None,
         index: tuple[int, ...] = (), priority: int = 10, start: float = 0.0) -> Pod:
    return Pod(
        namespace=NS, name=name, requests={CPU: MILLI, MEMORY: MILLI, **({GPU: gpus * MILLI} if gpus else {})},
        gpu_blocks=blocks, priority=priority, queue_label=QUEUE,
        node_name=NodeName(node) if node else None, phase="Running" if node else "Pending",
        creation_time=start, start_time=start if node else None, gpu_index=index,
    )


@st.composite
def cases(draw: st.DrawFn) -> Case:
    nodes = []
    for i in range(draw(st.integers(1, 3))):
        gpus = draw(st.integers(0, 4))
        unhealthy = draw(st.frozensets(st.integers(0, 3), max_size=1))
        nodes.append(Node(NodeName(f"n{i}"), allocatable={CPU: 64 * MILLI, MEMORY: 64 * MILLI, "pods": 110 * MILLI,
                                                          GPU: gpus * MILLI}, unhealthy_gpus=unhealthy))
    running: list[Pod] = []
    for i in range(draw(st.integers(0, 10))):
        node = draw(st.sampled_from(nodes)).name
        priority = draw(st.sampled_from([10, 50, 200]))
        if draw(st.booleans()):
            whole = draw(st.integers(1, 3))
            index = tuple(draw(st.lists(st.integers(0, MAX_INDEX), min_size=whole, max_size=whole, unique=True)))
            if draw(st.integers(0, 5)) == 0:
                index = ()  # no annotation: the lowest free GPUs
            running.append(_pod(f"r{i}", gpus=whole, node=node, index=index, priority=priority, start=float(i)))
        else:
            index = (draw(st.integers(0, MAX_INDEX)),)
            running.append(_pod(f"r{i}", blocks=draw(st.integers(1, BLOCKS_PER_GPU)), node=node, index=index,
                                priority=priority, start=float(i)))
    pending: list[Pod] = []
    for i in range(draw(st.integers(0, 6))):
        priority = draw(st.sampled_from([10, 50, 150]))
        if draw(st.booleans()):
            pending.append(_pod(f"p{i}", gpus=draw(st.integers(1, 2)), priority=priority, start=100.0 + i))
        else:
            pending.append(_pod(f"p{i}", blocks=draw(st.integers(1, BLOCKS_PER_GPU)), priority=priority,
                                start=100.0 + i))
    quota = draw(st.integers(0, 8))
    snapshot = Snapshot(
        nodes=tuple(nodes), pods=tuple(running + pending),
        priority_classes=(PriorityClass("unused", 0),),
        queues=(Queue(QUEUE, resources={GPU: QueueResource(quota=quota * MILLI)}),),
    )
    return Case(snapshot, tuple(running))


def _cells_ok(engine: Engine) -> None:
    free = engine.cluster.gpu_free
    assert int(free.min(initial=0)) >= -1 and int(free.max(initial=0)) <= BLOCKS_PER_GPU, free


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(cases())
def test_running_annotations_never_break_the_gpu_accounting(case: Case) -> None:
    engine = Engine(case.snapshot)
    _cells_ok(engine)
    decisions = engine.run()
    _cells_ok(engine)
    counts = {n.name: n.gpu_count for n in case.snapshot.nodes}
    evicted = {e.pod for e in decisions.evictions}
    # What the running pods that stay hold, as their annotations name it (in range only).
    whole_held: dict[tuple[str, int], list[str]] = defaultdict(list)
    share_held: dict[tuple[str, int], int] = defaultdict(int)
    for pod in case.running:
        if pod.key in evicted:
            continue
        node = str(pod.node_name)
        named = [g for g in pod.gpu_index if g < counts[node]]
        if pod.gpu_blocks is None:
            for g in named:
                whole_held[(node, g)].append(pod.key)
        elif named:
            share_held[(node, named[0])] += pod.gpu_blocks
    new_shares: dict[tuple[str, int], int] = defaultdict(int)
    for b in decisions.bindings:
        for g in b.gpus:
            cell = (str(b.node), g)
            assert cell not in whole_held, f"{b.pod} placed on GPU {g} of {b.node}, held by {whole_held[cell]}"
            if b.gpu_blocks is None:
                assert cell not in share_held, f"{b.pod} given GPU {g} of {b.node} whole, shared by running pods"
            else:
                new_shares[cell] += b.gpu_blocks
    for cell, blocks in new_shares.items():
        assert share_held.get(cell, 0) + blocks <= BLOCKS_PER_GPU, f"GPU {cell} over-committed by new shares"
    # Every GPU held twice, and every index out of range, is named in a warning.
    for (node, g), keys in whole_held.items():
        if len(keys) > 1 or share_held.get((node, g)):
            assert any(f"GPU {g} of node {node} is held by more than one running pod" in w
                       for w in decisions.warnings), (node, g, decisions.warnings)
    for pod in case.running:
        bad = [g for g in pod.gpu_index if g >= counts[str(pod.node_name)]]
        if bad:
            assert any(w.startswith(f"pod {pod.key} is annotated with GPU") for w in decisions.warnings)


def test_two_pods_on_one_gpu_are_named_and_the_gpu_stays_out_when_one_is_released() -> None:
    node = Node(NodeName("n1"), allocatable={CPU: 8 * MILLI, MEMORY: 8 * MILLI, "pods": 10 * MILLI, GPU: 2 * MILLI})
    a = _pod("a", gpus=1, node="n1", index=(1,))
    b = _pod("b", gpus=1, node="n1", index=(1,), start=1.0)
    engine = Engine(Snapshot(nodes=(node,), pods=(a, b)))
    assert engine.log.warnings[:1] == ["GPU 1 of node n1 is held by more than one running pod (ml/a, ml/b): "
                                       "out of service"]
    assert engine.cluster.gpu_free.tolist() == [[BLOCKS_PER_GPU, -1]]
    engine.placer.release(0)  # a leaves: b still holds GPU 1
    assert engine.cluster.gpu_free.tolist() == [[BLOCKS_PER_GPU, -1]]
    assert np.array_equal(engine.cluster.free_whole, [1])
