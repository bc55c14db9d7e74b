"""The queues' observed runtimes the controller gives the engine (docs/semantics.md, "Reservation and
backfill"): per leaf queue, the SchedulerConfig's ``reservation.percentile`` (nearest rank) of the
runtimes of the last ``keep`` pods of ours the controller saw succeed, a runtime being a pod's
``status.startTime`` to its last container's ``finishedAt``. The counters live in memory (a new leader
starts empty); the SchedulerConfig's own ``observedRuntime`` entries win over them.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import replace

from gpufleet.kube.controller.convert import SnapshotView

__all__ = ["ObservedRuntimes"]


class ObservedRuntimes:
    def __init__(self, keep: int = 1000) -> None:
        self.keep = keep
        self._runs: dict[str, deque[float]] = {}
        self._cached: tuple[int, dict[str, float]] | None = None

    def record(self, queue: str, seconds: float) -> None:
        self._runs.setdefault(queue, deque(maxlen=self.keep)).append(seconds)
        self._cached = None

    def percentiles(self, percentile: int) -> dict[str, float]:
        """Each queue's ``percentile`` (nearest rank) of its recorded runtimes."""
        if self._cached is not None and self._cached[0] == percentile:
            return self._cached[1]
        out: dict[str, float] = {}
        for queue, runs in sorted(self._runs.items()):
            done = sorted(runs)
            out[queue] = done[max(0, math.ceil(percentile / 100 * len(done)) - 1)]
        self._cached = (percentile, out)
        return out

    def fill(self, view: SnapshotView) -> SnapshotView:
        """The view with the observed runtimes in its config's reservation (unchanged when reservations
        are off or nothing was recorded)."""
        config = view.snapshot.config
        reservation = config.reservation
        if reservation is None or not self._runs:
            return view
        observed = {**self.percentiles(reservation.percentile), **reservation.observed_runtime}
        config = replace(config, reservation=replace(reservation, observed_runtime=observed))
        return replace(view, snapshot=replace(view.snapshot, config=config))
