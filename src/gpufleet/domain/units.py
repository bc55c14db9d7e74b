"""Unit rules every layer shares: memory sizes in the domain's milli-units, and GPU memory as blocks.

Kept here, as pure scalar functions, so that the loader, the engine, the simulator and the
webhook cannot disagree on an edge case; the engine's vector form
(:func:`gpufleet.engine.fit.blocks_for_memory`) is defined against
:func:`blocks_for_gpu_memory` and a property test checks that the two agree.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from gpufleet.domain.model import BLOCKS_PER_GPU, MILLI

__all__ = ["BYTES_PER_MIB", "DURATION_EXPECTED", "DURATION_PATTERN", "MILLI_PER_MIB", "blocks_for_gpu_memory",
           "duration_seconds", "mib_to_milli", "rfc3339"]

_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# The grammar of a duration, also the CRDs' pattern (so it is written for Go's RE2 too: ASCII classes, no
# flags). It is the union of the two grammars the project had (Go-style "1h30m" in the CRDs; "90", "2d",
# "1.5e3s", " 4H " in the simulator and annotations): nothing either accepted is refused, but for a
# minus sign (a negative duration never was valid; "-0" was, by accident) and non-ASCII digits.
_NUMBER = r"(?:[0-9]+(?:_[0-9]+)*(?:\.(?:[0-9]+(?:_[0-9]+)*)?)?|\.[0-9]+(?:_[0-9]+)*)(?:[eE][+-]?[0-9]+(?:_[0-9]+)*)?"
DURATION_PATTERN = rf"^\s*\+?({_NUMBER}|(?:{_NUMBER}\s*[smhdSMHD])+)\s*$"
DURATION_EXPECTED = "must be a duration like 90, 30m, 1h30m or 2d"
_DURATION = re.compile(DURATION_PATTERN.removeprefix("^").removesuffix("$"), re.ASCII)
_DURATION_PART = re.compile(rf"({_NUMBER})\s*([smhdSMHD])", re.ASCII)

BYTES_PER_MIB = 1024 * 1024
MILLI_PER_MIB = BYTES_PER_MIB * MILLI  # one MiB of memory in the domain's milli-bytes


def duration_seconds(value: object) -> float:
    """Seconds of a duration (docs/semantics.md, "Durations"): a number of seconds (``90``, ``1.5e3``,
    an int or float too), or one or more ``<number><unit>`` with unit ``s``, ``m``, ``h`` or ``d``
    (``90s``, ``15m``, ``1h30m``, ``2d``), in any case, with blanks around; finite and >= 0. The one
    parser of every duration: CRD fields, the simulator's options and files, pod annotations.
    ValueError, with the reason (not the value: the caller quotes it as it must), otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(DURATION_EXPECTED)
    if isinstance(value, str):
        m = _DURATION.fullmatch(value)
        if m is None:
            raise ValueError(DURATION_EXPECTED)
        body = m.group(1)
        parts = _DURATION_PART.findall(body)
        seconds = sum(float(n) * _DURATION_UNITS[u.lower()] for n, u in parts) if parts else float(body)
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError("must be a finite duration >= 0")
    return seconds


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
