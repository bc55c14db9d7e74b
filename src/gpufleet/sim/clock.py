"""Virtual time: the simulator's only clock (no sleeps, no wall time in the results)."""

from __future__ import annotations


class VirtualClock:
    """Seconds since the trace start; only moves forward, and only when told to."""

    __slots__ = ("_now",)

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    @property
    def now(self) -> float:
        return self._now

    def advance_to(self, t: float) -> None:
        if t < self._now:
            raise ValueError(f"virtual time cannot go back from {self._now} to {t}")
        self._now = t
