"""What the usage ledger records: allocation intervals, how they end, and GPU utilisation samples.

Plain frozen dataclasses, free of any database library, so that the controller, the simulator and the
reports share them. Times are seconds since the Unix epoch (UTC) as floats; the store keeps them as
whole microseconds (:func:`to_micros`), which is also the resolution of an interval's identity.
docs/semantics-notes.md ("Usage ledger (accounting)") gives the rules.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from gpufleet.ledger.capacity import CapacityType

__all__ = [
    "ANNOTATION_EVICTED_BY",
    "EndReason",
    "Interval",
    "IntervalEnd",
    "IntervalKey",
    "IntervalStart",
    "LedgerEvent",
    "UtilisationSample",
    "gpu_amount",
    "to_micros",
]

MICROS = 1_000_000
BLOCKS_PER_GPU = 100


class EndReason(StrEnum):
    """How an allocation interval ended (the ``end_reason`` column)."""

    COMPLETED = "completed"  # the pod succeeded (phase Succeeded)
    FAILED = "failed"  # the pod failed on its own (phase Failed, not evicted by gpufleet)
    EVICTED_RECLAIM = "evicted-reclaim"  # gpufleet evicted it to give a queue back its lent quota
    EVICTED_PREEMPTION = "evicted-preemption"  # gpufleet evicted it for a higher-priority pod (the preemptor)
    NODE_FAILURE = "node-failure"  # its node went away or NotReady and the pod was lost with it
    SPOT_RECLAIM = "spot-reclaim"  # its spot/preemptible node was taken back by the provider
    DELETED = "deleted"  # deleted by someone else, or gone without a status that says otherwise
    IDLE = "idle"  # stopped by a Project's idle policy
    MAINTENANCE = "maintenance"  # drained: its node was going for maintenance (a notice or a marked cordon)
    GPU_FAILURE = "gpu-failure"  # drained: its gang held a GPU listed unhealthy (onGPUFailure: evict)
    OPERATOR = "operator"  # evicted by an operator's `gpufleet admin` command (annotation ANNOTATION_EVICTED_BY)
    MOVED = "moved"  # evicted by a consolidation move; its owner recreates it (the preemptor: the gang made room for)


# Written on a pod by `gpufleet admin reclaim` / `drain NODE/GPU` just before they evict it: the
# accountant ends its interval `operator` when the pod goes (docs/semantics.md, "Operator actions").
ANNOTATION_EVICTED_BY = "gpufleet.dev/evicted-by"


def to_micros(seconds: float) -> int:
    """Epoch seconds as whole microseconds: the resolution the ledger stores and keys by."""
    return round(seconds * MICROS)


def gpu_amount(whole_gpus: int, blocks: int | None = None) -> float:
    """The GPUs an allocation counts: ``whole_gpus`` whole GPUs count 1 each; a fractional pod on
    ``blocks`` blocks of one GPU counts ``blocks / 100``."""
    if blocks is not None:
        return blocks / BLOCKS_PER_GPU
    return float(whole_gpus)


def _check_time(name: str, value: float | None) -> None:
    if value is not None and (not isinstance(value, int | float) or not math.isfinite(value) or value < 0):
        raise ValueError(f"{name} must be a finite, non-negative number of epoch seconds, got {value!r}")


def _check_text(name: str, value: str | None) -> None:
    if value is not None and "\x00" in value:
        raise ValueError(f"{name} must not contain a NUL character")


@dataclass(frozen=True, slots=True)
class IntervalKey:
    """The identity of an allocation interval: the pod's UID and the time it was bound."""

    pod_uid: str
    bound_at: float


