"""The dashboard's pages in Debian's Chromium: every page against examples/demo.yaml (with a usage ledger)
and against gpufleet.testing.dashboard_snapshot's 5,000 nodes, 40,000 pods and 200 queues; queue -> job ->
explanation, a filter, the CSV download, a what-if run, a restricted caller; screenshots compared
structurally (the elements there, no console error, no failed request: conftest.py fails the test on
any). The cluster page's first paint on the large snapshot is written to
``$GPUFLEET_BENCH_OUT/dashboard-first-paint.json`` when that variable is set (a figure for
BENCHMARKS.md, never asserted)."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet.adapters.k8s_yaml import load_snapshot_file
from gpufleet.domain import GPU, MILLI, Snapshot
from gpufleet.testing import dashboard_snapshot
from gpufleet.web import SnapshotSource, create_app
from gpufleet.web.access import Visibility

from .conftest import BrowserPage, _Served

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "examples" / "demo.yaml"
NOW = 1_767_312_000.0  # 2026-01-02T00:00:00Z: the sources' clock (the Usage page's default period ends here)
PAGES = {"/cluster": "Cluster", "/queues": "Queues", "/jobs": "Jobs", "/usage": "Usage and cost",
         "/whatif": "What-if"}
LARGE_QUEUES = 200  # big_snapshot(): 5,000 nodes, 40,000 pods, 200 queues (the size)


def demo_ledger(snapshot: Snapshot, path: Path) -> Any:
    """A usage ledger (SQLite) with an interval for each bound pod of ``snapshot``: bound two hours
    before NOW, the first one preempted an hour later, the others still open."""
    from gpufleet.ledger import EndReason, IntervalEnd, IntervalStart, open_ledger

    ledger = open_ledger(str(path))
    bound = [p for p in snapshot.pods if p.node_name is not None]
    assert bound, "the demo has bound pods"
    starts = [IntervalStart(pod_uid=f"uid-{p.namespace}-{p.name}", bound_at=NOW - 7200, namespace=p.namespace,
                            pod_name=p.name, queue=str(p.queue_label or "default"), node=str(p.node_name),
                            gpus=max(1.0, p.requests.get(GPU, 0) / MILLI), created_at=NOW - 7300)
              for p in bound]
    ledger.record_starts(starts)
    first = starts[0]
    ledger.record_ends([IntervalEnd(first.pod_uid, first.bound_at, NOW - 3600, EndReason.EVICTED_PREEMPTION,
                                    preemptor="team-a/someone")])
    return ledger


class Restricted:
    """An Authorizer that lets every caller see the one queue ``team-a``, as no admin."""

    async def visible(self, request: Any) -> Visibility:
        return Visibility(queues=frozenset({"team-a"}))


# A trace file offered on the What-if page (as `gpufleet dashboard --trace week.csv` offers it): one job
# before its last day, then a job for team-a by name and two of another tenant, spread over the leaf queues.
WEEK_CSV = ("name,submit_time,duration,gpus,queue,user\n"
            "early,0,600,1,,ann\ntune,90000,1800,4,team-a,\nsweep-1,90600,3600,2,,zoe\nsweep-2,90900,3600,2,,zoe\n")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from gpufleet.adapters.traces import load_trace

    snapshot = load_snapshot_file(str(DEMO))
    folder = tmp_path_factory.mktemp("ledger")
    ledger = demo_ledger(snapshot, folder / "usage.db")
    (folder / "week.csv").write_text(WEEK_CSV, encoding="utf-8")
    traces = {"week.csv": load_trace(folder / "week.csv")[0]}
    server = _Served(create_app(SnapshotSource(snapshot, "examples/demo.yaml", ledger=ledger, traces=traces,
                                               clock=lambda: NOW)))
    yield server.start()
    server.stop()
    ledger.close()


@pytest.fixture(scope="module")
def large() -> Iterator[str]:
    source = SnapshotSource(dashboard_snapshot.big_snapshot(), "5,000 nodes", clock=lambda: NOW)
    # Decided before the pages are timed, in a thread: Playwright's own event loop runs in this one.
    warm = threading.Thread(target=lambda: asyncio.run(source.fleet()))
    warm.start()
    warm.join()
    server = _Served(create_app(source))
    yield server.start(timeout=120)
    server.stop()


def _load(web: BrowserPage, url: str, title: str) -> None:
    """Open ``url``: an HTTP 200, its heading, the navigation to every page."""
    answer = web.page.goto(url)
    assert answer is not None and answer.status == 200, url
    assert web.page.locator("main h1").first.inner_text().startswith(title)
    assert web.page.locator("header a[data-nav]").count() == len(PAGES)


@pytest.mark.parametrize("path", sorted(PAGES))
def test_every_page_loads_on_the_demo(web: BrowserPage, demo: str, path: str) -> None:
    _load(web, demo + path, PAGES[path])
    web.screenshot(f"demo{path.replace('/', '-')}", full_page=True)


@pytest.mark.parametrize("path", sorted(PAGES))
def test_every_page_loads_on_5000_nodes(web: BrowserPage, large: str, path: str) -> None:
    _load(web, large + path, PAGES[path])
    page = web.page
    if path == "/cluster":
        assert page.locator(".stats").inner_text().startswith("5000")
        assert page.locator("details.group").count() >= 1
    elif path == "/queues":
        assert page.locator("#queues tr[data-queue]").count() >= LARGE_QUEUES  # and the implied default
    elif path == "/jobs":
        assert page.locator("tr[data-job]").count() > 0
    web.screenshot(f"large{path.replace('/', '-')}")


def test_the_cluster_page_opens_a_group_into_nodes_and_gpus(web: BrowserPage, large: str) -> None:
    _load(web, large + "/cluster", "Cluster")
    group = web.page.locator("details.group").first
    group.locator("summary").click()
    group.locator(".node[data-node]").first.wait_for()
    assert group.locator(".node[data-node] .gpu").count() >= 8
    web.screenshot("large-cluster-open")


def test_the_cluster_pages_first_paint_is_recorded(web: BrowserPage, large: str) -> None:
    _load(web, large + "/cluster", "Cluster")  # once to warm the server's caches and the browser's
    _load(web, large + "/cluster", "Cluster")
    # The paint entry is recorded when a frame is painted, which may come after the load event
    # (headless Chromium paints on its own schedule): wait for the entry, not for a time.
    web.page.wait_for_function("() => performance.getEntriesByName('first-contentful-paint').length > 0",
                               timeout=60_000)
    timings = web.page.evaluate("""() => {
        const paint = performance.getEntriesByName('first-contentful-paint')[0];
        const nav = performance.getEntriesByType('navigation')[0];
        return {first_contentful_paint_ms: paint ? paint.startTime : null, response_end_ms: nav.responseEnd,
                dom_content_loaded_ms: nav.domContentLoadedEventEnd, load_ms: nav.loadEventEnd,
                html_bytes: nav.transferSize, decoded_html_bytes: nav.decodedBodySize};
    }""")
    assert timings["first_contentful_paint_ms"] is not None  # painted (how fast is a benchmark's figure)
    out = os.environ.get("GPUFLEET_BENCH_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        record = {"page": "/cluster", "snapshot": "big_snapshot(): 5,000 nodes, 40,000 pods, 200 queues",
                  "browser": "/usr/bin/chromium (headless)", **timings}
        (Path(out) / "dashboard-first-paint.json").write_text(json.dumps(record, indent=2) + "\n")


def test_queue_to_job_to_its_explanation(web: BrowserPage, demo: str) -> None:
    _load(web, demo + "/queues", "Queues")
    page = web.page
    # The demo's oversized second inference replica waits for its queue's quota (examples/demo.yaml).
    queue = page.locator("#queues tr[data-queue='serving']")
    assert queue.locator("a[href^='/jobs/']").count() >= 1  # its pending gangs, in admission order
    queue.locator("a[href='/jobs/ml/serve-2']").click()
    page.wait_for_url("**/jobs/ml/serve-2")
    assert page.locator("main h1").inner_text().startswith("Job ml/serve-2")
    assert page.locator("main h1 .tag").inner_text() == "pending"
    assert page.locator("#explanation").is_visible()
    blocking = page.locator("#pending-reason mark.blocking")  # the blocking resource highlighted
    assert "quota" in [m.inner_text() for m in blocking.all()]
    assert page.locator("#pods tr").count() >= 2
    web.screenshot("demo-job-pending", full_page=True)
    page.locator("header a[data-nav='jobs']").click()
    page.wait_for_url("**/jobs")
    running = page.locator("tr[data-job]:has(.tag.running) a").first
    running.click()
    page.wait_for_url("**/jobs/*/*")
    assert page.locator("#history tr").count() >= 2  # the ledger's intervals of that job
    assert page.locator("#pods tr td:nth-child(3)").first.inner_text() not in ("", "-")  # where it runs


def test_a_filter_narrows_the_job_list(web: BrowserPage, demo: str) -> None:
    _load(web, demo + "/jobs", "Jobs")
    page = web.page
    every = page.locator("tr[data-job]").count()
    page.select_option("#job-filters select[name='state']", "pending")
    page.wait_for_url("**/jobs?*state=pending*")
    page.wait_for_function("() => [...document.querySelectorAll('tr[data-job] .tag')]"
                           ".every(t => t.textContent.trim() === 'pending')")
    pending = page.locator("tr[data-job]").count()
    assert 0 < pending < every
    page.fill("#job-filters input[name='q']", "no-such-job-anywhere")
    page.wait_for_function("() => document.querySelectorAll('tr[data-job]').length === 0")
    assert page.locator("#job-count").inner_text().startswith("0 of")
    web.screenshot("demo-jobs-filtered")


def test_the_usage_csv_downloads(web: BrowserPage, demo: str) -> None:
    _load(web, demo + "/usage", "Usage and cost")
    page = web.page
    assert page.locator("#usage-table tr").count() >= 2
    with page.expect_download() as download:
        page.click("#csv")
    assert download.value.suggested_filename.endswith(".csv")
    rows = list(csv.reader(io.StringIO(Path(download.value.path()).read_text(encoding="utf-8"))))
    assert len(rows) >= 2 and "project" in rows[0]
    web.screenshot("demo-usage", full_page=True)


def test_a_what_if_runs_with_progress_then_shows_before_and_after(web: BrowserPage, demo: str) -> None:
    _load(web, demo + "/whatif", "What-if")
    page = web.page
    page.select_option("#whatif-form select[name='queue']", "team-a")
    page.fill("#whatif-form input[name='quota']", "16")
    page.click("#whatif-form button[type='submit']")
    page.locator("#whatif-run").wait_for()
    page.locator("#whatif-run[data-phase='done']").wait_for(timeout=120_000)
    assert page.locator("#whatif-table tr").count() >= 3  # a header, before, after
    assert "team-a" in page.locator("#whatif-run").inner_text()
    assert page.locator("#whatif-workload").inner_text().startswith("Workload: the usage ledger's last 7 day(s)")
    web.screenshot("demo-whatif", full_page=True)


def test_a_what_if_over_a_chosen_trace_and_days(web: BrowserPage, demo: str) -> None:
    _load(web, demo + "/whatif", "What-if")
    page = web.page
    page.select_option("#whatif-form select[name='trace']", "week.csv")
    page.fill("#whatif-form input[name='days']", "1")
    page.select_option("#whatif-form select[name='queue']", "team-a")
    page.fill("#whatif-form input[name='weight']", "4")
    page.click("#whatif-form button[type='submit']")
    page.locator("#whatif-run[data-phase='done']").wait_for(timeout=120_000)
    headers = [h.inner_text() for h in page.locator("#whatif-table tr").first.locator("th").all()]
    assert headers[-2:] == ["before", "after"] and page.locator("#whatif-table tr").count() >= 3
    assert page.locator("#whatif-workload").inner_text() == (
        "Workload: trace week.csv, its last 1 day(s): 3 jobs; queues: 1 by name, 2 assigned to a leaf queue by hash")
    assert "3 jobs" in page.locator("#whatif-run").inner_text()
    web.screenshot("demo-whatif-trace", full_page=True)


def test_a_bad_number_of_days_is_said_in_one_line(web: BrowserPage, demo: str) -> None:
    _load(web, demo + "/whatif", "What-if")
    page = web.page
    web.expect_problem(r"HTTP 400: POST .*/whatif")
    web.expect_problem(r"status of 400")
    page.fill("#whatif-form input[name='days']", "365")
    with page.expect_response(lambda r: r.url.endswith("/whatif") and r.request.method == "POST") as answer:
        page.click("#whatif-form button[type='submit']")
    assert answer.value.status == 400 and answer.value.text() == "days: 365 is outside 1..90"
    shown = page.locator("#whatif-result .error")
    shown.wait_for()
    assert shown.inner_text() == "Error 400: days: 365 is outside 1..90"
    assert page.locator("#whatif-run").count() == 0


def test_a_restricted_caller_sees_its_queue_only_and_no_what_if(web: BrowserPage,
                                                               serve: Callable[[Any], str]) -> None:
    url = serve(create_app(SnapshotSource(load_snapshot_file(str(DEMO)), "demo", clock=lambda: NOW),
                           auth=Restricted()))
    _load(web, url + "/jobs", "Jobs")
    queues = {c.inner_text() for c in web.page.locator("tr[data-job] td:nth-child(2)").all()}
    assert queues == {"team-a"}
    assert "restricted view" in web.page.locator("header").inner_text()
    web.expect_problem(r"HTTP 403: GET .*/whatif")
    web.expect_problem(r"status of 403")
    answer = web.page.goto(url + "/whatif")
    assert answer is not None and answer.status == 403
