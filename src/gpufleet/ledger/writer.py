"""The buffered writer: the controller hands it ledger events and never waits on the database.

Events go into a bounded in-memory buffer (first in, first out) and are written in batches, each batch
one transaction of the sink (:class:`~gpufleet.ledger.store.LedgerStore`). When a write fails the batch
stays at the head of the buffer and the writer tries again after an exponential backoff; while the
database is away new events keep coming into the buffer up to its capacity, and only events that do not
fit are dropped (and counted). The store's writes are idempotent, so a batch written again after a
failure that had in fact committed does no harm. The clock and the sleep are injected: tests never
wait on real time. ``on_status`` receives a :class:`WriterStatus` after every flush attempt and every
drop (for a metric and an Event).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import islice
from typing import Protocol

from gpufleet.domain.retry import Backoff
from gpufleet.ledger.model import LedgerEvent

__all__ = ["Backoff", "BufferedWriter", "LedgerSink", "WriterStatus"]

_DEFAULT_BACKOFF = Backoff()  # a database away: first retry after 0.5 s, at most every minute


class LedgerSink(Protocol):
    """Where the writer puts its batches (:class:`~gpufleet.ledger.store.LedgerStore` is one): one
    transaction per call, idempotent, raising on failure."""

    def write(self, events: Sequence[LedgerEvent]) -> None: ...


@dataclass(frozen=True, slots=True)
class WriterStatus:
    """What the writer holds and has lost: for the controller's metric and Event."""

    buffered: int  # events waiting to be written
    dropped: int  # events refused since the start because the buffer was full
    written: int  # events written since the start
    failures: int  # failed flushes in a row (0 once one succeeds)
    last_error: str | None  # the last failure, one line; None once a flush succeeds
    retry_at: float | None  # the clock time of the next attempt while backing off, else None


async def _wait_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


class BufferedWriter:
    """A bounded buffer of ledger events in front of a sink; see the module's docstring."""

    def __init__(
        self,
        sink: LedgerSink,
        *,
        capacity: int = 200_000,
        batch_size: int = 5_000,
        backoff: Backoff = _DEFAULT_BACKOFF,
        clock: Callable[[], float] = time.monotonic,
        on_status: Callable[[WriterStatus], None] | None = None,
    ) -> None:
        if capacity < 1 or batch_size < 1:
            raise ValueError("capacity and batch_size must be at least 1")
        self._sink = sink
        self.capacity = capacity
        self.batch_size = batch_size
        self._backoff = backoff
        self._clock = clock
        self._on_status = on_status
        self._buffer: deque[LedgerEvent] = deque()
        self._lock = threading.Lock()  # the buffer and the counters
        self._flushing = threading.Lock()  # one flush at a time
        self._dropped = 0
        self._written = 0
        self._failures = 0
        self._last_error: str | None = None
        self._retry_at: float | None = None

    # --- the producer's side -----------------------------------------------------------------------

    def submit(self, event: LedgerEvent) -> bool:
        """Buffer one event; False (and counted as dropped) when the buffer is full."""
        with self._lock:
            if len(self._buffer) < self.capacity:
                self._buffer.append(event)
                return True
            self._dropped += 1
        self._report()
        return False

    def submit_many(self, events: Iterable[LedgerEvent]) -> int:
        """Buffer events in order while they fit; the rest are dropped (counted). Returns how many fit."""
        accepted = refused = 0
        with self._lock:
            for event in events:
                if len(self._buffer) < self.capacity:
                    self._buffer.append(event)
                    accepted += 1
                else:
                    refused += 1
            self._dropped += refused
        if refused:
            self._report()
        return accepted

    # --- the flushing side -------------------------------------------------------------------------

    @property
    def status(self) -> WriterStatus:
        with self._lock:
            return WriterStatus(
                buffered=len(self._buffer),
                dropped=self._dropped,
                written=self._written,
                failures=self._failures,
                last_error=self._last_error,
                retry_at=self._retry_at,
            )

    def next_attempt_in(self, interval: float) -> float:
        """Seconds until the next flush should run: the backoff's rest while backing off, else ``interval``."""
        with self._lock:
            retry_at = self._retry_at
        if retry_at is None:
            return interval
        return max(0.0, retry_at - self._clock())

    def flush(self, *, force: bool = False) -> bool:
        """Write the buffer in batches until it is empty or a write fails; True when it is empty.

        While backing off (after a failure) it writes nothing until the retry time, unless ``force``.
        """
        with self._flushing:
            if not force and self._retry_at is not None and self._clock() < self._retry_at:
                return False
            attempted = False
            try:
                while True:
                    with self._lock:
                        batch = list(islice(self._buffer, self.batch_size))
                    if not batch:
                        return True
                    attempted = True
                    try:
                        self._sink.write(batch)
                    except Exception as err:  # any failure keeps the batch; the status says which
                        self._failed(err)
                        return False
                    with self._lock:
                        for _ in batch:
                            self._buffer.popleft()
                        self._written += len(batch)
                        self._failures = 0
                        self._last_error = None
                        self._retry_at = None
            finally:
                if attempted:
                    self._report()

    def _failed(self, err: Exception) -> None:
        line = " ".join(str(err).split()) or type(err).__name__
        with self._lock:
            self._failures += 1
            self._last_error = line
            self._retry_at = self._clock() + self._backoff.delay(self._failures)

    def _report(self) -> None:
        if self._on_status is not None:
            self._on_status(self.status)

    async def run(
        self,
        stop: asyncio.Event,
        *,
        interval: float = 1.0,
        sleep: Callable[[float], Awaitable[object]] | None = None,
        offload: Callable[[Callable[[], bool]], Awaitable[bool]] = asyncio.to_thread,
    ) -> None:
        """Flush every ``interval`` seconds (sooner or later as the backoff says) until ``stop`` is set,
        then try once more. ``offload`` runs a flush off the event loop (a thread by default); ``sleep``
        waits (by default until the time passes or ``stop`` is set)."""
        pause = sleep or partial(_wait_or_stop, stop)
        while not stop.is_set():
            await offload(self.flush)
            await pause(self.next_attempt_in(interval))
        await offload(partial(self.flush, force=True))
