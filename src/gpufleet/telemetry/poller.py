"""The scraper loop: reads a :class:`TelemetrySource` every interval, hands each page to a sink, and
backs off exponentially while the source fails (the time and the sleep are injected; tests never
wait). A failure is one log line and a count in :class:`PollerStats`, never an exception out of the
loop: the controller keeps scheduling without telemetry.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gpufleet.domain.retry import Backoff
from gpufleet.telemetry.model import TelemetryError, TelemetryPage
from gpufleet.telemetry.port import TelemetrySource

__all__ = ["Backoff", "PollerStats", "TelemetryPoller"]

_LOG = logging.getLogger("gpufleet.telemetry")


@dataclass(slots=True)
class PollerStats:
    """What the loop has done, for metrics: reads tried, reads that failed (all of the source), targets
    that failed within reads that succeeded, the failures in a row now, the last error line and the
    time of the last read that succeeded."""

    reads_total: int = 0
    failures_total: int = 0
    partial_failures_total: int = 0
    consecutive_failures: int = 0
    last_error: str | None = None
    last_success_at: float | None = None


class TelemetryPoller:
    def __init__(self, source: TelemetrySource, sink: Callable[[TelemetryPage], None], *,
                 now: Callable[[], float], sleep: Callable[[float], Awaitable[None]],
                 interval_s: float = 30.0, backoff: Backoff | None = None,
                 logger: logging.Logger | None = None) -> None:
        self.source = source
        self.sink = sink
        self.now = now
        self.sleep = sleep
        self.interval_s = interval_s
        # an exporter or Prometheus away: first retry after 5 s, at most every 5 minutes
        self.backoff = backoff if backoff is not None else Backoff(initial_s=5.0, maximum_s=300.0)
        self.stats = PollerStats()
        self.log = logger if logger is not None else _LOG
        self._stopped = False

    async def poll_once(self) -> float:
        """One read: the page goes to the sink; returns the wait before the next read."""
        stats = self.stats
        stats.reads_total += 1
        try:
            page = await self.source.read()
        except Exception as err:  # a source's bug must not stop the controller either
            line = str(err) if isinstance(err, TelemetryError) else f"{self.source.name}: {type(err).__name__}: {err}"
            stats.failures_total += 1
            stats.consecutive_failures += 1
            stats.last_error = " ".join(line.split())
            delay = self.backoff.delay(stats.consecutive_failures)
            self.log.warning("telemetry: %s (failure %d in a row; next try in %g s)", stats.last_error,
                             stats.consecutive_failures, delay)
            return delay
        stats.consecutive_failures = 0
        stats.last_success_at = self.now()
        stats.partial_failures_total += len(page.failures)
        for line in page.failures:
            self.log.warning("telemetry: %s", line)
        self.sink(page)
        return self.interval_s

    def stop(self) -> None:
        """Ends :meth:`run` after the read or wait in progress."""
        self._stopped = True

    async def run(self) -> None:
        """Reads until :meth:`stop`; closes the source at the end."""
        try:
            while not self._stopped:
                delay = await self.poll_once()
                if self._stopped:
                    break
                await self.sleep(delay)
        finally:
            await self.source.close()
