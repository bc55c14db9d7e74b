"""The dashboard's authentication and authorization (gpufleet.web.auth), end to end over HTTP: a
Starlette app whose one page answers the caller's Visibility, served by uvicorn, whose TokenReviews
and SubjectAccessReviews go through the lightkube adapter to the HTTP API server emulator."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import uvicorn
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from gpufleet.kube import Kind, connect
from gpufleet.testing import FakeCluster, VirtualClock
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.web.access import Visibility
from gpufleet.web.auth import KubeAuthorizer, kube_authorizer

Json = dict[str, Any]


def _named(kind: str, name: str) -> Json:
    return {"apiVersion": "gpufleet.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": {}}


def cluster() -> tuple[FakeCluster, VirtualClock]:
    clock = VirtualClock()
    store = FakeCluster(clock)
    for project in ("vision", "nlp"):
        store.put(Kind.PROJECT, _named("Project", project))
    for queue in ("vision-train", "nlp-train", "shared"):
        store.put(Kind.QUEUE, _named("Queue", queue))
    store.add_token("t-alice", "alice", ["team-vision"])
    store.grant("get", "projects", "vision", group="team-vision")
    store.grant("get", "queues", "vision-train", group="team-vision")
    store.add_token("t-root", "root")
    for resource in ("projects", "queues"):
        store.grant("get", resource, user="root")
    store.grant("create", "simulations", user="root")
    store.add_token("t-auditor", "auditor", ["auditors"])
    store.grant("get", "projects", group="auditors")  # every project, queues one by one
    store.grant("get", "queues", "shared", group="auditors")
    store.add_token("t-nobody", "nobody")
    return store, clock


@contextlib.asynccontextmanager
async def serving(store: FakeCluster, clock: VirtualClock, make: Callable[[str], KubeAuthorizer] | None = None,
                  **options: Any) -> AsyncIterator[tuple[str, KubeAuthorizer]]:
    """The emulator, and an app answering ``/`` with the caller's Visibility at the returned URL;
    ``make(emulator URL)``: the authorizer, else one over ``connect(server=...)`` with ``options``."""
    async with ApiServerEmulator(store=store) as emulator:
        auth = make(emulator.url_text) if make is not None else KubeAuthorizer(
            connect(server=emulator.url_text), clock, **options)

        async def page(request: Request) -> JSONResponse:
            seen = await auth.visible(request)
            return JSONResponse({"all": seen.all, "projects": sorted(seen.projects),
                                 "queues": sorted(seen.queues), "admin": seen.admin})

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/", page)]), log_level="warning",
                                               lifespan="off"))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            while not server.started:
                await asyncio.sleep(0.01)
            yield f"http://127.0.0.1:{sock.getsockname()[1]}/", auth
        finally:
            server.should_exit = True
            await task
            sock.close()
            await auth.api.close()



async def _get(url: str, headers: dict[str, str] | None = None, token: str | None = None) -> tuple[int, Any, Any]:
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with aiohttp.ClientSession() as session, session.get(url, headers=sent) as reply:
        body = await reply.json() if reply.content_type == "application/json" else await reply.text()
        return reply.status, body, reply.headers


def run(body: Callable[[str, KubeAuthorizer, FakeCluster, VirtualClock], Awaitable[None]], **options: Any) -> None:
    store, clock = cluster()

    async def main() -> None:
        async with serving(store, clock, **options) as (url, auth):
            await body(url, auth, store, clock)

    asyncio.run(main())


def test_a_tenant_token_sees_only_its_projects_and_queues() -> None:
    async def body(url: str, auth: KubeAuthorizer, store: FakeCluster, clock: VirtualClock) -> None:
        status, seen, _ = await _get(url, token="t-alice")
        assert status == 200
        assert seen == {"all": False, "projects": ["vision"], "queues": ["vision-train"], "admin": False}
        reviews = [c for c in store.calls if c.kind is Kind.SUBJECT_ACCESS_REVIEW]
        assert len(reviews) == 3 + 2 + 3  # admin, all projects, all queues; then each project and queue

    run(body)


def test_the_platform_admin_sees_everything_and_may_run_what_ifs() -> None:
    async def body(url: str, auth: KubeAuthorizer, store: FakeCluster, clock: VirtualClock) -> None:
        assert (await _get(url, token="t-root"))[:2] == (200, {"all": True, "projects": [], "queues": [],
                                                                "admin": True})
        assert store.count("list") == 0  # no names needed
        status, seen, _ = await _get(url, token="t-auditor")  # every project, one queue: no what-if
        assert (status, seen) == (200, {"all": False, "projects": ["nlp", "vision"], "queues": ["shared"],
                                        "admin": False})

    run(body)


@pytest.mark.parametrize(("headers", "message"), [
    ({}, "no credentials: send Authorization: Bearer <token>"),
    ({"Authorization": "Bearer forged"}, "the bearer token was refused: invalid bearer token"),
    ({"Authorization": "Basic YWxpY2U6c2VjcmV0"}, "the Authorization header is not a bearer token"),
    ({"Authorization": "Bearer"}, "the Authorization header is not a bearer token"),
    # A forwarded user from a proxy the dashboard was not told to trust: anybody can send the header.
    ({"X-Forwarded-User": "root"}, "no credentials: send Authorization: Bearer <token>"),
])
def test_no_token_or_a_bad_one_is_a_401_in_one_line(headers: dict[str, str], message: str) -> None:
    async def body(url: str, auth: KubeAuthorizer, store: FakeCluster, clock: VirtualClock) -> None:
        status, text, sent = await _get(url, headers)
        assert (status, text) == (401, message)
        assert sent["WWW-Authenticate"] == 'Bearer realm="gpufleet"'
        assert not any(c.kind is Kind.SUBJECT_ACCESS_REVIEW for c in store.calls)  # nothing asked for nobody

    run(body)


def test_a_user_who_may_see_nothing_is_a_403() -> None:
    async def body(url: str, auth: KubeAuthorizer, store: FakeCluster, clock: VirtualClock) -> None:
        assert (await _get(url, token="t-nobody"))[:2] == (403, "user nobody may get no gpufleet.dev project or queue")

    run(body)


def test_a_trusted_proxys_forwarded_user_and_groups_are_reviewed() -> None:
    async def body(url: str, auth: KubeAuthorizer, store: FakeCluster, clock: VirtualClock) -> None:
        status, seen, _ = await _get(url, {"X-Forwarded-User": "carol", "X-Forwarded-Groups": "x, team-vision"})
        assert (status, seen["projects"], seen["queues"]) == (200, ["vision"], ["vision-train"])
        sar = next(c for c in store.calls if c.kind is Kind.SUBJECT_ACCESS_REVIEW)
        assert sar.op == "create"
        assert not any(c.kind is Kind.TOKEN_REVIEW for c in store.calls)
        # A bearer token wins over the forwarded headers.
        status, seen, _ = await _get(url, {"X-Forwarded-User": "root"}, token="t-alice")
        assert (status, seen["admin"], seen["projects"]) == (200, False, ["vision"])
        assert (await _get(url, {"X-Forwarded-Groups": "team-vision"}))[0] == 401  # groups without a user

    run(body, trust_proxy=True)


def test_answers_are_kept_for_a_while_on_the_clock() -> None:
    async def body(url: str, auth: KubeAuthorizer, store: FakeCluster, clock: VirtualClock) -> None:
        await asyncio.gather(*(_get(url, token="t-alice") for _ in range(5)))  # concurrent: asked once
        asked = auth.reviews_sent
        assert asked == 1 + 3 + 5  # the token, then the SubjectAccessReviews
        await _get(url, token="t-alice")
        assert auth.reviews_sent == asked
        store.grant("get", "projects", "nlp", group="team-vision")  # a new RoleBinding
        await clock.advance(29)
        assert (await _get(url, token="t-alice"))[1]["projects"] == ["vision"]
        await clock.advance(2)
        assert (await _get(url, token="t-alice"))[1]["projects"] == ["nlp", "vision"]
        assert auth.reviews_sent == 2 * asked
        # A refused token is remembered for denied_ttl only.
        await _get(url, token="forged")
        await _get(url, token="forged")
        assert auth.reviews_sent == 2 * asked + 1
        store.add_token("forged", "mallory")
        await clock.advance(6)
        assert (await _get(url, token="forged"))[:2] == (403, "user mallory may get no gpufleet.dev project or queue")

    run(body)


def test_an_api_server_that_cannot_answer_is_a_503_and_not_remembered() -> None:
    async def body(url: str, auth: KubeAuthorizer, store: FakeCluster, clock: VirtualClock) -> None:
        store.fail("create", 503, kind=Kind.TOKEN_REVIEW, message="etcd is away")
        status, text, _ = await _get(url, token="t-alice")
        assert status == 503
        assert text.endswith("review a bearer token: HTTP 503: etcd is away") and "\n" not in text
        store.fail("create", 500, kind=Kind.SUBJECT_ACCESS_REVIEW, message="webhook down")
        status, text, _ = await _get(url, token="t-alice")
        assert status == 503 and text.endswith("review access: HTTP 500: webhook down")
        assert (await _get(url, token="t-alice"))[0] == 200

    run(body)


def test_names_come_from_the_catalog_when_given() -> None:
    async def names() -> tuple[frozenset[str], frozenset[str]]:
        return frozenset({"vision", "elsewhere"}), frozenset()

    async def body(url: str, auth: KubeAuthorizer, store: FakeCluster, clock: VirtualClock) -> None:
        status, seen, _ = await _get(url, token="t-alice")
        assert (status, seen["projects"], seen["queues"]) == (200, ["vision"], [])
        assert store.count("list") == 0

    run(body, catalog=names)


def test_visibility_is_the_agreed_frozen_value() -> None:
    seen = Visibility(projects=frozenset({"vision"}))
    assert seen.sees("vision", None) and not seen.sees("nlp", "nlp-train")
    with pytest.raises(AttributeError):
        seen.admin = True  # type: ignore[misc]


def test_the_dashboards_authorizer_connects_with_a_kubeconfig_on_first_use(tmp_path: Path) -> None:
    store, clock = cluster()
    made: list[KubeAuthorizer] = []

    def make(url: str) -> KubeAuthorizer:
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "emu",
            "clusters": [{"name": "emu", "cluster": {"server": url}}],
            "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "dashboard"}}],
            "users": [{"name": "dashboard", "user": {"token": "the-dashboards-own"}}]}))
        made.append(kube_authorizer(str(config), trust_proxy=True))
        return made[0]

    async def main() -> None:
        async with serving(store, clock, make) as (url, auth):
            assert auth._api is None  # nothing connected before the first request
            status, seen, _ = await _get(url, token="t-alice")
            assert (status, seen["projects"]) == (200, ["vision"])
            assert auth.trust_proxy
            with pytest.raises(ValueError, match="one of the two"):
                KubeAuthorizer(None, clock)

    asyncio.run(main())


def test_only_the_platform_admin_role_of_the_chart_may_run_what_ifs() -> None:
    from gpufleet.web.auth import ADMIN_RESOURCE, ADMIN_VERB

    roles = yaml.safe_load((Path(__file__).parents[2] / "deploy/helm/gpufleet/files/rbac/tenancy-roles.yaml").read_text())

    def grants(rules: list[Json], resource: str, verb: str) -> bool:
        return any("gpufleet.dev" in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
                   for r in rules)

    may = {role["name"] for role in roles
           if grants(role["rules"], ADMIN_RESOURCE, ADMIN_VERB) or grants(role["rules"], "*", "*")}
    assert may == {"gpufleet-platform-admin"}
    admin = next(role for role in roles if role["name"] == "gpufleet-platform-admin")
    assert grants(admin["rules"], ADMIN_RESOURCE, ADMIN_VERB)  # named, not only through the wildcard
    viewers = {role["name"] for role in roles if grants(role["rules"], "projects", "get")
               and grants(role["rules"], "queues", "get")}
    assert {"gpufleet-viewer", "gpufleet-member", "gpufleet-project-admin"} <= viewers  # the dashboard's `get`
