"""The dashboard on a live cluster in Debian's Chromium: ``gpufleet dashboard --kubeconfig FILE`` (the
command itself, its uvicorn call replaced by the test's server) reads the HTTP API server emulator
(gpufleet.testing.emulator) and checks each caller's bearer token with TokenReview and
SubjectAccessReview there (``--auth kube``, the default with a cluster).

The emulated cluster: two tenants, Projects ``vision`` (namespace vision, queue vision-train) and ``nlp``
(namespace nlp, queue nlp-train), two 8-GPU nodes, in each namespace a bound pod and a pending one, and
in vision a pending gang of two; a usage ledger with an interval of each bound pod. Tokens: ``t-vision``
(group team-vision: ``get`` on its Project and Queue), ``t-admin`` (``get`` on every Project and Queue,
``create`` on simulations: the gpufleet-platform-admin role). The source's clock is injected, so the
refresh of the live read is decided by the test, not by waiting.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.kube import Kind
from gpufleet.testing import FakeCluster, VirtualClock
from gpufleet.testing.emulator import ApiServerEmulator

from .conftest import BrowserPage, _Served

NOW = 1_767_312_000.0  # 2026-01-02T00:00:00Z: the source's clock at start
REFRESH_S = 30.0  # --refresh
GROUP = "gpufleet.dev/v1alpha1"
VISION_JOBS = {"vision/v-train", "vision/v-wait", "vision/v-gang"}
NLP_JOBS = {"nlp/n-train", "nlp/n-wait"}


def _node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "spec": {}, "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110",
                                                   "nvidia.com/gpu": "8"}}}


def _pod(namespace: str, name: str, gpus: int, queue: str, *, node: str | None = None,
         gang: str | None = None) -> dict[str, Any]:
    labels = {"gpufleet.dev/queue": queue}
    if gang:
        labels["gpufleet.dev/pod-group"] = gang
    spec: dict[str, Any] = {"schedulerName": "gpufleet", "containers": [
        {"name": "main", "image": "registry.example/train:1",
         "resources": {"limits": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": str(gpus)}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": {},
                         "creationTimestamp": "2026-01-01T22:00:00Z"},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def _cluster() -> FakeCluster:
    store = FakeCluster(VirtualClock())
    for name in ("gpu-1", "gpu-2"):
        store.put(Kind.NODE, _node(name))
    for tenant in ("vision", "nlp"):
        store.put(Kind.NAMESPACE, {"metadata": {"name": tenant}})
        store.put(Kind.QUEUE, {"apiVersion": GROUP, "kind": "Queue", "metadata": {"name": f"{tenant}-train"},
                               "spec": {"resources": {"nvidia.com/gpu": {"quota": "8"}}}})
        store.put(Kind.PROJECT, {"apiVersion": GROUP, "kind": "Project", "metadata": {"name": tenant},
                                 "spec": {"namespaces": {"names": [tenant]}, "queues": [f"{tenant}-train"],
                                          "defaultQueue": f"{tenant}-train"}})
    store.put(Kind.POD, _pod("vision", "v-train", 4, "vision-train", node="gpu-1"))
    store.put(Kind.POD, _pod("vision", "v-wait", 16, "vision-train"))  # larger than any node: waits
    store.put(Kind.POD_GROUP, {"apiVersion": GROUP, "kind": "PodGroup",
                               "metadata": {"name": "v-gang", "namespace": "vision"},
                               "spec": {"minMember": 2, "queue": "vision-train"}})
    for i in range(2):
        store.put(Kind.POD, _pod("vision", f"v-gang-{i}", 4, "vision-train", gang="v-gang"))
    store.put(Kind.POD, _pod("nlp", "n-train", 2, "nlp-train", node="gpu-2"))
    store.put(Kind.POD, _pod("nlp", "n-wait", 12, "nlp-train"))
    store.add_token("t-vision", "alice", ["team-vision"])
    store.grant("get", "projects", "vision", group="team-vision")
    store.grant("get", "queues", "vision-train", group="team-vision")
    store.add_token("t-admin", "root")
    for resource in ("projects", "queues"):
        store.grant("get", resource, user="root")
    store.grant("create", "simulations", user="root")
    return store


class _Emulator:
    """The API server emulator over ``store``, in a thread with its own event loop (Playwright's sync
    API holds this thread's); :meth:`do` runs a change of the store on that loop."""

    def __init__(self, store: FakeCluster) -> None:
        self.store = store
        self.url = ""
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True, name="emulator")

    async def _serve(self) -> None:
        async with ApiServerEmulator(store=self.store) as emulator:
            self._loop, self._stop, self.url = asyncio.get_running_loop(), asyncio.Event(), emulator.url_text
            self._ready.set()
            await self._stop.wait()

    def start(self) -> str:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the API server emulator did not start")
        return self.url

    def do(self, change: Callable[[], object]) -> None:
        async def run() -> None:
            change()

        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@dataclass
