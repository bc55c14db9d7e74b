"""The bind-time annotations the webhook's env references read, and static mode's block count."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain import GPU, MILLI, Node, NodeName, Pod, Snapshot
from gpufleet.domain.units import blocks_for_gpu_memory
from gpufleet.engine import schedule
from gpufleet.kube.webhook.annotations import bind_annotations, mps_memory_limit


def test_fractional_binding_annotations() -> None:
    assert bind_annotations((3,), 25, 81920) == {
        "gpufleet.dev/gpu-index": "3",
        "gpufleet.dev/gpu-blocks": "25",
        "gpufleet.dev/mps-mem-limit": "0=20480M",
    }


def test_whole_gpu_binding_annotations() -> None:
    assert bind_annotations((0, 1), None, 81920) == {"gpufleet.dev/gpu-index": "0,1"}


def test_node_without_memory_label_gets_no_memory_limit() -> None:
    assert bind_annotations((2,), 10, None) == {"gpufleet.dev/gpu-index": "2", "gpufleet.dev/gpu-blocks": "10"}


def test_memory_limits_of_a_full_gpu_never_exceed_it() -> None:
    # 3 pods of 33 blocks on a GPU of 80 GiB + 1 MiB: rounding down keeps the sum within the GPU
    limits = [int(mps_memory_limit(33, 81921)[2:-1]) for _ in range(3)]
    assert sum(limits) <= 81921
    assert mps_memory_limit(100, 81920) == "0=81920M"


@pytest.mark.parametrize(("blocks", "mib"), [(0, 80), (101, 80), (5, 0)])
def test_memory_limit_rejects_impossible_input(blocks: int, mib: int) -> None:
    with pytest.raises(ValueError):
        mps_memory_limit(blocks, mib)


@settings(max_examples=60, deadline=None)
@given(memory_mib=st.integers(1, 200_000), gpu_mib=st.sampled_from([16384, 24576, 40960, 81920, 143771]))
def test_static_mode_counts_blocks_exactly_as_the_engine(memory_mib: int, gpu_mib: int) -> None:
    """The webhook's static mode must write the same thread percentage the engine will bind."""
    node = Node(name=NodeName("n1"), allocatable={GPU: 1 * MILLI, "pods": 110 * MILLI}, gpu_memory_mib=gpu_mib)
    pod = Pod(namespace="ml", name="nb", gpu_memory_bytes=memory_mib * 1024 * 1024)
    decisions = schedule(Snapshot(nodes=(node,), pods=(pod,)))
    expected = blocks_for_gpu_memory(memory_mib * 1024 * 1024, gpu_mib)
    if expected is None:
        assert not decisions.bindings
    else:
        assert [b.gpu_blocks for b in decisions.bindings] == [expected]
