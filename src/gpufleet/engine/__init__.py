"""The scheduling engine: a pure function of a cluster snapshot.

``schedule(snapshot)`` runs scheduling cycles until nothing changes and returns the decisions
(bindings, evictions, pending pods with reasons). No I/O, no clock, no randomness.
"""

from gpufleet.engine.scheduler import schedule

__all__ = ["schedule"]
