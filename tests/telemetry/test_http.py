"""The HTTP sources against a real local aiohttp server serving the recorded data (no network): the
answers, and every failure as one TelemetryError line while the caller goes on."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp.web
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer

from gpufleet.telemetry import ExporterScrape, PodKey, PrometheusQuery, TelemetryError, TelemetryPoller

from .helpers import DATA, ManualClock, data

pytestmark = pytest.mark.asyncio

TRAIN = PodKey("ml-research", "llama-finetune-0")
SWEEP = PodKey("team-vision", "vit-sweep-3")


@dataclass
class Served:
    """What each path answers: (status, body, content type); a path missing answers 404."""

    routes: dict[str, tuple[int, bytes, str]] = field(default_factory=dict)
    queries: list[str] = field(default_factory=list)
    hang: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        if "query" in request.query:
            self.queries.append(request.query["query"])
        if request.path == "/hang":
            await self.hang.wait()
        status, body, content_type = self.routes.get(request.path, (404, b"404 page not found\n", "text/plain"))
        return aiohttp.web.Response(status=status, body=body, content_type=content_type)


@pytest_asyncio.fixture
async def served() -> AsyncIterator[tuple[Served, str]]:
    state = Served()
    app = aiohttp.web.Application()
    app.router.add_get("/{tail:.*}", state.handle)
    server = TestServer(app, host="127.0.0.1")  # a real server on a free local port
    await server.start_server()
    try:
        yield state, str(server.make_url("")).rstrip("/")
    finally:
        state.hang.set()
        await server.close()


def refused_url() -> str:
    """A local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


def text(name: str) -> tuple[int, bytes, str]:
    return 200, data(name).encode(), "text/plain"


async def test_scrape_reads_every_exporter(served: tuple[Served, str], clock: ManualClock) -> None:
    state, base = served
    state.routes["/a/metrics"] = text("dcgm-exporter-node.txt")
    state.routes["/b/metrics"] = text("dcgm-exporter-node-legacy.txt")
    async with ExporterScrape([f"{base}/a/metrics", f"{base}/b/metrics"], now=clock.now) as source:
        page = await source.read()
    assert page.at == clock.t and page.failures == () and page.gpus_seen == 10
    assert TRAIN in page.pods and SWEEP in page.pods and len(page.pods) == 4
    assert page.pods[TRAIN].gpu_util_percent == pytest.approx(96.5)


async def test_scrape_goes_on_without_the_targets_that_fail(served: tuple[Served, str], clock: ManualClock) -> None:
    state, base = served
    state.routes["/ok/metrics"] = text("dcgm-exporter-node.txt")
    state.routes["/err/metrics"] = (500, b"collector failed\n", "text/plain")
    state.routes["/bad/metrics"] = text("dcgm-exporter-malformed.txt")
    refused = refused_url()
    targets = [f"{base}/ok/metrics", f"{base}/err/metrics", f"{base}/bad/metrics", refused, f"{base}/none"]
    async with ExporterScrape(targets, now=clock.now) as source:
        page = await source.read()
    assert set(page.pods) >= {TRAIN}
    assert len(page.failures) == 4
    by_target = dict(zip(targets[1:], page.failures, strict=True))
    assert by_target[f"{base}/err/metrics"] == f"dcgm-exporter {base}/err/metrics: HTTP 500 Internal Server Error"
    assert by_target[f"{base}/bad/metrics"].startswith(f"dcgm-exporter {base}/bad/metrics: malformed exposition text:")
    assert by_target[refused].startswith(f"dcgm-exporter {refused}: cannot connect to 127.0.0.1:")
    assert "refused" in by_target[refused]
    assert by_target[f"{base}/none"] == f"dcgm-exporter {base}/none: HTTP 404 Not Found"
    assert all("\n" not in line and "Traceback" not in line for line in page.failures)


async def test_scrape_fails_as_a_whole_only_when_no_target_answers(clock: ManualClock) -> None:
    refused = refused_url()
    async with ExporterScrape([refused, refused], now=clock.now) as source:
        with pytest.raises(TelemetryError) as caught:
            await source.read()
    assert str(caught.value).startswith(f"dcgm-exporter {refused}: cannot connect")
    assert str(caught.value).endswith("(and 1 more)")


