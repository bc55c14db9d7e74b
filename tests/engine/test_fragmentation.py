"""The fragmentation measure on hand-computed cases, its incremental updates, and the defrag scorer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain import CPU, GPU, MEMORY, MILLI, PODS, Node, NodeName, Pod
from gpufleet.engine.cluster import ClusterState
from gpufleet.engine.feasibility import StaticFeasibility
from gpufleet.engine.fragmentation import (
    INF,
    DefragScorer,
    FragmentationModel,
    TargetShape,
    TargetWorkload,
    lexmin,
    shape_of,
)

GIB = 1024**3 * MILLI


def node(name: str, gpus: int, cpu: int = 8, memory_gib: int = 64) -> Node:
    return Node(NodeName(name), allocatable={CPU: cpu * MILLI, MEMORY: memory_gib * GIB, PODS: 110 * MILLI,
                                             GPU: gpus * MILLI})


def model_of(nodes: list[Node], target: TargetWorkload) -> FragmentationModel:
    cluster = ClusterState(nodes, ())
    return FragmentationModel(cluster, StaticFeasibility(cluster.nodes, cluster.schedulable), target)


# Shapes of the hand case: A a share of 50 blocks and 2 CPUs (3 tasks), B one whole GPU and
# 4 CPUs (1 task), C CPU-only with 1 CPU (1 task).
SHARE_A = TargetShape(cpu=2000, gpus=1, blocks=50)
WHOLE_B = TargetShape(cpu=4000, gpus=1, blocks=100)
CPU_C = TargetShape(cpu=1000)
HAND = TargetWorkload((SHARE_A, WHOLE_B, CPU_C), (3, 1, 1))


def take_share(m: FragmentationModel, gpu: int, blocks: int, cpu: int) -> None:
    res = np.zeros(len(m.cluster.resources), dtype=np.int64)
    res[m.cluster.res_index[CPU]] = cpu
    m.cluster.take(0, res, [gpu], blocks)


def test_hand_case_free_gpus_100_and_40() -> None:
    # One node, GPUs with 100 and 40 free blocks, 8 CPUs free. T = 140.
    # A fits (one GPU has >= 50): its fragment is the 40 blocks of the GPU too small for it.
    # B fits (one GPU fully free): fragment 40. C is CPU-only: every free block, 140.
    # W = 3*40 + 1*40 + 1*140 = 300 blocks; F = 300 / 5 = 60 blocks = 600 milli-GPU.
    m = model_of([node("n1", 2)], HAND)
    take_share(m, 1, 60, 0)
    m.refresh()
    assert m.W.tolist() == [300]
    assert m.fragmented_milli() == pytest.approx(600.0)
    assert m.free_milli() == 1400


def test_hand_case_cpu_short_makes_every_free_block_a_fragment() -> None:
    # Same GPUs, 3 CPUs free: B (4 CPUs) cannot go there any more, so all 140 blocks are its
    # fragment: W = 3*40 + 140 + 140 = 400.
    m = model_of([node("n1", 2)], HAND)
    take_share(m, 1, 60, 5000)
    m.refresh()
    assert m.W.tolist() == [400]


def test_hand_case_deltas_of_a_share_on_each_gpu() -> None:
    # A share of 40 blocks and 1 CPU on GPU 0 leaves [60, 40]: A still fits (60 >= 50) with
    # fragment 40; B no longer fits (no full GPU): 100; C: 100. W = 120 + 100 + 100 = 320, +20.
    # On GPU 1 it leaves [100, 0]: A and B fit with no fragment, C: 100. W = 100, -200.
    m = model_of([node("n1", 2)], HAND)
    take_share(m, 1, 60, 0)
    m.refresh()
    rows = np.array([0])
    delta = m.delta_fractional(rows, 1000, 0, np.array([40]))
    assert delta.tolist() == [[20, -200]]
    # 70 blocks fit only GPU 0: [30, 40]: A lacks a GPU of 50: 70 each; B: 70; C: 70 -> W = 350.
    assert m.delta_fractional(rows, 1000, 0, np.array([70])).tolist() == [[50, INF]]


def test_whole_gpu_delta_matches_a_recomputation() -> None:
    # Taking GPU 0 whole: [0, 40]: A lacks a GPU: 40*3; B lacks a GPU: 40; C: 40 -> W = 200, -100.
    m = model_of([node("n1", 2)], HAND)
    take_share(m, 1, 60, 0)
    m.refresh()
    assert m.delta_whole(np.array([0]), 0, 0, 1).tolist() == [-100]


def test_memory_of_a_shape_counts_like_cpu() -> None:
    # A whole-GPU shape that needs 48 GiB: a node with 32 GiB free cannot host it, so both its free
    # GPUs are fragments (200 blocks), while the 64 GiB node has none (nodes in name order).
    shape = TargetShape(cpu=1000, gpus=1, blocks=100, memory=48 * GIB)
    m = model_of([node("small", 2, memory_gib=32), node("big", 2, memory_gib=64)], TargetWorkload((shape,), (1,)))
    assert m.W.tolist() == [0, 200]


def test_gpu_models_restrict_a_shape_to_its_nodes() -> None:
    from gpufleet.domain import SelectorRequirement, SelectorTerm
    from gpufleet.engine.feasibility import static_key

    t4 = Node(NodeName("t4"), labels={"nvidia.com/gpu.product": "T4"},
              allocatable={CPU: 8000, MEMORY: 8 * GIB, PODS: 110 * MILLI, GPU: 2000})
    a100 = Node(NodeName("a100"), labels={"nvidia.com/gpu.product": "A100"},
                allocatable={CPU: 8000, MEMORY: 8 * GIB, PODS: 110 * MILLI, GPU: 2000})
    pod = Pod("ns", "p", requests={CPU: 1000, GPU: 1000},
              affinity=(SelectorTerm((SelectorRequirement("nvidia.com/gpu.product", "In", ("A100",)),)),))
    shape = shape_of(pod)
    assert shape.constraints == static_key(pod)
    m = model_of([t4, a100], TargetWorkload((shape,), (1,)))
    # ClusterState orders nodes by name: a100 first. The T4 node's GPUs are all fragments.
    assert [n.name for n in m.cluster.nodes] == ["a100", "t4"]
    assert m.W.tolist() == [0, 200]


def test_popular_takes_shapes_until_the_coverage_and_breaks_ties_to_the_larger() -> None:
    a, b, c, d = (TargetShape(cpu=1000 * i, gpus=1, blocks=100) for i in range(1, 5))
    counts = {a: 5, b: 3, c: 1, d: 1}
    # 5 + 3 = 8 of 10 < 9.5: then the tie between c and d goes to the larger (d), 9 < 9.5, then c.
    assert TargetWorkload.popular(counts, 0.95).shapes == (a, b, d, c)
    assert TargetWorkload.popular(counts, 0.8).shapes == (a, b)
    assert TargetWorkload.popular(counts, 0.8).weights == (5, 3)
    assert TargetWorkload.popular(counts, 1.0, max_shapes=3).shapes == (a, b, d)


def test_shape_of_pods() -> None:
    assert shape_of(Pod("n", "a", requests={CPU: 500})) == TargetShape(cpu=500)
    assert shape_of(Pod("n", "b", requests={CPU: 500, GPU: 2000})) == TargetShape(500, 2, 100)
    assert shape_of(Pod("n", "c", requests={CPU: 500}, gpu_blocks=30)) == TargetShape(500, 1, 30)
    assert shape_of(Pod("n", "d", gpu_memory_bytes=8 * GIB)) == TargetShape(0, 1, 0, 8 * GIB)


def test_target_workload_rejects_bad_weights() -> None:
    with pytest.raises(ValueError):
        TargetWorkload((CPU_C,), (0,))
    with pytest.raises(ValueError):
        TargetWorkload((CPU_C,), (1, 2))


def test_lexmin_compares_keys_in_order_and_keeps_the_first_on_ties() -> None:
    cands = np.array([0, 1, 2, 3])
    assert lexmin(cands, [np.array([1, 0, 0, 0]), np.array([9, 5, 3, 3])]) == 2
    assert lexmin(cands, []) == 0


def test_defrag_scorer_picks_the_gpu_that_keeps_the_whole_gpu_shape() -> None:
    m_nodes = [node("n1", 2)]
    cluster = ClusterState(m_nodes, ())
    scorer = DefragScorer(cluster, StaticFeasibility(cluster.nodes, cluster.schedulable), HAND)
    res = np.zeros(len(cluster.resources), dtype=np.int64)
    cluster.take(0, res, [1], 60)
    fit = np.array([True])
    assert scorer.choose_share(1000, 0, 40, None, np.array([40]), fit, None) == (0, 1)
    assert scorer.choose_share(1000, 0, 70, None, np.array([70]), fit, None) == (0, 0)
    assert scorer.choose_share(1000, 0, 70, None, np.array([70]), np.array([False]), None) is None


# -- incremental updates equal a fresh computation ------------------------------------------------

SHAPES = st.builds(
    TargetShape,
    cpu=st.integers(0, 8).map(lambda c: c * 1000),
    gpus=st.integers(0, 2),
    blocks=st.sampled_from([10, 30, 50, 100]),
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    shapes=st.lists(SHAPES, min_size=1, max_size=5, unique=True),
    weights=st.lists(st.integers(1, 5), min_size=5, max_size=5),
    gpus=st.lists(st.integers(0, 4), min_size=1, max_size=4),
    moves=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 100), st.integers(0, 3000)),
                   max_size=12),
)
def test_incremental_state_and_deltas_match_a_fresh_model(shapes: list[TargetShape], weights: list[int],
                                                          gpus: list[int],
                                                          moves: list[tuple[int, int, int, int]]) -> None:
    shapes = [s if s.gpus else TargetShape(s.cpu) for s in shapes]
    shapes = list(dict.fromkeys(shapes))
    target = TargetWorkload(tuple(shapes), tuple(weights[: len(shapes)]))
    nodes = [node(f"n{i}", g) for i, g in enumerate(gpus)]
    m = model_of(nodes, target)
    c = m.cluster
    rows = np.arange(len(nodes))
    for which, gpu, blocks, cpu in moves:
        n = which % len(nodes)
        if c.gpu_count[n] == 0 or c.free[n, c.res_index[CPU]] < cpu:
            continue
        g = gpu % int(c.gpu_count[n])
        res = np.zeros(len(c.resources), dtype=np.int64)
        res[c.res_index[CPU]] = cpu
        m.refresh()
        if blocks == 100 and c.gpu_free[n, g] == 100:
            predicted = m.delta_whole(np.array([n]), cpu, 0, 1)[0]
            c.take(n, res, [g], None)
        elif 0 < blocks <= c.gpu_free[n, g] and not c.gpu_whole[n, g]:
            predicted = m.delta_fractional(np.array([n]), cpu, 0, np.array([blocks]))[0, g]
            c.take(n, res, [g], blocks)
        else:
            continue
        before = int(m.W[n])
        m.refresh()
        assert int(m.W[n]) - before == predicted
        fresh = model_of(nodes, target)
        for i, g_row in enumerate(c.gpu_free):  # replay the state into the fresh model's cluster
            fresh.cluster.gpu_free[i] = g_row
            fresh.cluster.gpu_whole[i] = c.gpu_whole[i]
            fresh.cluster.free[i] = c.free[i]
        fresh.cluster.dirty.extend(range(len(nodes)))
        fresh.refresh()
        assert fresh.W.tolist() == m.W.tolist()
        assert fresh.T.tolist() == m.T.tolist()
    assert m.W[rows].dtype == np.int64


def test_stranded_blocks_steer_cpu_work_to_nodes_with_cpu_to_spare() -> None:
    # Target: whole-GPU tasks of 4 CPUs, i.e. 40 milli-CPU per free block. A CPU-only pod of 2 CPUs:
    # on "a" (2 GPUs, 8 CPUs) it leaves 6 CPUs, enough for 150 of the 200 free blocks: 50 stranded;
    # on "b" (2 GPUs, 16 CPUs) 14 CPUs feed all 200: none. The FGD fragmentation is 0 on both
    # (4 CPUs still fit), so only the stranding term separates them: "b".
    target = TargetWorkload((TargetShape(cpu=4000, gpus=1, blocks=100),), (1,))
    nodes = [node("a", 2, cpu=8), node("b", 2, cpu=16)]
    cluster = ClusterState(nodes, ())
    feasibility = StaticFeasibility(cluster.nodes, cluster.schedulable)
    fit = np.array([True, True])
    assert DefragScorer(cluster, feasibility, target).choose_whole(2000, 0, 0, fit, None) == 1
    # Without the term: equal cost, equal free blocks after; then less free CPU: "a".
    assert DefragScorer(cluster, feasibility, target, strand_percent=0).choose_whole(2000, 0, 0, fit, None) == 0
    # A rank (topology preference) decides before the cost.
    assert DefragScorer(cluster, feasibility, target).choose_whole(2000, 0, 0, fit, np.array([0, 1])) == 0


def test_stranded_counts_blocks_the_free_cpu_cannot_feed() -> None:
    target = TargetWorkload((TargetShape(cpu=4000, gpus=1, blocks=100, memory=8 * GIB),), (1,))
    cluster = ClusterState([node("a", 2)], ())
    scorer = DefragScorer(cluster, StaticFeasibility(cluster.nodes, cluster.schedulable), target)
    rows = np.zeros(4, dtype=np.int64)  # four states of the one node
    T = np.array([200, 200, 200, 0])
    cpu = np.array([8000, 6000, 0, 0])
    mem = np.array([16 * GIB, 16 * GIB, 16 * GIB, 0])
    # 40 milli-CPU and 8/100 GiB per block: 6000 -> 150 blocks fed; memory 16 GiB -> 200.
    assert scorer.stranded(rows, T, cpu, mem).tolist() == [0, 50, 200, 0]
    assert scorer.stranded(rows, T, cpu, mem // 4).tolist() == [150, 150, 200, 0]


def test_stranding_uses_the_tasks_that_may_use_the_node() -> None:
    from gpufleet.domain import SelectorRequirement, SelectorTerm
    from gpufleet.engine.feasibility import static_key

    # Tasks pinned to T4 need 8 CPUs per GPU, the others 1: a T4 node's free blocks need 80
    # milli-CPU each, an A100 node's 10.
    t4 = Node(NodeName("t4"), labels={"nvidia.com/gpu.product": "T4"},
              allocatable={CPU: 16000, MEMORY: 8 * GIB, PODS: 110 * MILLI, GPU: 2000})
    a100 = Node(NodeName("a100"), labels={"nvidia.com/gpu.product": "A100"},
                allocatable={CPU: 16000, MEMORY: 8 * GIB, PODS: 110 * MILLI, GPU: 2000})
    pinned = Pod("ns", "p", requests={CPU: 8000, GPU: 1000},
                 affinity=(SelectorTerm((SelectorRequirement("nvidia.com/gpu.product", "In", ("T4",)),)),))
    pinned_shape = TargetShape(8000, 1, 100, None, static_key(pinned))
    other = Pod("ns", "q", requests={CPU: 1000, GPU: 1000},
                affinity=(SelectorTerm((SelectorRequirement("nvidia.com/gpu.product", "In", ("A100",)),)),))
    other_shape = TargetShape(1000, 1, 100, None, static_key(other))
    cluster = ClusterState([t4, a100], ())
    scorer = DefragScorer(cluster, StaticFeasibility(cluster.nodes, cluster.schedulable),
                          TargetWorkload((pinned_shape, other_shape), (1, 1)))
    assert scorer.cpu_per_block.tolist() == [10.0, 80.0]  # nodes in name order: a100, t4
