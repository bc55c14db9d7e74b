"""The engine's fit test: the vector form of memory-to-blocks agrees with the domain's scalar rule."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain import GPU, MILLI, PODS, Node, NodeName
from gpufleet.domain.units import blocks_for_gpu_memory
from gpufleet.engine import blocks_for_memory, gpu_fit, node_fit, share_cells
from gpufleet.engine.cluster import ClusterState

GPU_SIZES = st.one_of(
    st.sampled_from([0, -1, 16384, 24576, 40960, 81920, 143771]),  # 0: no label; real models
    st.integers(-(2**10), 2**36),
    st.just(2**36),  # the largest GPU the vector form is exact for
)


@given(
    memory=st.one_of(st.integers(-(2**20), 2**62), st.sampled_from([0, 20 * 2**30, 80 * 2**30, 80 * 2**30 + 1, 2**56, 2**56 + 1])),
    gpu_mib=st.lists(GPU_SIZES, min_size=1, max_size=12),
)
def test_vector_blocks_agree_with_the_scalar_rule(memory: int, gpu_mib: list[int]) -> None:
    vector = blocks_for_memory(memory, np.array(gpu_mib, dtype=np.int64))
    assert vector.dtype == np.int64
    assert vector.tolist() == [blocks_for_gpu_memory(memory, m) or 0 for m in gpu_mib]


def test_fit_of_whole_gpus_shares_and_resources() -> None:
    nodes = [
        Node(name=NodeName(f"n{i}"), allocatable={GPU: gpus * MILLI, PODS: 2 * MILLI, "cpu": 4000})
        for i, gpus in enumerate([0, 1, 2])
    ]
    c = ClusterState(nodes, [])
    static = np.ones(3, dtype=np.bool_)
    res = np.zeros(len(c.resources), dtype=np.int64)
    res[c.res_index["cpu"]] = 3000
    assert gpu_fit(c, 2).tolist() == [False, False, True]
    assert gpu_fit(c, 0, 30).tolist() == [False, True, True]
    assert node_fit(c, static, res, 0).tolist() == [True, True, True]
    c.take(2, res, [0], 80)  # 80 blocks of GPU 0 of n2, and 3 of its 4 cpus
    assert share_cells(c, 30).tolist() == [[False, False], [True, False], [False, True]]
    assert share_cells(c, np.array([30, 0, 20])).tolist() == [[False, False], [False, False], [True, True]]
    assert node_fit(c, static, res, 0, 30).tolist() == [False, True, False]  # n2 is short of cpu
    assert node_fit(c, np.array([True, False, True]), res, 0).tolist() == [True, False, False]
