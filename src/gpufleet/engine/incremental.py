"""An engine that keeps its state between calls (issue 13).

``IncrementalEngine`` is called like ``schedule``: ``engine(snapshot) -> Decisions``, with the
successive snapshots of one cluster (the controller's cycles, the simulator's steps). It must
decide exactly what a fresh ``schedule(snapshot)`` decides for the same snapshot (a property test
checks it over random event sequences); what it keeps between calls only saves work.

This first version keeps nothing: each call is a fresh ``schedule``. The callers (controller,
``simulate run``) already go through it, so keeping state is a change of this module alone.
"""

from __future__ import annotations

from gpufleet.domain import Decisions, Snapshot
from gpufleet.engine.scheduler import schedule

__all__ = ["IncrementalEngine"]


class IncrementalEngine:
    """``schedule`` over successive snapshots of one cluster, state kept between calls."""

    def __call__(self, snapshot: Snapshot) -> Decisions:
        return schedule(snapshot)
