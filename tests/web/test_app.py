"""The dashboard's routes end to end over the demo snapshot (Starlette's test client): every page,
the htmx fragments, a tenant's view through an Authorizer, the usage ledger's page and CSV, a what-if."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.testclient import TestClient

from gpufleet.adapters.k8s_yaml import load_snapshot_file
from gpufleet.ledger import IntervalStart, LedgerStore, open_ledger
from gpufleet.web import SnapshotSource, Visibility, create_app

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"
NOW = 1_772_400_000.0  # 2026-03-01T21:20:00Z


class HeaderAuth:
    """A stand-in Authorizer: the header X-Test-Queues names the queues; "admin" in X-Test-Role."""

    async def visible(self, request: Request) -> Visibility:
        queues = request.headers.get("X-Test-Queues")
        if queues is None:
            raise HTTPException(401, "no credential")
        return Visibility(queues=frozenset(q for q in queues.split(",") if q),
                          admin=request.headers.get("X-Test-Role") == "admin")


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LedgerStore]:
    store = open_ledger(str(tmp_path_factory.mktemp("ledger") / "ledger.db"))
    store.write([
        IntervalStart(pod_uid="u1", bound_at=NOW - 7200, namespace="ml", pod_name="b-train-1", queue="team-b",
                      node="gpu-a1", gpus=8, project="research", submitter="bob", created_at=NOW - 7300),
        IntervalStart(pod_uid="u2", bound_at=NOW - 3600, namespace="ml", pod_name="nb-alice", queue="notebooks",
                      node="gpu-b1", gpus=0.4, project="lab", submitter="alice", created_at=NOW - 3700),
    ])
    yield store
    store.close()


@pytest.fixture(scope="module")
def client(ledger: LedgerStore) -> TestClient:
    source = SnapshotSource(load_snapshot_file(DEMO), "demo", ledger=ledger, clock=lambda: NOW)
    return TestClient(create_app(source))


@pytest.fixture(scope="module")
def tenant_client() -> TestClient:
    return TestClient(create_app(SnapshotSource(load_snapshot_file(DEMO), "demo"), auth=HeaderAuth()))


@pytest.mark.parametrize("path", ["/cluster", "/cluster?by=pool", "/cluster?by=model&color=project", "/queues", "/jobs",
                                  "/jobs/ml/big-run", "/usage", "/whatif"])
def test_every_page_renders_with_its_navigation_and_assets(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 200, response.text
    assert '<link rel="stylesheet" href="/static/dashboard.css">' in response.text
    assert 'src="/static/hx.js"' in response.text and "http" not in response.text.split("<main>")[0].lower()


def test_static_assets_are_vendored(client: TestClient) -> None:
    assert client.get("/static/hx.js").status_code == 200
    assert client.get("/static/dashboard.css").text.startswith("/*")
    assert client.get("/").headers.get("location") is None  # followed: the cluster page
    assert client.get("/", follow_redirects=False).headers["location"] == "/cluster"


def test_cluster_page_groups_collapse_and_open_into_their_nodes(client: TestClient) -> None:
    page = client.get("/cluster").text
    assert page.count('<details class="group"') == 2 and 'hx-trigger="toggle once"' in page
    group = client.get("/cluster/group?by=rack&key=rack-b").text
    assert 'data-node="gpu-b1"' in group and "ml/nb-alice 40/100" in group and "60/100 free" in group
    assert client.get("/cluster/group?by=rack&key=nope").status_code == 404
    assert client.get("/cluster/group?by=rack&key=rack-a&offset=x").status_code == 400


def test_queue_to_job_to_explanation(client: TestClient) -> None:
    queues = client.get("/queues").text
    assert 'href="/jobs/ml/big-run"' in queues
    job = client.get("/jobs/ml/big-run").text
    assert '<mark class="blocking">limit</mark>' in job and "It would stay pending" in job
    assert client.get("/jobs/ml/none").status_code == 404


def test_job_filters_answer_a_fragment_to_htmx(client: TestClient) -> None:
    fragment = client.get("/jobs?state=pending&queue=serving", headers={"HX-Request": "true"}).text
    assert "<html" not in fragment and 'data-job="ml/serve-2"' in fragment and 'data-job="ml/big-run"' not in fragment
    assert "2 of 9 jobs" in fragment


def test_job_history_comes_from_the_ledger(client: TestClient) -> None:
    page = client.get("/jobs/ml/b-train-1").text
    assert 'id="history"' in page and "gpu-a1" in page


def test_usage_page_and_csv(client: TestClient) -> None:
    page = client.get("/usage?group=project").text
    assert 'id="usage-table"' in page and "research" in page and "lab" in page
    csv = client.get("/usage.csv?group=user")
    assert csv.headers["content-type"].startswith("text/csv")
    assert "attachment" in csv.headers["content-disposition"]
    lines = csv.text.splitlines()
    assert lines[0].startswith("user,") and {line.split(",")[0] for line in lines[1:]} == {"alice", "bob"}
    assert client.get("/usage?since=nonsense").status_code == 400
    assert client.get("/usage.csv?group=bogus").status_code == 400


def test_usage_without_a_ledger_says_so(tenant_client: TestClient) -> None:
    page = tenant_client.get("/usage", headers={"X-Test-Queues": "team-b"}).text
    assert 'id="no-ledger"' in page
    assert tenant_client.get("/usage.csv", headers={"X-Test-Queues": "team-b"}).status_code == 404


def test_a_tenant_sees_only_its_queues(tenant_client: TestClient) -> None:
    headers = {"X-Test-Queues": "team-b"}
    jobs = tenant_client.get("/jobs", headers=headers).text
    assert set(re.findall(r'data-job="([^"]+)"', jobs)) == {"ml/b-train-1", "ml/b-train-2", "ml/b-train-3"}
    assert tenant_client.get("/jobs/ml/big-run", headers=headers).status_code == 404
    queues = tenant_client.get("/queues", headers=headers).text
    assert set(re.findall(r'data-queue="([^"]+)"', queues)) == {"research", "team-b"}
    group = tenant_client.get("/cluster/group?by=rack&key=rack-b", headers=headers).text
    assert "nb-alice" not in group
    assert tenant_client.get("/jobs").status_code == 401
    assert tenant_client.get("/whatif", headers=headers).status_code == 403
    assert tenant_client.post("/whatif", headers=headers, data={}).status_code == 403


def _finish(client: TestClient, fragment: str, headers: dict[str, str] | None = None) -> str:
    run = re.search(r'hx-get="/whatif/(\w+)"', fragment)
    assert run is not None, fragment
    for _ in range(600):  # the worker thread's simulation: polled as the page polls it
        fragment = client.get(f"/whatif/{run.group(1)}", headers=headers or {}).text
        if 'data-phase="done"' in fragment or 'data-phase="failed"' in fragment:
            return fragment
        time.sleep(0.05)
    raise AssertionError("the what-if did not finish")


def test_what_if_runs_before_and_after_side_by_side(tenant_client: TestClient) -> None:
    admin = {"X-Test-Queues": "", "X-Test-Role": "admin"}
    started = tenant_client.post("/whatif", headers=admin, data={"queue": "serving", "quota": "8", "add_nodes": "1"})
    assert started.status_code == 200 and 'class="progress"' in started.text
    done = _finish(tenant_client, started.text, admin)
    assert 'data-phase="done"' in done and "<th>before</th><th>after</th>" in done
    assert "queue serving: GPU quota 8; 1 node(s) of 8 GPUs added" in done
    bad = tenant_client.post("/whatif", headers=admin, data={"queue": "nope"})
    assert bad.status_code == 400 and "no queue named" in bad.text
    assert tenant_client.post("/whatif", headers=admin, data={"quota": "-1"}).status_code == 400
    assert tenant_client.get("/whatif/unknown", headers=admin).status_code == 404


def test_the_server_decides_its_source_at_start_up() -> None:
    source = SnapshotSource(load_snapshot_file(DEMO), "demo")
    with TestClient(create_app(source)) as started:  # the lifespan runs: the source is decided in the background
        assert started.get("/healthz").text == "ok\n"
        assert started.get("/queues").status_code == 200
    assert source._fleet is not None


@pytest.mark.parametrize(("form", "message"), [
    ({"trace": "nope"}, "trace: no workload named 'nope' (one of ledger, snapshot, openb, week.csv)"),
    ({"trace": "ledger", "days": "0"}, "days: 0 is outside 1..90"),
    ({"days": "a week"}, "days: 'a week' is not a whole number"),
    ({"days": "1e9"}, "days: '1e9' is not a whole number"),
    ({"queue": "team-a", "weight": "0"}, "weight: 0 is outside 0.001..1000"),
    ({"trace": "week.csv", "days": "-3"}, "days: -3 is outside 1..90"),
])
def test_bad_workload_fields_are_a_400_in_one_line(ledger: LedgerStore, form: dict[str, str], message: str) -> None:
    from gpufleet.adapters.traces.records import TraceJob

    traces = {"week.csv": [TraceJob("j1", 0.0, 600.0, 1, 1000, attrs={"queue": "team-a"})]}
    client = TestClient(create_app(SnapshotSource(load_snapshot_file(DEMO), "demo", ledger=ledger, traces=traces,
                                                  clock=lambda: NOW)))
    bad = client.post("/whatif", data=form)
    assert bad.status_code == 400 and bad.headers["content-type"].startswith("text/plain")
    assert bad.text == message


def test_a_what_if_over_a_chosen_trace_says_which_workload_ran(ledger: LedgerStore) -> None:
    from gpufleet.adapters.traces.records import TraceJob

    day = 86400.0
    traces = {"week.csv": [TraceJob("j0", 0.0, 600.0, 1, 1000),  # before the last day: left out
                           TraceJob("j1", 2 * day, 600.0, 1, 1000, attrs={"queue": "team-a"}),
                           TraceJob("j2", 2 * day + 3600, 600.0, 2, 1000, attrs={"user": "zoe"})]}
    client = TestClient(create_app(SnapshotSource(load_snapshot_file(DEMO), "demo", ledger=ledger, traces=traces,
                                                  clock=lambda: NOW)))
    form = client.get("/whatif").text
    assert re.findall(r'<option value="([^"]+)">', form)[:4] == ["ledger", "snapshot", "openb", "week.csv"]
    assert 'name="days" size="3" value="7"' in form
    started = client.post("/whatif", data={"trace": "week.csv", "days": "1", "queue": "team-a", "quota": "4"})
    assert started.status_code == 200, started.text
    done = _finish(client, started.text)
    assert 'data-phase="done"' in done and "<th>before</th><th>after</th>" in done
    assert ("Workload: trace week.csv, its last 1 day(s): 2 jobs; queues: 1 by name, "
            "1 assigned to a leaf queue by hash") in done
    ledger_run = _finish(client, client.post("/whatif", data={"days": "30", "add_nodes": "1"}).text)
    assert "Workload: the usage ledger&#39;s last 30 day(s): 2 jobs" in ledger_run
