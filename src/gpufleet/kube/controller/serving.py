"""``/metrics``, ``/healthz`` and ``/readyz`` over aiohttp, for whatever renders the metrics page: the
controller's :class:`~gpufleet.kube.controller.metrics.ControllerMetrics`, the device plugin's, the
node agent's usage export. Its own module, so that the node agent serves its page without the
controller's metrics (and their imports)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

__all__ = ["RendersMetrics", "serve_http"]


class RendersMetrics(Protocol):
    """What ``/metrics`` shows: the controller's metrics, the node agent's usage export."""

    def render(self) -> bytes: ...


async def serve_http(
    metrics: RendersMetrics,
    ready: Callable[[], bool],
    host: str,
    ports: tuple[int, ...],
) -> web.AppRunner:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on every port of ``ports`` (the metrics port
    and the health port may differ or be the same). Returns the runner (``await runner.cleanup()``)."""

    async def metrics_page(_: web.Request) -> web.Response:
        # Rendered on the event loop, not in a worker thread: a thread of the loop's default executor
        # left at exit crashed the interpreter beside gRPC's threads (the device plugin serves this
        # page too; tests/agent/deviceplugin segfaulted with asyncio.to_thread here).
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="informers not synced\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics_page)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    for port in dict.fromkeys(ports):
        await web.TCPSite(runner, host, port).start()
    return runner
