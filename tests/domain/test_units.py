"""The domain's unit rules: MiB in milli-bytes, and a gpu-memory request as blocks of one GPU."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain import BLOCKS_PER_GPU, MILLI
from gpufleet.domain.units import BYTES_PER_MIB, MILLI_PER_MIB, blocks_for_gpu_memory, mib_to_milli

GIB = 1024 * BYTES_PER_MIB


def test_a_mib_in_milli_bytes() -> None:
    assert MILLI_PER_MIB == 1024 * 1024 * MILLI
    assert mib_to_milli(1) == 1_048_576_000
    assert mib_to_milli(1024) == 1024 * 1024 * 1024 * MILLI  # "1Gi" as the loader reads it
    assert mib_to_milli(0) == 0


@pytest.mark.parametrize(
    ("memory", "gpu_mib", "blocks"),
    [
        (20 * GIB, 81920, 25),  # exact quarter of an 80 GiB GPU
        (20 * GIB + 1, 81920, 26),  # one byte more: rounded up
        (1, 81920, 1),  # the smallest request: at least one block
        (80 * GIB, 81920, 100),  # the whole GPU
        (80 * GIB + 1, 81920, None),  # more than one GPU's memory: cannot go there
        (0, 81920, 1),  # zero (refused by the loader and the webhook): still a block
        (10 * GIB, None, None),  # no nvidia.com/gpu.memory label: unknown, cannot go there
        (10 * GIB, 0, None),
        (10 * GIB, -5, None),
    ],
)
def test_blocks_for_gpu_memory_edges(memory: int, gpu_mib: int | None, blocks: int | None) -> None:
    assert blocks_for_gpu_memory(memory, gpu_mib) == blocks


@given(memory=st.integers(0, 2**48), gpu_mib=st.integers(1, 2**20))
def test_blocks_are_the_rounded_up_share_of_one_gpu(memory: int, gpu_mib: int) -> None:
    blocks = blocks_for_gpu_memory(memory, gpu_mib)
    gpu_bytes = gpu_mib * BYTES_PER_MIB
    if memory > gpu_bytes:
        assert blocks is None
        return
    assert blocks is not None
    assert 1 <= blocks <= BLOCKS_PER_GPU
    # the fewest blocks whose memory covers the request, and never fewer than one
    assert blocks * gpu_bytes >= memory * BLOCKS_PER_GPU
    assert blocks == 1 or (blocks - 1) * gpu_bytes < memory * BLOCKS_PER_GPU


@given(memory=st.integers(1, 2**40), gpu_mib=st.integers(1, 2**21))
def test_integer_rule_equals_the_former_float_formula_on_realistic_sizes(memory: int, gpu_mib: int) -> None:
    """The engine computed ``ceil(bytes * 100 / GPU bytes)`` in floats before; on sizes real GPUs and
    requests have, the exact rule gives the same blocks (no binding changes)."""
    raw = math.ceil(memory * BLOCKS_PER_GPU / (gpu_mib * BYTES_PER_MIB))
    former = raw if 1 <= raw <= BLOCKS_PER_GPU else (1 if raw < 1 else None)
    assert blocks_for_gpu_memory(memory, gpu_mib) == former
