"""The hot-path writes of :mod:`gpufleet.kube.client.fast_calls` against lightkube's own path.

One recording HTTP server answers both: :class:`LightkubeApi` with its fast path, and the same
client with ``fast=None`` (every call through lightkube). Each pair of requests must be the same
(method, path and query, the headers that matter, body bytes) and each answer must give the same
result or the same :class:`ApiError`.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp.web
import pytest
import pytest_asyncio

from gpufleet.kube.client.lightkube_api import LightkubeApi, connect
from gpufleet.kube.client.port import ApiError, FieldSelector, Kind

pytestmark = pytest.mark.asyncio

# Headers that carry meaning; Host and Content-Length follow from the URL and the body.
_COMPARED = ("content-type", "accept", "accept-encoding", "user-agent", "authorization")


@dataclass
class Answer:
    status: int = 200
    body: bytes = b"{}"
    content_type: str = "application/json"
    gzip: bool = False
    drop: bool = False  # close the connection without an answer


@dataclass
class Recorder:
    """Records every request; answers with ``answer`` (or ``by_token`` for the bearer token sent)."""

    answer: Answer = field(default_factory=Answer)
    by_token: dict[str, Answer] = field(default_factory=dict)
    pages: dict[str, Answer] = field(default_factory=dict)  # by the request's continue token ("" for none)
    requests: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        body = await request.read()
        self.requests.append({
            "method": request.method,
            "path_qs": request.raw_path,
            "headers": {k: request.headers.get(k) for k in _COMPARED},
            "body": body,
        })
        answer = self.by_token.get(request.headers.get("Authorization", ""), self.answer)
        answer = self.pages.get(request.query.get("continue", ""), answer)
        if answer.drop:
            assert request.transport is not None
            request.transport.close()
            return aiohttp.web.Response(status=500)
        payload = gzip.compress(answer.body) if answer.gzip else answer.body
        response = aiohttp.web.Response(status=answer.status, body=payload)
        response.headers["Content-Type"] = answer.content_type  # exactly, without a charset
        if answer.gzip:
            response.headers["Content-Encoding"] = "gzip"
        return response


@pytest_asyncio.fixture
async def server() -> AsyncIterator[tuple[Recorder, str]]:
    recorder = Recorder()
    app = aiohttp.web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder.handle)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield recorder, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def kubeconfig(tmp_path: Path, url: str, user: dict[str, str]) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "team"}}],
    }))
    return str(path)


def both(config: str) -> tuple[LightkubeApi, LightkubeApi]:
    fast = connect(config, field_manager="gpufleet", timeout=5.0)
    assert fast.fast is not None
    return fast, LightkubeApi(fast.client, fast.list_chunk_size, fast=None)


Call = Callable[[LightkubeApi], Awaitable[Any]]
CALLS: dict[str, Call] = {
    "patch pod": lambda api: api.patch(Kind.POD, "ns", "p-1", {"metadata": {"annotations": {"a": "1", "b": None}}}),
    "patch node": lambda api: api.patch(Kind.NODE, "", "n-1", {"metadata": {"labels": {"x": "y"}}}),
    "patch queue": lambda api: api.patch(Kind.QUEUE, "", "q", {"spec": {"weight": 2}}),
    "patch pod, default namespace": lambda api: api.patch(Kind.POD, "", "p-1", {"metadata": {"labels": {}}}),
    "bind": lambda api: api.bind("ns", "p-1", "node-7"),
    "bind with annotations": lambda api: api.bind("ns", "p-1", "node-7", {"gpufleet.dev/gpu-index": "3"}),
    "evict": lambda api: api.evict("ns", "p-1"),
    "create event": lambda api: api.create(Kind.EVENT, {
        "metadata": {"generateName": "p-1.", "namespace": "ns"}, "reason": "Scheduled", "note": "é",
        "regarding": {"kind": "Pod", "name": "p-1", "namespace": "ns"}, "type": "Normal"}),
    "create event, default namespace": lambda api: api.create(Kind.EVENT, {"metadata": {"name": "e"}, "note": "x"}),
    "create queue": lambda api: api.create(Kind.QUEUE, {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "Queue",
                                                        "metadata": {"name": "q"}, "spec": {}}),
    "patch pod status": lambda api: api.patch_status(Kind.POD, "ns", "p-1", {"conditions": [{"type": "PodScheduled"}]}),
    "patch queue status": lambda api: api.patch_status(Kind.QUEUE, "", "q", {"admitted": {"nvidia.com/gpu": "1"}}),
    "access review": lambda api: api.create_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "alice", "resourceAttributes": {"verb": "use", "resource": "queues", "name": "q"}}}),
    "token review": lambda api: api.create_token_review({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "t"}}),
}


async def outcome(call: Call, api: LightkubeApi) -> Any:
    try:
        return ("ok", await call(api))
    except ApiError as err:
        return ("error", err.status, err.reason, err.message)


@pytest.mark.parametrize("name", sorted(CALLS))
async def test_requests_and_answers_equal_lightkubes(server: tuple[Recorder, str], tmp_path: Path, name: str) -> None:
    recorder, url = server
    fast, slow = both(kubeconfig(tmp_path, url, {"token": "secret"}))
    recorder.answer = Answer(body=json.dumps({"kind": "Pod", "metadata": {"name": "p-1", "x": "é"}}).encode())
    try:
        assert await outcome(CALLS[name], fast) == await outcome(CALLS[name], slow)
    finally:
        await fast.close()
    sent, expected = recorder.requests
    assert sent == expected
    assert all(expected["headers"][k] for k in _COMPARED), expected["headers"]
    assert expected["headers"]["authorization"] == "Bearer secret"
    assert "fieldManager=gpufleet" in expected["path_qs"]


def _status(code: int, reason: str, message: str, causes: list[dict[str, str]] | None = None) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
                       "message": message, "details": {"causes": causes or []}}).encode()


ANSWERS = {
    "200 object": Answer(body=b'{"kind":"Pod","metadata":{"name":"p-1"}}'),
    "201 Success status": Answer(201, b'{"kind":"Status","apiVersion":"v1","status":"Success","code":201}'),
    "200 Failure status": Answer(200, _status(409, "Conflict", "already bound")),
    "gzipped object": Answer(body=b'{"kind":"Pod","metadata":{"name":"p-1"}}', gzip=True),
    "404 Status": Answer(404, _status(404, "NotFound", 'pods "p-1" not found')),
    "409 Status": Answer(409, _status(409, "Conflict", "pod p-1 is already assigned to node n")),
    "429 Status with causes": Answer(429, _status(429, "TooManyRequests", "Cannot evict pod",
                                                  [{"reason": "DisruptionBudget", "message": "needs 2 healthy"}])),
    "500 Status without code": Answer(500, b'{"kind":"Status","status":"Failure","message":"etcd"}'),
    "503 text": Answer(503, b"upstream connect error", content_type="text/plain"),
    "422 JSON with a charset": Answer(422, _status(422, "Invalid", "bad"), content_type="application/json; charset=utf-8"),
    "no answer": Answer(drop=True),
}


@pytest.mark.parametrize("answer", sorted(ANSWERS))
@pytest.mark.parametrize("name", ["patch pod", "bind", "evict", "patch queue status", "create event"])
async def test_errors_map_as_lightkubes(server: tuple[Recorder, str], tmp_path: Path, name: str, answer: str) -> None:
    recorder, url = server
    fast, slow = both(kubeconfig(tmp_path, url, {"token": "secret"}))
    recorder.answer = ANSWERS[answer]
    try:
        got, expected = await outcome(CALLS[name], fast), await outcome(CALLS[name], slow)
    finally:
        await fast.close()
    if answer == "no answer":  # the exception's text names aiohttp's error: the same kind, not the same words
        assert got[:3] == expected[:3] == ("error", 0, "ConnectError")
    else:
        assert got == expected
    if answer.startswith(("4", "5")) or (answer == "200 Failure status" and name in ("bind", "evict")):
        assert got[0] == "error"


async def test_a_refused_token_goes_through_lightkube_then_the_new_one_is_used(
    server: tuple[Recorder, str], tmp_path: Path
) -> None:
    recorder, url = server
    token = tmp_path / "token"
    token.write_text("old")
    fast, _ = both(kubeconfig(tmp_path, url, {"tokenFile": str(token)}))
    recorder.answer = Answer(201, b'{"kind":"Status","status":"Success","code":201}')
    try:
        await fast.bind("ns", "p-1", "n")
        token.write_text("new")  # rotated: the old one is refused from now on
        recorder.by_token["Bearer old"] = Answer(401, _status(401, "Unauthorized", "Unauthorized"))
        await fast.bind("ns", "p-2", "n")
        await fast.bind("ns", "p-3", "n")
    finally:
        await fast.close()
    sent = [(r["path_qs"].split("/")[6], r["headers"]["authorization"]) for r in recorder.requests]
    assert sent == [
        ("p-1", "Bearer old"),
        ("p-2", "Bearer old"),  # fast path: refused
        ("p-2", "Bearer old"),  # lightkube's auth flow: refused, re-reads the file
        ("p-2", "Bearer new"),
        ("p-3", "Bearer new"),  # fast path again, with the new token
    ]


def _line(event_type: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": event_type, "object": obj}).encode() + b"\n"


POD_A = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7"}}
POD_B = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "b", "namespace": "ns", "resourceVersion": "8"},
         "spec": {"nodeName": "n-é"}}
STREAMS = {
    "events": Answer(body=_line("ADDED", POD_A) + _line("MODIFIED", POD_B) + _line("DELETED", POD_A)),
    "410 in the stream": Answer(body=_line("ADDED", POD_A) + _line("ERROR", {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410, "reason": "Expired",
        "message": "too old resource version: 5 (9)"})),
    "403 Status": Answer(403, _status(403, "Forbidden", 'pods is forbidden: User "x" cannot watch')),
    "500 text": Answer(500, b"internal", content_type="text/plain"),
    "no answer": Answer(drop=True),
}


async def _first_events(api: LightkubeApi, resource_version: str, count: int) -> Any:
    """Up to ``count`` events (lightkube's own watch never ends: it resumes by itself), or the error."""
    got: list[Any] = []
    try:
        async for event in api.watch(Kind.POD, resource_version):
            got.append((event.type, event.object))
            if len(got) == count:
                break
    except ApiError as err:
        return ("error", err.status, err.reason, err.message, got)
    return ("ok", got)


@pytest.mark.parametrize("stream", sorted(STREAMS))
async def test_watches_equal_lightkubes(server: tuple[Recorder, str], tmp_path: Path, stream: str) -> None:
    recorder, url = server
    fast, slow = both(kubeconfig(tmp_path, url, {"token": "secret"}))
    recorder.answer = STREAMS[stream]
    try:
        got, expected = await _first_events(fast, "5", 3), await _first_events(slow, "5", 3)
    finally:
        await fast.close()
    if stream in ("403 Status", "500 text"):
        # lightkube closes a refused watch's answer before its body can be read (before, its
        # ResponseNotRead escaped as a crash): the same status and reason; the fast path also has
        # the message.
        assert got[:3] == expected[:3] and got[0] == "error" and got[3]
    elif stream == "no answer":
        assert got[:3] == expected[:3] and got[0] == "error" and got[1] == 0
    else:
        assert got == expected
    if stream == "events":
        assert got == ("ok", [("ADDED", POD_A), ("MODIFIED", POD_B), ("DELETED", POD_A)])
    sent, wanted = recorder.requests[0], recorder.requests[-1]
    assert (sent["method"], sent["path_qs"]) == (wanted["method"], wanted["path_qs"]) == (
        "GET", "/api/v1/pods?resourceVersion=5&watch=true")
    compared = [k for k in _COMPARED if k != "accept-encoding"]  # the fast watch asks for no compression
    assert {k: sent["headers"][k] for k in compared} == {k: wanted["headers"][k] for k in compared}
    assert sent["headers"]["authorization"] == "Bearer secret"


def _page(names: list[str], rv: str, token: str | None) -> Answer:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if token:
        meta["continue"] = token
    items = [{"metadata": {"name": n, "namespace": "ns", "resourceVersion": rv}, "spec": {"x": "é"}} for n in names]
    return Answer(body=json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items}).encode())


