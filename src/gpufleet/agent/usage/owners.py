"""PID -> owning pod, through :class:`ProcReader`, cached per process.

A process's cgroup does not change, so its owner is read once; but the kernel hands PIDs out again,
so the cache is keyed by the PID *and* the process's start time (``/proc/<pid>/stat`` field 22): a
new process behind an old PID is read afresh, never taken for the old one. Each poll reads one
``stat`` per GPU process (and a ``cgroup`` for each new one); entries of processes no longer on a GPU
are dropped after the poll, so the cache holds at most the GPU processes of the last poll (and never
more than ``capacity``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.agent.usage.cgroups import CgroupOwner, parse_cgroup, parse_start_time
from gpufleet.agent.usage.proc import ProcReader

__all__ = ["UNREADABLE", "Owner", "ProcessOwners"]


class _Unreadable:
    """A process whose files could not be read (gone since NVML's answer, or no proc root)."""

    def __repr__(self) -> str:
        return "UNREADABLE"


UNREADABLE = _Unreadable()
Owner = CgroupOwner | None | _Unreadable
"""A pod's container, ``None`` (a host process: in no pod's cgroup), or :data:`UNREADABLE`."""


@dataclass(slots=True)
class _Cached:
    start_time: int
    owner: CgroupOwner | None


class ProcessOwners:
    def __init__(self, proc: ProcReader, capacity: int = 4096) -> None:
        self.proc = proc
        self.capacity = capacity
        self._cache: dict[int, _Cached] = {}
        self.cgroup_reads = 0  # cgroup files read (cache misses), for the agent's own metrics

    @property
    def cached(self) -> tuple[int, ...]:
        """The PIDs whose owners are held, oldest first."""
        return tuple(self._cache)

    def owners(self, pids: Iterable[int]) -> dict[int, Owner]:
        """The owner of each of ``pids``; forgets every process not among them."""
        found: dict[int, Owner] = {}
        for pid in pids:
            if pid not in found:
                found[pid] = self._owner(pid)
        for pid in [pid for pid in self._cache if pid not in found]:
            del self._cache[pid]
        return found

    def _owner(self, pid: int) -> Owner:
        stat = self.proc.stat(pid)
        start = parse_start_time(stat) if stat is not None else None
        if start is None:
            self._cache.pop(pid, None)
            return UNREADABLE
        cached = self._cache.get(pid)
        if cached is not None and cached.start_time == start:
            return cached.owner
        self.cgroup_reads += 1
        text = self.proc.cgroup(pid)
        if text is None:
            self._cache.pop(pid, None)
            return UNREADABLE
        owner = parse_cgroup(text)
        if len(self._cache) >= self.capacity and pid not in self._cache:
            del self._cache[next(iter(self._cache))]  # the oldest entry
        self._cache[pid] = _Cached(start, owner)
        return owner
