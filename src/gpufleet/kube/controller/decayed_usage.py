"""The controller's decayed usage of each Queue (docs/semantics.md, "Fairness over time").

At every cycle each leaf's decayed usage moves on from the last cycle's with the usage the queue held
since then (``H <- H * d + U * (1 - d)``, ``d = 2^(-elapsed / half-life)``); a queue's parent holds the
sum of its children's. The counters live here; a queue first seen (a new queue, or a restarted
controller) continues from its ``status.decayedUsage`` as of ``status.decayedUsageTime``. The status is
rewritten at most every ``write_every`` seconds (the engine decays it to the snapshot's time with the
usage of the moment in between), so the counters do not patch every Queue every cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.adapters import to_milli
from gpufleet.adapters.errors import InputError
from gpufleet.adapters.times import parse_when
from gpufleet.domain import Queue

__all__ = ["DecayedUsage", "DecayedValue"]


@dataclass(frozen=True, slots=True)
class DecayedValue:
    """What a Queue's status says: decayed usage (milli per resource) as of ``at``."""

    usage: Mapping[str, int]
    at: float


@dataclass(slots=True)
class _Counter:
    decayed: dict[str, float]  # as of ``at``
    at: float
    usage: dict[str, int]  # held since ``at`` (the usage at the last cycle)


class DecayedUsage:
    def __init__(self, write_every: float = 60.0) -> None:
        self.write_every = write_every
        self._counters: dict[str, _Counter] = {}

    def update(self, queues: Sequence[Queue], usage: Mapping[str, Mapping[str, int]],
               status_of: Callable[[str], Mapping[str, Any] | None], half_life: float,
               now: float) -> dict[str, DecayedValue]:
        """Every queue's decayed usage to put in its status now (the one it has while that is fresh).

        ``usage``: each queue's usage (milli per resource) once this cycle's decisions are carried out;
        ``status_of``: a Queue's status as the cache holds it. Empty with the half-life off."""
        if half_life <= 0:
            self._counters.clear()
            return {}
        parents = {q.parent for q in queues if q.parent}
        leaves = [q for q in queues if q.name not in parents]
        values: dict[str, dict[str, float]] = {}
        for q in leaves:
            name = str(q.name)
            held = dict(usage.get(name, {}))
            counter = self._counters.get(name)
            if counter is None:
                counter = self._from_status(status_of(name), held, now)
            d = 2.0 ** (-max(0.0, now - counter.at) / half_life)
            keys = set(counter.decayed) | set(counter.usage)
            decayed = {r: counter.decayed.get(r, 0.0) * d + counter.usage.get(r, 0) * (1.0 - d) for r in keys}
            self._counters[name] = _Counter(decayed, now, held)
            values[name] = decayed
        for name in set(self._counters) - {str(q.name) for q in leaves}:
            del self._counters[name]
        by_parent: dict[str, list[str]] = {}
        for q in queues:
            if q.parent:
                by_parent.setdefault(str(q.parent), []).append(str(q.name))

        def total(name: str) -> dict[str, float]:
            if name in values:
                return values[name]
            out: dict[str, float] = {}
            for child in by_parent.get(name, []):
                for r, v in total(child).items():
                    out[r] = out.get(r, 0.0) + v
            values[name] = out
            return out

        result: dict[str, DecayedValue] = {}
        for q in queues:
            name = str(q.name)
            written = self._written(status_of(name))
            if written is not None and now - written.at < self.write_every:
                result[name] = written
            else:
                result[name] = DecayedValue({r: int(v) for r, v in sorted(total(name).items())}, now)
        return result

    @staticmethod
    def _written(status: Mapping[str, Any] | None) -> DecayedValue | None:
        """The status's decayed usage, or None when it has none (or one the controller cannot read)."""
        if not status or not isinstance(status.get("decayedUsage"), Mapping):
            return None
        try:
            usage = {str(r): to_milli(v) for r, v in status["decayedUsage"].items()}
            at = parse_when(str(status.get("decayedUsageTime")), "status.decayedUsageTime")
        except (ValueError, InputError):
            return None
        return DecayedValue(usage, at)

    def _from_status(self, status: Mapping[str, Any] | None, held: dict[str, int], now: float) -> _Counter:
        written = self._written(status)
        if written is None:
            return _Counter({}, now, held)
        # Since the status was written the queue is taken to have held what it holds now.
        return _Counter({r: float(v) for r, v in written.usage.items()}, min(written.at, now), held)
