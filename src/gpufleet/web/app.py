"""The dashboard's ASGI application: Starlette routes, Jinja2 templates, the vendored assets.

Every page asks the :class:`~gpufleet.web.access.Authorizer` for the caller's visibility first (no
authorizer: everything, as an admin), then renders a view model of :mod:`gpufleet.web.views`. Pages
are read-only; the What-if page (admins only) runs the simulator, never the cluster.
"""

from __future__ import annotations

import asyncio
import colorsys
import contextlib
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gpufleet.adapters.errors import InputError
from gpufleet.web.access import EVERYTHING, Authorizer, Visibility
from gpufleet.web.source import DashboardSource
from gpufleet.web.views import cluster as cluster_views
from gpufleet.web.views import jobs as job_views
from gpufleet.web.views import queues as queue_views
from gpufleet.web.views import usage as usage_views
from gpufleet.web.whatif import (
    DEFAULT_DAYS,
    MAX_DAYS,
    WhatIfRunner,
    choose_workload,
    parse_change,
    parse_workload,
    workload_choices,
)

__all__ = ["create_app"]

HERE = Path(__file__).parent
NAV = (("/cluster", "Cluster"), ("/queues", "Queues"), ("/jobs", "Jobs"), ("/usage", "Usage and cost"),
       ("/whatif", "What-if"))
REPORT_TTL_S = 60.0  # how long a ledger report is reused


