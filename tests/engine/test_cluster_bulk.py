"""``ClusterState.take_many`` (the running pods' bulk binding) leaves the state ``take`` leaves."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain import BLOCKS_PER_GPU, CPU, GPU, MEMORY, MILLI, Node, NodeName
from gpufleet.engine.cluster import ClusterState

WIDTH = 4  # GPUs per node at most


@dataclass(frozen=True)
class Held:
    """What one running pod holds: a node, requests over the cluster's resources, GPUs."""

    node: int
    res: tuple[int, ...]
    gpus: tuple[int, ...]
    blocks: int | None  # a share of gpus[0], or None for whole GPUs (or none)


@st.composite
def clusters_and_pods(draw: st.DrawFn) -> tuple[list[Node], list[Held]]:
    n_nodes = draw(st.integers(1, 4))
    nodes = []
    for i in range(n_nodes):
        gpus = draw(st.integers(0, WIDTH))
        unhealthy = draw(st.frozensets(st.integers(0, max(gpus - 1, 0)), max_size=2)) if gpus else frozenset()
        nodes.append(Node(NodeName(f"n{i}"), allocatable={CPU: 8 * MILLI, MEMORY: 64 * MILLI, GPU: gpus * MILLI},
                          unhealthy_gpus=unhealthy))
    width = max(1, max(n.gpu_count for n in nodes))
    held = []
    for _ in range(draw(st.integers(0, 12))):
        node = draw(st.integers(0, n_nodes - 1))
        res = (draw(st.integers(0, 4 * MILLI)), draw(st.integers(0, 8 * MILLI)), MILLI)
        kind = draw(st.sampled_from(["none", "whole", "share"]))
        if kind == "whole":
            gpus = tuple(draw(st.lists(st.integers(0, width - 1), min_size=1, max_size=width, unique=True)))
            held.append(Held(node, res, gpus, None))
        elif kind == "share":
            gpu = draw(st.integers(0, width - 1))
            held.append(Held(node, res, (gpu,), draw(st.integers(1, BLOCKS_PER_GPU))))
        else:
            held.append(Held(node, res, (), None))
    return nodes, held


def state(c: ClusterState) -> tuple[object, ...]:
    return (c.free.tolist(), c.gpu_free.tolist(), c.gpu_whole.tolist(), c.free_whole.tolist(), sorted(set(c.dirty)))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(clusters_and_pods())
def test_take_many_equals_take_pod_by_pod_whole_gpus_first(case: tuple[list[Node], list[Held]]) -> None:
    # Snapshots may over-commit a GPU (a share on a GPU held whole, shares above 100 blocks);
    # the bulk result is that of taking the whole GPUs first, then the shares.
    nodes, held = case
    one_by_one = ClusterState(nodes, ())
    assert one_by_one.resources[:3] == [CPU, MEMORY, "pods"]
    for h in sorted(held, key=lambda h: h.blocks is not None):
        one_by_one.take(h.node, np.array(h.res, dtype=np.int64), h.gpus, h.blocks)

    bulk = ClusterState(nodes, ())
    whole = [(h.node, g) for h in held if h.blocks is None for g in h.gpus]
    shares = [(h.node, h.gpus[0], h.blocks) for h in held if h.blocks is not None]
    bulk.take_many(
        np.array([h.node for h in held], dtype=np.int64),
        np.array([h.res for h in held], dtype=np.int64).reshape(len(held), 3),
        (np.array([n for n, _ in whole], dtype=np.int64), np.array([g for _, g in whole], dtype=np.int64)),
        (np.array([n for n, _, _ in shares], dtype=np.int64), np.array([g for _, g, _ in shares], dtype=np.int64),
         np.array([b for _, _, b in shares], dtype=np.int64)),
    )
    assert state(bulk) == state(one_by_one)