class Live:
    url: str
    emulator: _Emulator
    now: list[float] = field(default_factory=lambda: [NOW])

    @property
    def store(self) -> FakeCluster:
        return self.emulator.store


def _ledger(path: Path) -> None:
    from gpufleet.ledger import IntervalStart, open_ledger

    ledger = open_ledger(str(path))
    ledger.write([
        IntervalStart(pod_uid="u-v", bound_at=NOW - 7200, namespace="vision", pod_name="v-train",
                      queue="vision-train", node="gpu-1", gpus=4, project="vision", created_at=NOW - 7300),
        IntervalStart(pod_uid="u-n", bound_at=NOW - 7200, namespace="nlp", pod_name="n-train", queue="nlp-train",
                      node="gpu-2", gpus=2, project="nlp", created_at=NOW - 7300),
    ])
    ledger.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    folder = tmp_path_factory.mktemp("live")
    emulator = _Emulator(_cluster())
    server = emulator.start()
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "emulator", "cluster": {"server": server}}],
        "users": [{"name": "dashboard", "user": {"token": "dashboard-sa"}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "dashboard"}}],
        "current-context": "emulator",
    }), encoding="utf-8")
    _ledger(folder / "usage.db")
    served: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as patch:
        import uvicorn

        patch.setattr(uvicorn, "run", lambda app, **kw: served.update(app=app))
        result = CliRunner().invoke(main, ["dashboard", "--kubeconfig", str(kubeconfig), "--ledger",
                                           str(folder / "usage.db"), "--refresh", str(REFRESH_S)])
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output  # --auth kube: no warning
    app = served["app"]
    state = Live("", emulator)
    app.state.source.clock = lambda: state.now[0]  # the refresh is decided on this clock
    web_server = _Served(app)
    state.url = web_server.start()
    yield state
    web_server.stop()
    emulator.stop()


def _as(web: BrowserPage, token: str) -> None:
    web.page.context.set_extra_http_headers({"Authorization": f"Bearer {token}"})


def _open(web: BrowserPage, url: str, heading: str) -> str:
    answer = web.page.goto(url)
    assert answer is not None and answer.status == 200, url
    assert web.page.locator("main h1").first.inner_text().startswith(heading)
    return web.page.content()


def _jobs(web: BrowserPage) -> set[str]:
    return {row.get_attribute("data-job") or "" for row in web.page.locator("tr[data-job]").all()}


