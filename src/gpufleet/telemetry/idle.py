"""The idle rule, pure: an allocated pod is idle when its GPU utilisation has stayed under a threshold
(default 5 %) for a window (default 30 minutes).

The window starts at the first sample of the current run of low samples (a sample at or above the
threshold ends the run), so a pod is idle at the earliest ``window_s`` after telemetry first saw it
low. A pod with no samples, or whose last sample is older than ``stale_after_s`` (its exporter
stopped answering), is ``unknown``: never idle on old or missing evidence. Every time is an
argument, from the caller's clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.telemetry.model import PodKey, PodUsage, TelemetryPage

__all__ = ["IdleChange", "IdleSettings", "IdleState", "IdleTracker"]


class IdleState(StrEnum):
    UNKNOWN = "unknown"
    ACTIVE = "active"
    IDLE = "idle"


@dataclass(frozen=True, slots=True)
class IdleSettings:
    """``threshold_percent``: GPU utilisation under which a sample is low; ``window_s``: how long the
    low run must last; ``stale_after_s``: age past which the last sample no longer tells."""

    threshold_percent: float = 5.0
    window_s: float = 1800.0
    stale_after_s: float = 300.0

    def __post_init__(self) -> None:
        for name in ("threshold_percent", "window_s", "stale_after_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"idle settings: {name}: must be a positive number, not {value!r}")
        if self.threshold_percent > 100:
            raise ValueError(f"idle settings: threshold_percent: must be at most 100, not {self.threshold_percent!r}")


@dataclass(frozen=True, slots=True)
class IdleChange:
    key: PodKey
    before: IdleState
    after: IdleState
    at: float
    low_since: float | None  # start of the low run (for ``idle``: idle since low_since + window)


@dataclass(slots=True)
class _Watch:
    allocated_at: float
    last_sample: float | None = None
    low_since: float | None = None
    state: IdleState = IdleState.UNKNOWN


@dataclass(slots=True)
class IdleTracker:
    """Which allocated pods are idle: :meth:`allocate` and :meth:`release` follow the allocations,
    :meth:`observe` the samples, :meth:`evaluate` says what changed since its last call."""

    settings: IdleSettings = field(default_factory=IdleSettings)
    pods: dict[PodKey, _Watch] = field(default_factory=dict)

    def allocate(self, key: PodKey, at: float) -> None:
        self.pods.setdefault(key, _Watch(allocated_at=at))

    def release(self, key: PodKey) -> None:
        self.pods.pop(key, None)

    def observe(self, usage: PodUsage) -> bool:
        """Takes one sample of an allocated pod; False (ignored) for other pods, samples without
        utilisation and samples older than the pod's last."""
        watch = self.pods.get(usage.key)
        util = usage.gpu_util_percent
        if watch is None or util is None or math.isnan(util):
            return False
        if watch.last_sample is not None and usage.at < watch.last_sample:
            return False
        watch.last_sample = usage.at
        if util >= self.settings.threshold_percent:
            watch.low_since = None
        elif watch.low_since is None:
            watch.low_since = usage.at
        return True

    def observe_page(self, page: TelemetryPage) -> int:
        return sum(self.observe(usage) for key, usage in page.pods.items() if key in self.pods)

    def _state(self, watch: _Watch, now: float) -> IdleState:
        if watch.last_sample is None or now - watch.last_sample > self.settings.stale_after_s:
            return IdleState.UNKNOWN
        if watch.low_since is not None and now - watch.low_since >= self.settings.window_s:
            return IdleState.IDLE
        return IdleState.ACTIVE

    def state(self, key: PodKey, now: float) -> IdleState:
        """The pod's state at ``now`` (``unknown`` for a pod not allocated)."""
        watch = self.pods.get(key)
        return IdleState.UNKNOWN if watch is None else self._state(watch, now)

    def idle_since(self, key: PodKey, now: float) -> float | None:
        """When the pod became idle (the low run's start plus the window), or None when it is not idle."""
        watch = self.pods.get(key)
        if watch is None or watch.low_since is None or self._state(watch, now) is not IdleState.IDLE:
            return None
        return watch.low_since + self.settings.window_s

    def low_since(self, key: PodKey, now: float) -> float | None:
        """The start of the pod's current run of low samples while its evidence is fresh (None: it is
        using its GPUs, or nothing recent is known): what a Project's idle policy counts from."""
        watch = self.pods.get(key)
        if watch is None or self._state(watch, now) is IdleState.UNKNOWN:
            return None
        return watch.low_since

    def idle(self, now: float) -> list[PodKey]:
        """The idle pods at ``now``, sorted."""
        return sorted(key for key, watch in self.pods.items() if self._state(watch, now) is IdleState.IDLE)

    def evaluate(self, now: float) -> list[IdleChange]:
        """The pods whose state changed since the last evaluation (or allocation), in key order."""
        changes: list[IdleChange] = []
        for key in sorted(self.pods):
            watch = self.pods[key]
            after = self._state(watch, now)
            if after is not watch.state:
                changes.append(IdleChange(key, watch.state, after, now, watch.low_since))
                watch.state = after
        return changes