LISTS = {
    "one page": ({"": _page(["a", "b"], "10", None)}, None),
    "three pages": ({"": _page(["a"], "10", "t1"), "t1": _page(["b"], "10", "t2"), "t2": _page(["c"], "11", None)}, 1),
    "empty": ({"": Answer(body=b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"3"},"items":[]}')},
              500),
    "404 Status": ({"": Answer(404, _status(404, "NotFound", "the server could not find the requested resource"))},
                   500),
    "gzipped": ({"": Answer(body=_page(["a"], "4", None).body, gzip=True)}, 500),
}


@pytest.mark.parametrize("case", sorted(LISTS))
async def test_lists_equal_lightkubes(server: tuple[Recorder, str], tmp_path: Path, case: str) -> None:
    recorder, url = server
    pages, chunk = LISTS[case]
    recorder.pages = pages
    fast, _ = both(kubeconfig(tmp_path, url, {"token": "secret"}))
    fast.list_chunk_size = chunk
    slow = LightkubeApi(fast.client, chunk, fast=None)

    async def listed(api: LightkubeApi) -> Any:
        try:
            got = await api.list(Kind.POD)
        except ApiError as err:
            return ("error", err.status, err.reason, err.message)
        return ("ok", got.items, got.resource_version)

    try:
        got, expected = await listed(fast), await listed(slow)
    finally:
        await fast.close()
    assert got == expected
    if case == "three pages":
        assert got == ("ok", [{"metadata": {"name": n, "namespace": "ns", "resourceVersion": rv}, "spec": {"x": "é"}}
                              for n, rv in (("a", "10"), ("b", "10"), ("c", "11"))], "11")
    half = len(recorder.requests) // 2
    sent, wanted = recorder.requests[:half], recorder.requests[half:]
    assert [(r["method"], r["path_qs"], r["headers"], r["body"]) for r in sent] == [
        (r["method"], r["path_qs"], r["headers"], r["body"]) for r in wanted]