def test_a_tenant_sees_its_projects_queues_and_jobs_only(web: BrowserPage, live: Live) -> None:
    _as(web, "t-vision")
    cluster = _open(web, live.url + "/cluster", "Cluster")
    assert re.search(r"live: http://127\.0\.0\.1:\d+ · restricted view", web.page.locator("header .who").inner_text())
    assert "nlp" not in cluster
    group = web.page.locator("details.group").first
    group.locator("summary").click()
    group.locator(".node[data-node='gpu-2']").wait_for()
    cells = [(g.get_attribute("class") or "").split() for g in group.locator(".gpu").all()]
    assert len(cells) == 16
    assert sum(bool(re.fullmatch(r"q\d+", c)) for cls in cells for c in cls) == 4  # its own pod's, coloured
    assert sum("q-other" in cls for cls in cells) == 2  # the other tenant's two GPUs: held, grey, unnamed
    assert "nlp" not in group.inner_html()
    web.screenshot("live-tenant-cluster")
    queues = _open(web, live.url + "/queues", "Queues")
    assert {r.get_attribute("data-queue") for r in web.page.locator("tr[data-queue]").all()} == {"vision-train"}
    assert "nlp" not in queues
    _open(web, live.url + "/jobs", "Jobs")
    assert _jobs(web) == VISION_JOBS
    web.screenshot("live-tenant-jobs")
    web.page.click("a[href='/jobs/vision/v-wait']")
    web.page.locator("#explanation").wait_for()
    assert web.page.locator("main h1").inner_text().startswith("Job vision/v-wait")
    assert web.page.locator("#pending-reason mark.blocking").count() >= 1
    gang = _open(web, live.url + "/jobs/vision/v-gang", "Job vision/v-gang")
    assert web.page.locator("#pods tr").count() == 3 and "v-gang-1" in gang  # a header, the gang's two pods
    assert web.page.locator("#explanation").count() == 1
    web.screenshot("live-tenant-gang", full_page=True)
    usage = _open(web, live.url + "/usage", "Usage and cost")
    rows = web.page.locator("#usage-table tr").all_inner_texts()
    assert any(r.startswith("vision") for r in rows) and "nlp" not in usage
    # Another tenant's job is not found, and the What-if page is the admins'.
    web.expect_problem(r"HTTP 40[34]: GET .*/(jobs/nlp/n-wait|whatif)")
    web.expect_problem(r"status of 40[34]")
    answer = web.page.goto(live.url + "/jobs/nlp/n-wait")
    assert answer is not None and answer.status == 404  # as if it did not exist: the same page, nothing of it
    assert web.page.locator("body").inner_text() == "404: no job nlp/n-wait"
    answer = web.page.goto(live.url + "/whatif")
    assert answer is not None and answer.status == 403
    assert "gpufleet-platform-admin" in web.page.content()


def test_the_admin_sees_everything_and_runs_a_what_if(web: BrowserPage, live: Live) -> None:
    _as(web, "t-admin")
    legend = _open(web, live.url + "/cluster", "Cluster") and web.page.locator("#legend").inner_text()
    assert "vision-train" in legend and "nlp-train" in legend  # what the tenant's page left out
    assert "restricted view" not in web.page.locator("header .who").inner_text()
    _open(web, live.url + "/queues", "Queues")
    assert {r.get_attribute("data-queue") for r in web.page.locator("tr[data-queue]").all()} >= {
        "vision-train", "nlp-train"}
    _open(web, live.url + "/jobs", "Jobs")
    assert _jobs(web) >= VISION_JOBS | NLP_JOBS
    _open(web, live.url + "/jobs/nlp/n-wait", "Job nlp/n-wait")
    assert web.page.locator("#explanation").count() == 1
    usage = _open(web, live.url + "/usage", "Usage and cost")
    assert "vision" in usage and "nlp" in usage
    _open(web, live.url + "/whatif", "What-if")
    page = web.page
    page.select_option("#whatif-form select[name='trace']", "snapshot")
    page.select_option("#whatif-form select[name='queue']", "nlp-train")
    page.fill("#whatif-form input[name='quota']", "12")
    page.click("#whatif-form button[type='submit']")
    page.locator("#whatif-run[data-phase='done']").wait_for(timeout=120_000)
    assert page.locator("#whatif-table tr").count() >= 3
    assert page.locator("#whatif-workload").inner_text().startswith("Workload: the snapshot's jobs")
    web.screenshot("live-admin-whatif", full_page=True)


def test_a_new_pending_pod_shows_once_the_live_read_is_refreshed(web: BrowserPage, live: Live) -> None:
    _as(web, "t-vision")
    _open(web, live.url + "/jobs", "Jobs")
    before = _jobs(web)
    assert "vision/v-new" not in before
    live.emulator.do(lambda: live.store.put(Kind.POD, _pod("vision", "v-new", 2, "vision-train")))
    live.emulator.do(lambda: live.store.put(Kind.POD, _pod("nlp", "n-new", 2, "nlp-train")))
    _open(web, live.url + "/jobs", "Jobs")
    assert _jobs(web) == before  # read less than --refresh ago: the page shows that read
    live.now[0] += REFRESH_S
    _open(web, live.url + "/jobs", "Jobs")
    assert _jobs(web) == before | {"vision/v-new"}  # and not the other tenant's new pod
    count = web.page.locator("#job-count").inner_text()
    assert re.match(rf"{len(before) + 1} of {len(before) + 1} jobs", count), count
