"""Browser tests: an ASGI app served by uvicorn on a free loopback port, in Debian's Chromium driven by
Playwright (README.md, "Tests").

- ``serve(app)`` starts ``app`` in a thread of its own (its own event loop) and returns its base URL;
  it is stopped when the test ends.
- ``browser`` (one per test module) is ``/usr/bin/chromium`` launched with :data:`CHROMIUM_ARGS`; Playwright
  never downloads a browser of its own (``.ci/run`` installs Debian's ``chromium`` package).
- ``web`` is a :class:`BrowserPage`: a fresh page whose console errors, uncaught exceptions, failed
  requests and HTTP error answers are collected; any of them fails the test after its body ran
  (``web.expect_problem`` lets a test allow one it causes on purpose). ``web.screenshot(name)`` saves a
  PNG under ``$GPUFLEET_SCREENSHOTS`` when set, else a temporary directory, and checks it is one.
- Without ``/usr/bin/chromium`` (or the playwright package) the tests are skipped with the reason, unless
  ``GPUFLEET_REQUIRE_BROWSER`` is set (``.ci/run`` sets it): then they fail.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync")
VIEWPORT = {"width": 1280, "height": 800}
REQUIRE_ENV = "GPUFLEET_REQUIRE_BROWSER"


def browser_missing(chromium: str = CHROMIUM, env: Mapping[str, str] = os.environ) -> str | None:
    """Why the browser tests cannot run here, or None when they can. Raises RuntimeError instead
    when ``GPUFLEET_REQUIRE_BROWSER`` is set in ``env`` (CI: a missing browser is a failure)."""
    reason = None
    if not Path(chromium).is_file():
        reason = f"Debian's chromium is not installed ({chromium} is missing): bash scripts/setup-system.sh (apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "the playwright package is not installed: pip install -e '.[dev]'"
    if reason is not None and env.get(REQUIRE_ENV):
        raise RuntimeError(f"{REQUIRE_ENV} is set and the browser tests cannot run: {reason}")
    return reason


class _Served:
    """``app`` served by uvicorn on a free port of 127.0.0.1, in a daemon thread with its own loop."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="auto"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True,
                                       name=f"uvicorn {self.url}")

    def start(self, timeout: float = 30.0) -> str:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:  # uvicorn has no callback: poll its flag, as eventually() does
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start on {self.url}")
            time.sleep(0.01)
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Any], str]]:
    """``serve(app)``: the base URL of ``app`` served for this test."""
    served: list[_Served] = []

    def start(app: Any) -> str:
        server = _Served(app)
        served.append(server)
        return server.start()

    yield start
    for server in served:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium for one test module. Not for the session: while Playwright's sync API runs, the main
    thread has a running event loop of its own, so that asyncio.run() (in other tests) would fail."""
    reason = browser_missing()
    if reason is not None:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("GPUFLEET_SCREENSHOTS")
    if wanted:
        path = Path(wanted)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("screenshots")


def png_size(data: bytes) -> tuple[int, int]:
    """The width and height of a PNG (AssertionError when ``data`` is not one)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@dataclass
class BrowserPage:
    """A page whose problems are collected (see the module docstring)."""

    page: Page
    shots: Path
    problems: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    def watch(self) -> None:
        page = self.page
        page.on("console", lambda m: self.problems.append(f"console {m.type}: {m.text} ({m.location.get('url')})")
                if m.type in ("error", "assert") else None)
        page.on("pageerror", lambda err: self.problems.append(f"uncaught: {err}"))
        page.on("requestfailed", lambda r: self.problems.append(f"request failed: {r.method} {r.url}: {r.failure}"))
        page.on("response", lambda r: self.problems.append(f"HTTP {r.status}: {r.request.method} {r.url}")
                if r.status >= 400 else None)

    def expect_problem(self, pattern: str) -> None:
        """Allow the problems matching ``pattern`` (a regular expression): the test causes them."""
        self.allowed.append(re.compile(pattern))

    def unexpected(self) -> list[str]:
        if not self.page.is_closed():
            self.page.evaluate("0")  # a round trip: events the browser sent before it are delivered
        return [p for p in self.problems if not any(a.search(p) for a in self.allowed)]

    def screenshot(self, name: str, *, full_page: bool = False) -> Path:
        """A PNG of the page (the viewport, or the whole page) saved as ``<name>.png``."""
        path = self.shots / f"{name}.png"
        data = self.page.screenshot(path=str(path), full_page=full_page)
        width, height = png_size(data)
        assert width == VIEWPORT["width"] and (height == VIEWPORT["height"] or (full_page and height >= 1)), path
        return path


@pytest.fixture
def web(browser: Browser, screenshot_dir: Path, request: pytest.FixtureRequest) -> Iterator[BrowserPage]:
    context = browser.new_context(viewport=VIEWPORT, accept_downloads=True)  # type: ignore[arg-type]
    context.set_default_timeout(30_000)
    watched = BrowserPage(context.new_page(), screenshot_dir)
    watched.watch()
    request.node.browser_page = watched
    try:
        yield watched
    finally:
        context.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Fail a test whose page had a problem (a console error, a failed request) once its body ran."""
    result = yield
    watched: BrowserPage | None = getattr(item, "browser_page", None)
    if watched is not None:
        problems = watched.unexpected()
        if problems:
            pytest.fail("the page had problems:\n  " + "\n  ".join(problems), pytrace=False)
    return result
