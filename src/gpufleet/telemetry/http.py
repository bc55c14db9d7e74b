"""The HTTP sources of GPU telemetry, on aiohttp: dcgm-exporters' ``/metrics`` scraped directly, or a
Prometheus server's ``/api/v1/query``.

Every failure of a target (no connection, no answer in time, an HTTP error status, text or JSON the
parsers refuse, a Prometheus ``status: error``) is one :class:`TelemetryError` line naming the
source and the target, never a traceback. A scrape of many exporters reads those that answer and
lists the others in :attr:`TelemetryPage.failures`; it fails as a whole only when none answered.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from types import TracebackType

import aiohttp

from gpufleet.telemetry.model import GpuReading, PodLabels, TelemetryError, TelemetryPage
from gpufleet.telemetry.prometheus_api import decode_query_answer, query_failure
from gpufleet.telemetry.readings import parse_exporter_text, pod_usage, readings_from_samples

__all__ = ["DEFAULT_QUERY", "ExporterScrape", "PrometheusQuery"]

DEFAULT_QUERY = '{__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_SM_ACTIVE|DCGM_FI_DEV_FB_USED"}'


def _http_failure(source: str, err: BaseException, timeout_s: float) -> TelemetryError:
    if isinstance(err, TelemetryError):
        return err
    if isinstance(err, TimeoutError):
        return TelemetryError(f"{source}: no answer within {timeout_s:g} s")
    if isinstance(err, aiohttp.ClientConnectorError):
        os_error = err.os_error
        cause = (os.strerror(os_error.errno) if os_error.errno else os_error.strerror) or str(os_error)
        return TelemetryError(f"{source}: cannot connect to {err.host}:{err.port}: {cause.lower()}")
    return TelemetryError(f"{source}: {type(err).__name__}: {err}")


class _Http:
    """An aiohttp session opened on first use (inside the running loop) and closed by :meth:`close`,
    unless the caller passed its own."""

    def __init__(self, session: aiohttp.ClientSession | None, timeout_s: float) -> None:
        self._session = session
        self._owned = session is None
        self.timeout_s = timeout_s

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
            self._owned = True
        return self._session

    async def close(self) -> None:
        if self._owned and self._session is not None:
            await self._session.close()
            self._session = None


class _Closing:
    _http: _Http

    async def close(self) -> None:
        await self._http.close()

    async def __aenter__(self) -> _Closing:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, err: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


class ExporterScrape(_Closing):
    """Scrapes dcgm-exporters' ``/metrics`` pages (the URLs of ``targets``, read anew at every read: a
    list, or a callable giving the current list), at most ``concurrency`` at a time."""

    name = "dcgm-exporter"

    def __init__(self, targets: Sequence[str] | Callable[[], Sequence[str]], *, now: Callable[[], float],
                 labels: PodLabels | None = None, timeout_s: float = 5.0, concurrency: int = 64,
                 session: aiohttp.ClientSession | None = None) -> None:
        self._targets = targets
        self._now = now
        self._labels = labels if labels is not None else PodLabels()
        self._http = _Http(session, timeout_s)
        self._limit = asyncio.Semaphore(max(1, concurrency))

    def targets(self) -> list[str]:
        return list(self._targets() if callable(self._targets) else self._targets)

    async def scrape(self, url: str) -> list[GpuReading]:
        """One exporter's readings; raises :class:`TelemetryError`."""
        source = f"{self.name} {url}"
        try:
            async with self._limit, self._http.session().get(url) as answer:
                if answer.status != 200:
                    raise TelemetryError(f"{source}: HTTP {answer.status} {answer.reason or ''}".rstrip())
                body = await answer.read()
        except (aiohttp.ClientError, TimeoutError, TelemetryError) as err:
            raise _http_failure(source, err, self._http.timeout_s) from None
        return parse_exporter_text(body.decode("utf-8", errors="replace"), source, self._labels)

    async def read(self) -> TelemetryPage:
        targets = self.targets()
        results = await asyncio.gather(*(self.scrape(url) for url in targets), return_exceptions=True)
        readings: list[GpuReading] = []
        failures: list[str] = []
        for result in results:
            if isinstance(result, TelemetryError):
                failures.append(str(result))
            elif isinstance(result, BaseException):
                raise result
            else:
                readings.extend(result)
        if targets and len(failures) == len(targets):
            more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
            raise TelemetryError(f"{failures[0]}{more}")
        at = self._now()
        return TelemetryPage(source=self.name, at=at, pods=pod_usage(readings, at),
                             gpus_seen=len({(r.hostname, r.gpu_id) for r in readings}), failures=tuple(failures))


class PrometheusQuery(_Closing):
    """Asks a Prometheus server (``base_url``, e.g. ``http://prometheus.monitoring:9090``) for the
    three counters with one instant query (``query``: by default every series of the three names)."""

    name = "prometheus"

    def __init__(self, base_url: str, *, now: Callable[[], float], labels: PodLabels | None = None,
                 query: str = DEFAULT_QUERY, timeout_s: float = 10.0,
                 session: aiohttp.ClientSession | None = None) -> None:
        self.url = base_url.rstrip("/") + "/api/v1/query"
        self.query = query
        self._now = now
        self._labels = labels if labels is not None else PodLabels()
        self._http = _Http(session, timeout_s)

    async def read(self) -> TelemetryPage:
        source = f"{self.name} {self.url}"
        try:
            async with self._http.session().get(self.url, params={"query": self.query}) as answer:
                body = await answer.read()
                if answer.status != 200:
                    failure = query_failure(body)
                    detail = f": {failure}" if failure else ""
                    raise TelemetryError(f"{source}: HTTP {answer.status} {answer.reason or ''}".rstrip() + detail)
        except (aiohttp.ClientError, TimeoutError, TelemetryError) as err:
            raise _http_failure(source, err, self._http.timeout_s) from None
        # the whole fleet's answer at once (0.5 s for 1,000 nodes): decoded in a worker thread, so that
        # the event loop keeps its turns meanwhile
        samples, warnings = await asyncio.to_thread(decode_query_answer, body, source)
        readings = await asyncio.to_thread(readings_from_samples, samples, self._labels)
        at = self._now()
        return TelemetryPage(source=self.name, at=at, pods=pod_usage(readings, at),
                             gpus_seen=len({(r.hostname, r.gpu_id) for r in readings}),
                             failures=tuple(f"{source}: warning: {w}" for w in warnings))
