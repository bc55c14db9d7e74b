"""What the agent's loop calls and is not its own: discovery, the health rules, the usage export.

Three other rooms of the agent implement these (``gpufleet.agent.discovery``,
``gpufleet.agent.health``, ``gpufleet.agent.usage``); the loop sees only the protocols here, so that
each can be swapped without touching it. :mod:`.standins` has minimal implementations that run the
agent until those rooms are wired in (:mod:`.wiring` is the one place that picks them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from gpufleet.agent.gpus import GpuHealthReading, GpuInfo, GpuUtilisation, ProcessUtilisation, XidEvent
from gpufleet.domain import LABEL_PREFIX

__all__ = [
    "ANNOTATION_GPU_HEALTH",
    "ANNOTATION_GPU_UNCORDON",
    "CONDITION_GPU_HEALTHY",
    "ConditionWanted",
    "Describe",
    "HealthChange",
    "HealthRules",
    "NodeMetadata",
    "UsageSink",
]

# The health rules' state, so that a restarted agent keeps each GPU's history (JSON, the rules' own).
ANNOTATION_GPU_HEALTH = f"{LABEL_PREFIX}gpu-health"
# The operator's request to take GPUs back ("3" or "1,3"): written by ``gpufleet gpu uncordon``,
# consumed (removed) by the agent once the rules have seen it.
ANNOTATION_GPU_UNCORDON = f"{LABEL_PREFIX}gpu-uncordon"
CONDITION_GPU_HEALTHY = "GPUHealthy"

State = TypeVar("State")


@dataclass(frozen=True, slots=True)
class NodeMetadata:
    """What discovery says the Node's labels and annotations are. ``owned_labels`` and
    ``owned_annotations``: every key discovery may write; one of them absent from ``labels`` or
    ``annotations`` is removed from the Node, any other key of the Node is left alone."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    owned_labels: frozenset[str] = frozenset()
    owned_annotations: frozenset[str] = frozenset()


Describe = Callable[[tuple[GpuInfo, ...]], NodeMetadata]


@dataclass(frozen=True, slots=True)
class ConditionWanted:
    """The ``GPUHealthy`` Node condition: status True | False | Unknown, a CamelCase reason."""

    status: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class HealthChange:
    """One GPU's health changed: the agent posts an Event on the Node with this reason and note."""

    index: int
    uuid: str
    reason: str  # GPUUnhealthy | GPUHealthy | GPUHealthUnknown
    message: str  # names the GPU's index, its UUID and the signal
    warning: bool  # the Event's type: Warning, else Normal


class HealthRules(Protocol[State]):
    """The health rules, pure: the loop keeps the state, the rules decide each step."""

    def restore(self, text: str | None) -> State:
        """The state as saved in the Node's ``gpufleet.dev/gpu-health`` annotation (None or
        unreadable: a fresh state, logged by the rules)."""
        ...

    def step(self, state: State, readings: Sequence[GpuHealthReading], events: Sequence[XidEvent],
             uncordoned: frozenset[int], now: float) -> tuple[State, tuple[HealthChange, ...]]:
        ...

    def save(self, state: State) -> str:
        """The annotation's text; equal states give equal texts (the loop writes only on change)."""
        ...

    def unhealthy_indices(self, state: State) -> frozenset[int]: ...

    def condition(self, state: State) -> ConditionWanted: ...

    def parse_uncordon(self, text: str) -> frozenset[int]:
        """The indices of an uncordon request; ValueError in one line when it is not one."""
        ...


class UsageSink(Protocol):
    """The utilisation export: fed every poll with the GPUs, their processes and the node's pods
    (the API server's pod objects bound to this node), rendered on ``/metrics``."""

    def update(self, gpus: Sequence[GpuUtilisation], processes: Sequence[ProcessUtilisation],
               pods: Sequence[Mapping[str, Any]], node_name: str, now: float) -> None: ...

    def render(self) -> bytes: ...
