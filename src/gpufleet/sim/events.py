"""Timed events and the queue that hands them out in a fixed order.

Events at the same instant are handled as one batch in this order: completions first (they free
capacity), then nodes going down, nodes coming back, arrivals, and last the scheduling cycle, which
so sees everything that happened at that instant. Ties within a kind keep insertion order, which
makes runs deterministic.
"""

from __future__ import annotations

import heapq
from enum import IntEnum
from typing import NamedTuple


class EventKind(IntEnum):
    COMPLETION = 0
    NODE_DOWN = 1
    NODE_UP = 2
    ARRIVAL = 3
    CYCLE = 4


class Event(NamedTuple):
    """A tuple, so that the heap compares events in C; ``seq`` is unique, so later fields never decide."""

    time: float
    kind: EventKind
    seq: int
    subject: int = 0  # job index, node index, or 0 for a cycle
    epoch: int = 0  # stale-event check: the subject's epoch when queued
    detail: float = 0.0  # outage length for NODE_DOWN
    tag: str = ""  # outage kind for NODE_DOWN


class EventQueue:
    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0

    def push(self, time: float, kind: EventKind, subject: int = 0, epoch: int = 0, detail: float = 0.0,
             tag: str = "") -> None:
        self._seq += 1
        heapq.heappush(self._heap, Event(time, kind, self._seq, subject, epoch, detail, tag))

    def pop(self) -> Event:
        return heapq.heappop(self._heap)

    def peek_time(self) -> float | None:
        return self._heap[0].time if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