async def test_scrape_times_out_in_one_line(served: tuple[Served, str], clock: ManualClock) -> None:
    _, base = served
    async with ExporterScrape([f"{base}/hang"], now=clock.now, timeout_s=0.05) as source:
        with pytest.raises(TelemetryError, match=r"^dcgm-exporter .*/hang: no answer within 0.05 s$"):
            await source.read()


async def test_targets_are_read_anew_at_every_read(served: tuple[Served, str], clock: ManualClock) -> None:
    state, base = served
    state.routes["/a"] = text("dcgm-exporter-node.txt")
    targets: list[str] = []
    async with ExporterScrape(lambda: targets, now=clock.now) as source:
        assert (await source.read()).pods == {}
        targets.append(f"{base}/a")
        assert TRAIN in (await source.read()).pods


async def test_prometheus_query(served: tuple[Served, str], clock: ManualClock) -> None:
    state, base = served
    state.routes["/prom/api/v1/query"] = (200, (DATA / "prometheus-query-vector.json").read_bytes(),
                                          "application/json")
    async with PrometheusQuery(f"{base}/prom/", now=clock.now) as source:
        page = await source.read()
    assert state.queries == ['{__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_SM_ACTIVE|DCGM_FI_DEV_FB_USED"}']
    assert page.source == "prometheus" and page.gpus_seen == 8
    assert page.pods[TRAIN].fb_used_mib == 71234 + 70998 + 71402 + 71176


@pytest.mark.parametrize(("route", "expected"), [
    ((400, (DATA / "prometheus-query-error.json").read_bytes(), "application/json"),
     'HTTP 400 Bad Request: bad_data: invalid parameter "query"'),
    ((200, (DATA / "prometheus-query-error.json").read_bytes(), "application/json"),
     'query failed: bad_data: invalid parameter "query"'),
    ((503, b'{"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"}',
      "application/json"), "HTTP 503 Service Unavailable: timeout: query timed out in expression evaluation"),
    ((500, b"<html>oops</html>", "text/html"), "HTTP 500 Internal Server Error"),
    ((200, b'{"status": "success", "data": {', "application/json"), "malformed answer: "),
])
async def test_prometheus_failures_are_one_line(served: tuple[Served, str], clock: ManualClock,
                                                route: tuple[int, bytes, str], expected: str) -> None:
    state, base = served
    state.routes["/api/v1/query"] = route
    async with PrometheusQuery(base, now=clock.now) as source:
        with pytest.raises(TelemetryError) as caught:
            await source.read()
    line = str(caught.value)
    assert line.startswith(f"prometheus {base}/api/v1/query: {expected}")
    assert "\n" not in line


async def test_prometheus_refused(clock: ManualClock) -> None:
    base = refused_url().removesuffix("/metrics")
    async with PrometheusQuery(base, now=clock.now) as source:
        with pytest.raises(TelemetryError, match=r"^prometheus .*/api/v1/query: cannot connect to 127\.0\.0\.1:\d+: "):
            await source.read()


async def test_the_poller_goes_on_through_failures(served: tuple[Served, str], clock: ManualClock,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A failing Prometheus is logged in one line and counted; the loop keeps reading, and the first
    good answer reaches the sink."""
    state, base = served
    pages = []
    source = PrometheusQuery(base, now=clock.now)
    poller = TelemetryPoller(source, pages.append, now=clock.now, sleep=clock.sleep, interval_s=30.0)
    state.routes["/api/v1/query"] = (500, b"down", "text/plain")
    assert await poller.poll_once() == 5.0
    assert await poller.poll_once() == 10.0
    state.routes["/api/v1/query"] = (200, (DATA / "prometheus-query-vector.json").read_bytes(), "application/json")
    assert await poller.poll_once() == 30.0
    await source.close()
    assert len(pages) == 1 and TRAIN in pages[0].pods
    assert (poller.stats.failures_total, poller.stats.consecutive_failures, poller.stats.reads_total) == (2, 0, 3)
    warnings = [r.getMessage() for r in caplog.records if r.name == "gpufleet.telemetry"]
    assert len(warnings) == 2 and all("\n" not in w and "HTTP 500" in w for w in warnings)
    assert all(r.exc_info is None for r in caplog.records)
