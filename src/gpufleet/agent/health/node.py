"""What the GPUs' health says about the Node: the annotations and the ``GPUHealthy`` condition.

- ``gpufleet.dev/unhealthy-gpus``: the indices of the ``UNHEALTHY`` GPUs, in the engine's format
  (``"3"``, ``"1,3"``; see api.md and ``node_from_dict``), so the scheduler avoids exactly them.
  ``UNKNOWN`` GPUs are not listed: an agent that cannot read NVML (a missing library, a driver
  upgrade in progress) must not take a node's GPUs out of service, let alone a fleet's; the
  condition says ``Unknown`` instead and an operator decides.
- ``gpufleet.dev/gpu-uncordon``: the operator's request to put GPUs back (``gpufleet gpu uncordon
  NODE/INDEX`` writes it), the same index-list format; the agent passes it to
  :func:`gpufleet.agent.health.step` and removes it.
- the ``GPUHealthy`` condition: ``True`` when every GPU is healthy, ``False`` when one is unhealthy,
  ``Unknown`` when NVML cannot be read or a GPU's health is unknown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.agent.health.machine import GpuHealth, HealthState
from gpufleet.domain import ANNOTATION_UNHEALTHY_GPUS, LABEL_PREFIX

__all__ = [
    "ANNOTATION_GPU_UNCORDON",
    "ANNOTATION_UNHEALTHY_GPUS",
    "CONDITION_GPU_HEALTHY",
    "HealthAnnotationError",
    "NodeCondition",
    "format_gpu_indices",
    "merge_uncordon",
    "node_condition",
    "parse_gpu_indices",
    "parse_uncordon",
    "unhealthy_indices",
]

ANNOTATION_GPU_UNCORDON = f"{LABEL_PREFIX}gpu-uncordon"
CONDITION_GPU_HEALTHY = "GPUHealthy"
MAX_MESSAGE_CHARS = 1024

_INDEX = re.compile(r"\s*(\d{1,6})\s*")  # the engine's grammar (adapters' node_from_dict); a test keeps them equal


class HealthAnnotationError(ValueError):
    """An annotation the agent reads is malformed: one line naming it."""


def format_gpu_indices(indices: Iterable[int]) -> str:
    """``{3, 1}`` -> ``"1,3"``; no index -> ``""`` (the agent then removes the annotation)."""
    return ",".join(str(index) for index in sorted(set(indices)))


def parse_gpu_indices(text: str, where: str) -> frozenset[int]:
    """``"1,3"`` -> ``{1, 3}``, ``""`` -> ``{}``, as the engine reads ``gpufleet.dev/unhealthy-gpus``.
    Raises :class:`HealthAnnotationError` naming ``where``."""
    if not text.strip():
        return frozenset()
    indices: list[int] = []
    for part in text.split(","):
        match = _INDEX.fullmatch(part)
        if match is None:
            raise HealthAnnotationError(f'{where}: must be GPU indices such as "0,1", got {text[:40]!r}')
        indices.append(int(match.group(1)))
    if len(set(indices)) != len(indices):
        raise HealthAnnotationError(f"{where}: repeats a GPU index: {text[:40]!r}")
    return frozenset(indices)


def parse_uncordon(text: str) -> frozenset[int]:
    """The GPU indices of the operator's ``gpufleet.dev/gpu-uncordon`` annotation (``"3"``, ``"1,3"``)."""
    return parse_gpu_indices(text, f"annotation {ANNOTATION_GPU_UNCORDON}")


def merge_uncordon(existing: str | None, indices: Iterable[int]) -> str:
    """The ``gpufleet.dev/gpu-uncordon`` value once ``indices`` are added to what is already asked
    (``gpufleet gpu uncordon`` must not drop another operator's pending request); an unreadable
    existing value is replaced, as the agent would refuse it anyway."""
    try:
        asked = parse_uncordon(existing) if existing is not None else frozenset()
    except HealthAnnotationError:
        asked = frozenset()
    return format_gpu_indices(asked | frozenset(indices))


def unhealthy_indices(gpus: Iterable[GpuHealth]) -> frozenset[int]:
    """The indices for ``gpufleet.dev/unhealthy-gpus``: the ``UNHEALTHY`` GPUs (not the unknown ones)."""
    return frozenset(gpu.index for gpu in gpus if gpu.state is HealthState.UNHEALTHY)


@dataclass(frozen=True, slots=True)
class NodeCondition:
    """The Node condition ``GPUHealthy``: ``status`` is "True", "False" or "Unknown"."""

    status: str
    reason: str  # CamelCase, as Kubernetes conditions spell reasons
    message: str
    type: str = CONDITION_GPU_HEALTHY


def _listing(gpus: Iterable[GpuHealth]) -> str:
    return "; ".join(f"GPU {gpu.index} ({gpu.uuid or 'no UUID'}): {gpu.reason}" for gpu in gpus)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


def node_condition(gpus: Iterable[GpuHealth], read_error: str | None = None) -> NodeCondition:
    """The ``GPUHealthy`` condition for the node's GPUs; ``read_error`` when NVML cannot be read at all.

    An unhealthy GPU makes it ``False`` even when another is unknown (what is known to be bad is
    what the operator must act on); the message names every GPU that is not healthy.
    """
    listed = sorted(gpus, key=lambda gpu: gpu.index)
    if read_error is not None:
        return NodeCondition("Unknown", "NvmlUnavailable", _cut(f"cannot read the GPUs: {read_error}"))
    if not listed:
        return NodeCondition("Unknown", "NoGpus", "NVML lists no GPU on this node")
    unhealthy = [gpu for gpu in listed if gpu.state is HealthState.UNHEALTHY]
    unknown = [gpu for gpu in listed if gpu.state is HealthState.UNKNOWN]
    if unhealthy:
        message = f"{len(unhealthy)} of {len(listed)} GPUs unhealthy: {_listing(unhealthy)}"
        if unknown:
            message += f"; {len(unknown)} unknown: {_listing(unknown)}"
        return NodeCondition("False", "GpuUnhealthy", _cut(message))
    if unknown:
        return NodeCondition("Unknown", "GpuHealthUnknown",
                             _cut(f"{len(unknown)} of {len(listed)} GPUs unknown: {_listing(unknown)}"))
    return NodeCondition("True", "AllGpusHealthy", f"all {len(listed)} GPUs healthy")
