"""Unit rules every layer shares: memory sizes in the domain's milli-units, and GPU memory as blocks.

Kept here, as pure scalar functions, so that the loader, the engine, the simulator and the
webhook cannot disagree on an edge case; the engine's vector form
(:func:`gpufleet.engine.fit.blocks_for_memory`) is defined against
:func:`blocks_for_gpu_memory` and a property test checks that the two agree.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from gpufleet.domain.model import BLOCKS_PER_GPU, MILLI

__all__ = ["BYTES_PER_MIB", "MILLI_PER_MIB", "blocks_for_gpu_memory", "duration_seconds", "mib_to_milli", "rfc3339"]

_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

BYTES_PER_MIB = 1024 * 1024
MILLI_PER_MIB = BYTES_PER_MIB * MILLI  # one MiB of memory in the domain's milli-bytes


def duration_seconds(text: str) -> float:
    """Seconds of a duration written ``90``, ``90s``, ``15m``, ``4h`` or ``2d`` (a finite number >= 0);
    ValueError, with the reason, otherwise."""
    s = text.strip().lower()
    scale = _DURATION_UNITS.get(s[-1:]) if s else None
    try:
        value = float(s[:-1] if scale else s) * (scale or 1.0)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration (seconds, or a number with s, m, h or d)") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"duration must be a finite number >= 0, got {text!r}")
    return value


def mib_to_milli(mib: int) -> int:
    """``mib`` MiB of memory in the domain's milli-bytes (the unit of every memory quantity)."""
    return mib * MILLI_PER_MIB


def blocks_for_gpu_memory(memory_bytes: int, gpu_memory_mib: int | None) -> int | None:
    """Blocks a ``gpu-memory`` request of ``memory_bytes`` takes on one GPU of ``gpu_memory_mib`` MiB.

    The spec (api.md) turns such a request into blocks "by rounding up against the GPU's memory";
    the edges are:

    - rounded up, in exact integer arithmetic (no float: 100 blocks of a GPU are exactly its memory);
    - at least 1 block: a share always holds a block, so a request of 0 bytes (which the loader and
      the webhook refuse anyway) counts as 1;
    - more than one GPU's memory: None (a share is a part of ONE GPU, it cannot go there);
    - unknown GPU memory (no ``nvidia.com/gpu.memory`` label: None, or not positive): None, as
      docs/semantics-notes.md says a ``gpu-memory`` pod only goes to nodes that carry the label.
    """
    if gpu_memory_mib is None or gpu_memory_mib <= 0:
        return None
    gpu_bytes = gpu_memory_mib * BYTES_PER_MIB
    if memory_bytes > gpu_bytes:
        return None
    return max(1, -(-memory_bytes * BLOCKS_PER_GPU // gpu_bytes))


def rfc3339(seconds: float) -> str:
    """A time (seconds since the epoch) as RFC 3339 in UTC, to the second."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
