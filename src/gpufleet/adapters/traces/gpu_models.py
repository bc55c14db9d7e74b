"""Memory per GPU of the GPU model names that appear in the public traces.

The traces name models in their own short forms (openb ``V100M32``, PAI ``MISC``, spot
``A100-SXM4-80GB``). Where the model is a known product its memory is listed here; undisclosed or
mixed types (openb ``G2``/``G3``, PAI ``MISC``, spot ``GPU-series-1``/``-2``) are deliberately absent:
their memory is unknown (0), so nodes of those models get no ``nvidia.com/gpu.memory`` label and
fractional requests on them must be given in blocks (which every trace here does), not in memory.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["GPU_MEMORY_MIB", "gpu_memory_mib"]

_GIB = 1024  # MiB

GPU_MEMORY_MIB: Mapping[str, int] = {
    # Alibaba openb (2023) and PAI (2020)
    "P100": 16 * _GIB,
    "T4": 16 * _GIB,
    "V100M16": 16 * _GIB,
    "V100M32": 32 * _GIB,
    "V100": 16 * _GIB,  # PAI's "V100" next to "V100M32": the 16 GB part
    "A10": 24 * _GIB,
    # Alibaba spot (2026)
    "A100-SXM4-80GB": 80 * _GIB,
    "A800-SXM4-80GB": 80 * _GIB,
    "H800": 80 * _GIB,
}


def gpu_memory_mib(model: str) -> int:
    """Memory of one GPU of ``model`` in MiB; 0 when unknown."""
    return GPU_MEMORY_MIB.get(model, 0)