def color(i: int) -> str:
    """A queue's colour: hues a golden angle apart, so neighbours in the list differ."""
    r, g, b = colorsys.hls_to_rgb((i * 0.618033988749895) % 1.0, 0.55 if i % 2 else 0.47, 0.62)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def when(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.globals.update(static=lambda name: f"/static/{name}", color=color, when=when, nav=NAV, getattr=getattr)
    return env


def create_app(source: DashboardSource, *, auth: Authorizer | None = None) -> Starlette:
    """The dashboard over ``source``; ``auth`` None: every caller sees everything (``--auth none``)."""
    env = _environment()
    runner = WhatIfRunner()

    async def visible(request: Request) -> Visibility:
        return EVERYTHING if auth is None else await auth.visible(request)

    async def page(request: Request, template: str, path: str, vis: Visibility, status: int = 200,
                   **context: Any) -> HTMLResponse:
        fleet = await source.fleet()
        html = env.get_template(template).render(page=path, vis=vis, source=source.describe(),
                                                 warnings=fleet.warnings[:5] if path == "/cluster" else (),
                                                 **context)
        return HTMLResponse(html, status_code=status)

    def fragment(template: str, **context: Any) -> HTMLResponse:
        return HTMLResponse(env.get_template(template).render(**context))

    async def home(request: Request) -> Response:
        return RedirectResponse("/cluster", status_code=302)

    async def cluster(request: Request) -> Response:
        vis = await visible(request)
        fleet = await source.fleet()
        params = request.query_params
        view = cluster_views.cluster_view(fleet, vis, params.get("by", "rack"), params.get("color", "queue"))
        used = {q for g in view.groups for q, _ in g.bar if q >= 0}
        return await page(request, "cluster.html", "/cluster", vis, view=view, used=used,
                          groupings=cluster_views.GROUPINGS, colorings=cluster_views.COLORINGS)

    async def cluster_group(request: Request) -> Response:
        vis = await visible(request)
        fleet = await source.fleet()
        params = request.query_params
        try:
            offset = int(params.get("offset", "0"))
        except ValueError:
            raise HTTPException(400, "offset: not a number") from None
        group = cluster_views.cluster_group(fleet, vis, params.get("by", "rack"), params.get("key", ""), offset,
                                            color=params.get("color", "queue"))
        if group is None:
            raise HTTPException(404, "no such group")
        return fragment("_group.html", group=group)

    async def queues(request: Request) -> Response:
        vis = await visible(request)
        view = queue_views.queues_view(await source.fleet(), vis)
        return await page(request, "queues.html", "/queues", vis, view=view)

    async def jobs(request: Request) -> Response:
        vis = await visible(request)
        filters = job_views.JobFilters.of(request.query_params)
        listing = job_views.job_list(await source.fleet(), vis, filters)
        if request.headers.get("HX-Request"):
            return fragment("_jobs.html", list=listing)
        return await page(request, "jobs.html", "/jobs", vis, list=listing, filters=job_views.FILTERS)

    async def job(request: Request) -> Response:
        vis = await visible(request)
        fleet = await source.fleet()
        key = f"{request.path_params['namespace']}/{request.path_params['name']}"
        found = fleet.job_by_key.get(key)
        history = None
        if source.ledger is not None and found is not None and vis.sees(found.project, found.queue):
            names = [p.partition("/")[2] for p in found.pods]
            history = await asyncio.to_thread(source.ledger.intervals, namespace=found.namespace, pod_names=names)
        detail = job_views.job_detail(fleet, vis, key, history)
        if detail is None:
            raise HTTPException(404, f"no job {key}")
        return await page(request, "job.html", "/jobs", vis, d=detail)

    reports: dict[tuple[object, ...], tuple[float, Any]] = {}  # (kind, query, visibility) -> (when, result)

    async def cached(kind: str, query: usage_views.UsageQuery, vis: Visibility, work: Any) -> Any:
        """A ledger report, kept REPORT_TTL_S: the ledger's SQL is the slow part of the Usage page, and
        what it reports changes only as intervals are written."""
        key = (kind, query, vis)
        now = source.clock()
        hit = reports.get(key)
        if hit is not None and now - hit[0] < REPORT_TTL_S:
            return hit[1]
        result = await asyncio.to_thread(work, source.ledger, query, vis, source.prices)
        if len(reports) > 64:
            reports.clear()
        reports[key] = (now, result)
        return result

    def usage_query(request: Request) -> usage_views.UsageQuery:
        return usage_views.UsageQuery.of(dict(request.query_params), source.clock())

    async def usage(request: Request) -> Response:
        vis = await visible(request)
        params = {"since": request.query_params.get("since", ""), "until": request.query_params.get("until", ""),
                  "group": request.query_params.get("group", "project")}
        view, error = None, ""
        if source.ledger is not None:
            try:
                view = await cached("view", usage_query(request), vis, usage_views.usage_view)
            except InputError as err:
                error = str(err)
        return await page(request, "usage.html", "/usage", vis, status=400 if error else 200, view=view,
                          error=error, ledger=source.ledger is not None, params=params,
                          query=request.url.query, groupings=usage_views.GROUPINGS)

    async def usage_csv(request: Request) -> Response:
        vis = await visible(request)
        if source.ledger is None:
            raise HTTPException(404, "no usage ledger")
        try:
            text = await cached("csv", usage_query(request), vis, usage_views.usage_csv_text)
        except InputError as err:
            raise HTTPException(400, str(err)) from None
        return Response(text, media_type="text/csv",
                        headers={"Content-Disposition": 'attachment; filename="gpufleet-usage.csv"'})

    async def admin(request: Request) -> Visibility:
        vis = await visible(request)
        if not vis.admin:
            raise HTTPException(403, "the what-if page needs the gpufleet-platform-admin role")
        return vis

    def choices() -> list[str]:
        return workload_choices(source.ledger is not None, source.traces)

    async def whatif(request: Request) -> Response:
        vis = await admin(request)
        fleet = await source.fleet()
        result = None
        if source.result is not None:
            from gpufleet.sim import summary_rows

            result = summary_rows(source.result.get("runs", []))
        return await page(request, "whatif.html", "/whatif", vis, queues=[str(q.name) for q in fleet.snapshot.queues],
                          choices=choices(), days=DEFAULT_DAYS, max_days=MAX_DAYS, result=result)

    async def whatif_start(request: Request) -> Response:
        await admin(request)
        fleet = await source.fleet()
        # the form is urlencoded (hx.js sends URLSearchParams): parsed here, without python-multipart
        form = dict(parse_qsl((await request.body()).decode("utf-8", "replace")[:10_000]))
        try:
            change = parse_change(form, [str(q.name) for q in fleet.snapshot.queues])
            choice = parse_workload(form, choices())
        except ValueError as err:  # one line of text: the page's script shows it, escaped, in the result's place
            return PlainTextResponse(str(err), status_code=400)
        # the ledger's SQL or the bundled trace's first read: off the event loop
        work = await asyncio.to_thread(choose_workload, choice, fleet, ledger=source.ledger, now=source.clock(),
                                       traces=source.traces)
        run = runner.start(fleet.snapshot, work.jobs, change, work.describe())
        return fragment("_whatif.html", run=run)

    async def whatif_poll(request: Request) -> Response:
        await admin(request)
        run = runner.get(request.path_params["run"])
        if run is None:
            raise HTTPException(404, "no such what-if run")
        return fragment("_whatif.html", run=run)

    async def healthz(request: Request) -> Response:
        return Response("ok\n", media_type="text/plain")

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        detail = _escape(str(exc.detail))
        return HTMLResponse(f'<!doctype html><link rel="icon" href="data:,"><title>{exc.status_code}</title>'
                            f'<p class="error">{exc.status_code}: {detail}</p>', status_code=exc.status_code,
                            headers=exc.headers)

    routes = [
        Route("/", home),
        Route("/cluster", cluster),
        Route("/cluster/group", cluster_group),
        Route("/queues", queues),
        Route("/jobs", jobs),
        Route("/jobs/{namespace}/{name}", job),
        Route("/usage", usage),
        Route("/usage.csv", usage_csv),
        Route("/whatif", whatif, methods=["GET"]),
        Route("/whatif", whatif_start, methods=["POST"]),
        Route("/whatif/{run}", whatif_poll),
        Route("/healthz", healthz),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        warm = asyncio.create_task(source.fleet())  # decide the source before the first visitor asks
        yield
        warm.cancel()
        runner.close()

    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error}, lifespan=lifespan)
    app.state.source = source
    app.state.auth = auth
    app.state.whatif = runner
    return app


def _escape(text: str) -> str:
    from html import escape

    return escape(text)