@dataclass(frozen=True, slots=True)
class IntervalStart:
    """An allocation interval opens: a pod was bound to a node with these GPUs.

    ``gpus`` is the GPU amount charged (:func:`gpu_amount`): whole GPUs count 1 each, a fractional pod
    on B blocks counts B/100. ``gpu_indices`` names the node's GPUs when known (a fractional pod: the
    one GPU its blocks are on); ``gpu_blocks`` is set for a fractional pod only. ``labels`` holds the
    cost-centre labels (the configured label keys found on the pod, with their values).
    ``capacity_type`` is the node's (:func:`gpufleet.ledger.capacity.capacity_type_of`); None: on-demand.
    """

    pod_uid: str
    bound_at: float
    namespace: str
    pod_name: str
    queue: str
    node: str
    gpus: float
    project: str | None = None
    submitter: str | None = None
    pod_group: str | None = None
    priority_class: str | None = None
    preemptible: bool = False
    gpu_model: str | None = None
    gpu_indices: tuple[int, ...] = ()
    gpu_blocks: int | None = None
    cpu_milli: int = 0
    memory_bytes: int = 0
    created_at: float | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    capacity_type: CapacityType | None = None

    def __post_init__(self) -> None:
        if self.capacity_type is not None:
            object.__setattr__(self, "capacity_type", CapacityType(self.capacity_type))
        if not self.pod_uid:
            raise ValueError("pod_uid must not be empty")
        _check_time("bound_at", self.bound_at)
        _check_time("created_at", self.created_at)
        if not math.isfinite(self.gpus) or self.gpus < 0:
            raise ValueError(f"gpus must be a finite, non-negative amount, got {self.gpus!r}")
        if self.gpu_blocks is not None and not 1 <= self.gpu_blocks <= BLOCKS_PER_GPU:
            raise ValueError(f"gpu_blocks must be 1..{BLOCKS_PER_GPU}, got {self.gpu_blocks!r}")
        if any(index < 0 for index in self.gpu_indices):
            raise ValueError(f"gpu_indices must be non-negative, got {self.gpu_indices!r}")
        if self.cpu_milli < 0 or self.memory_bytes < 0:
            raise ValueError("cpu_milli and memory_bytes must be non-negative")
        for name in ("pod_uid", "namespace", "pod_name", "queue", "node", "project", "submitter", "pod_group",
                     "priority_class", "gpu_model"):
            _check_text(name, getattr(self, name))
        for key, value in self.labels.items():
            _check_text(f"labels[{key!r}]", key)
            _check_text(f"labels[{key!r}]", value)
        if not isinstance(self.labels, MappingProxyType):
            object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))

    @property
    def key(self) -> IntervalKey:
        return IntervalKey(self.pod_uid, self.bound_at)


@dataclass(frozen=True, slots=True)
class IntervalEnd:
    """An allocation interval closes: the pod bound at ``bound_at`` ended at ``ended_at``.

    ``preemptor`` names the pod (``namespace/name``) an ``evicted-preemption`` or ``evicted-reclaim``
    made room for, when one did.
    """

    pod_uid: str
    bound_at: float
    ended_at: float
    reason: EndReason
    preemptor: str | None = None

    def __post_init__(self) -> None:
        _check_time("bound_at", self.bound_at)
        _check_time("ended_at", self.ended_at)
        if self.ended_at < self.bound_at:
            raise ValueError(f"ended_at {self.ended_at!r} is before bound_at {self.bound_at!r}")
        object.__setattr__(self, "reason", EndReason(self.reason))
        _check_text("preemptor", self.preemptor)

    @property
    def key(self) -> IntervalKey:
        return IntervalKey(self.pod_uid, self.bound_at)


@dataclass(frozen=True, slots=True)
class UtilisationSample:
    """One observation of an interval's GPUs at ``at``: DCGM's GPU utilisation (percent, 0-100), SM
    active (ratio 0-1) and framebuffer used (bytes), each None when not known. The ledger keeps their
    means over the samples it was given, each sample once (a sample not later than the last applied one
    of its interval is ignored: replays are harmless)."""

    pod_uid: str
    bound_at: float
    at: float
    gpu_util: float | None = None
    sm_active: float | None = None
    fb_used_bytes: float | None = None

    def __post_init__(self) -> None:
        _check_time("bound_at", self.bound_at)
        _check_time("at", self.at)
        for name in ("gpu_util", "sm_active", "fb_used_bytes"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ValueError(f"{name} must be a finite, non-negative number, got {value!r}")

    @property
    def key(self) -> IntervalKey:
        return IntervalKey(self.pod_uid, self.bound_at)


@dataclass(frozen=True, slots=True)
class Interval:
    """An interval as the ledger holds it: its start, and its end and utilisation means when known."""

    start: IntervalStart
    ended_at: float | None = None
    end_reason: EndReason | None = None
    preemptor: str | None = None
    gpu_util_mean: float | None = None
    sm_active_mean: float | None = None
    fb_used_mean_bytes: float | None = None
    samples: int = 0

    @property
    def key(self) -> IntervalKey:
        return self.start.key

    def end(self) -> IntervalEnd | None:
        """The :class:`IntervalEnd` of a closed interval; None while it is open."""
        if self.ended_at is None or self.end_reason is None:
            return None
        return IntervalEnd(self.start.pod_uid, self.start.bound_at, self.ended_at, self.end_reason, self.preemptor)

    def gpu_seconds(self, since: float, until: float) -> float:
        """GPU-seconds charged between ``since`` and ``until`` (an open interval counts up to ``until``)."""
        end = until if self.ended_at is None else min(self.ended_at, until)
        return max(0.0, end - max(since, self.start.bound_at)) * self.start.gpus


LedgerEvent = IntervalStart | IntervalEnd | UtilisationSample | Interval
"""What a batch holds. An :class:`Interval` stands for its start and, when it has ended, its end (a
simulator writes whole intervals); its utilisation means are not written (send samples for them)."""