@pytest.mark.parametrize("selector", ["spec.nodeName=gpu-node-1", "spec.nodeName!=a,status.phase=Running"])
async def test_field_selectors_are_asked_as_lightkube_asks_them(server: tuple[Recorder, str], tmp_path: Path,
                                                                selector: str) -> None:
    """A list and a watch with a field selector: the fast path's request is lightkube's, byte for byte."""
    recorder, url = server
    recorder.pages = {"": _page(["a"], "10", None)}
    fast, _ = both(kubeconfig(tmp_path, url, {"token": "secret"}))
    fast.list_chunk_size = 500
    slow = LightkubeApi(fast.client, 500, fast=None)
    fields = FieldSelector.parse(selector)
    try:
        got, expected = await fast.list(Kind.POD, fields), await slow.list(Kind.POD, fields)
        assert (got.items, got.resource_version) == (expected.items, expected.resource_version)
        recorder.pages, recorder.answer = {}, STREAMS["events"]
        for api in (fast, slow):
            async for _ in api.watch(Kind.POD, "5", fields):
                break
    finally:
        await fast.close()
    lists = [r["path_qs"] for r in recorder.requests if "watch" not in r["path_qs"]]
    watches = [r["path_qs"] for r in recorder.requests if "watch" in r["path_qs"]]
    assert lists[0] == lists[1] and watches[0] == watches[-1]
    assert "fieldSelector=" in lists[0] and "fieldSelector=" in watches[0]
