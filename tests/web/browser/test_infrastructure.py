"""The browser-test infrastructure itself (conftest.py), on a tiny Starlette app of this file with a
script served from the repository: a click reaches the server and changes the page; console errors,
uncaught exceptions, failed requests and HTTP errors are caught; downloads and screenshots work."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .conftest import CHROMIUM_ARGS, REQUIRE_ENV, BrowserPage, browser_missing, png_size

PAGE = """<!doctype html><html><head><title>counter</title><link rel="icon" href="data:,">
<script src="/static/counter.js"></script></head>
<body><main><h1>Counter</h1><button id="count" type="button">next</button>
<p id="shown">count 0</p><a id="csv" href="/counts.csv" download>CSV</a></main></body></html>"""


def counter_app() -> Starlette:
    counts = {"n": 0}

    async def page(request: Request) -> HTMLResponse:
        return HTMLResponse(PAGE)

    async def next_count(request: Request) -> JSONResponse:
        counts["n"] += 1
        return JSONResponse({"count": counts["n"]})

    async def csv(request: Request) -> Response:
        return Response(f"count\n{counts['n']}\n", media_type="text/csv",
                        headers={"Content-Disposition": 'attachment; filename="counts.csv"'})

    async def broken(request: Request) -> HTMLResponse:
        return HTMLResponse('<!doctype html><link rel="icon" href="data:,"><script>console.error("on purpose");'
                            'window.missing.call()</script><img src="/no-such-image.png" alt="">')

    static = StaticFiles(directory=Path(__file__).parent / "static")
    return Starlette(routes=[Route("/", page), Route("/api/next", next_count, methods=["POST"]),
                             Route("/counts.csv", csv), Route("/broken", broken), Mount("/static", static)])


def test_a_click_reaches_the_server_and_changes_the_page(web: BrowserPage, serve: Callable[[Any], str]) -> None:
    url = serve(counter_app())
    page = web.page
    page.goto(url)
    assert page.title() == "counter"
    assert page.locator("main h1").inner_text() == "Counter"
    page.click("#count")
    page.wait_for_selector("#shown[data-count='1']")
    page.click("#count")
    page.wait_for_selector("#shown[data-count='2']")
    assert page.inner_text("#shown") == "count 2"
    shot = web.screenshot("counter")
    assert png_size(shot.read_bytes()) == (1280, 800)
    with page.expect_download() as download:
        page.click("#csv")
    saved = download.value.path()
    assert download.value.suggested_filename == "counts.csv"
    assert Path(saved).read_text() == "count\n2\n"
    assert web.unexpected() == []


def test_console_errors_and_failed_requests_are_caught(web: BrowserPage, serve: Callable[[Any], str]) -> None:
    url = serve(counter_app())
    web.page.goto(f"{url}/broken")
    web.page.wait_for_load_state("load")
    problems = web.unexpected()
    assert any(p.startswith("console error: on purpose") for p in problems), problems
    assert any(p.startswith("uncaught: ") and "reading 'call'" in p for p in problems), problems
    assert any(p == f"HTTP 404: GET {url}/no-such-image.png" for p in problems), problems
    web.page.goto(f"{url}/nowhere")  # a page that does not exist: an HTTP error answer
    assert f"HTTP 404: GET {url}/nowhere" in web.unexpected()
    for allowed in ("on purpose", "reading 'call'", "no-such-image", "nowhere", "favicon.ico"):
        web.expect_problem(allowed)
    assert web.unexpected() == []  # and so the test passes


def test_a_request_the_server_never_answers_is_caught(web: BrowserPage, serve: Callable[[Any], str]) -> None:
    url = serve(counter_app())
    web.page.goto(url)
    with web.page.expect_event("requestfailed"):
        web.page.evaluate("fetch('http://127.0.0.1:9/closed').catch(() => null)")  # port 9 (discard): refused
    assert any(p.startswith("request failed: GET http://127.0.0.1:9/closed") for p in web.unexpected())
    web.expect_problem("127.0.0.1:9/closed")


def test_the_browser_is_debians_chromium_with_the_projects_flags() -> None:
    assert "--headless" in CHROMIUM_ARGS and "--disable-background-networking" in CHROMIUM_ARGS
    assert browser_missing("/nonexistent/chromium", {}) is not None
    assert "apt-get install chromium" in (browser_missing("/nonexistent/chromium", {}) or "")
    with pytest.raises(RuntimeError, match=f"{REQUIRE_ENV} is set"):
        browser_missing("/nonexistent/chromium", {REQUIRE_ENV: "1"})


def test_a_screenshot_that_is_not_a_png_is_refused() -> None:
    with pytest.raises(AssertionError, match="not a PNG"):
        png_size(b"GIF89a" + bytes(30))
