"""The fake's reviews (SubjectAccessReview, TokenReview) answer the same through the in-memory port
and through the lightkube adapter over the HTTP emulator: what the dashboard's authentication is
tested against is one set of semantics."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.kube import ApiError, ClusterApi, connect
from gpufleet.testing import FakeCluster
from gpufleet.testing.emulator import ApiServerEmulator

QUESTIONS: list[dict[str, Any]] = [
    {"user": "alice", "groups": ["team-a"], "resourceAttributes": {
        "verb": "get", "group": "gpufleet.dev", "resource": "projects", "name": "vision"}},
    {"user": "alice", "groups": ["team-a"], "resourceAttributes": {
        "verb": "get", "group": "gpufleet.dev", "resource": "projects", "name": "nlp"}},
    {"user": "root", "resourceAttributes": {"verb": "create", "group": "gpufleet.dev", "resource": "simulations"}},
    {"user": "bob", "resourceAttributes": {"verb": "use", "group": "gpufleet.dev", "resource": "queues",
                                           "name": "q", "namespace": "ml"}},
]


def _store() -> FakeCluster:
    store = FakeCluster()
    store.grant("get", "projects", "vision", group="team-a")
    store.grant("create", "simulations", user="root")
    store.grant_queue("q", user="bob", namespace="ml")
    store.add_token("good", "alice", ["team-a"])
    return store


async def _answers(api: ClusterApi) -> list[Any]:
    found: list[Any] = []
    for spec in QUESTIONS:
        review = await api.create_access_review({"apiVersion": "authorization.k8s.io/v1",
                                                 "kind": "SubjectAccessReview", "spec": spec})
        found.append(review["status"]["allowed"])
    for token in ("good", "bad"):
        review = await api.create_token_review({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                                "spec": {"token": token}})
        found.append(review["status"])
    try:
        await api.create_token_review({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {}})
    except ApiError as err:
        found.append((err.status, err.reason))
    return found


@pytest.mark.asyncio
async def test_reviews_answer_alike_in_memory_and_over_http() -> None:
    in_memory = await _answers(_store().client("dashboard"))
    async with ApiServerEmulator(store=_store()) as emulator:
        api = connect(server=emulator.url_text)
        try:
            over_http = await _answers(api)
        finally:
            await api.close()
    assert in_memory == over_http
    assert in_memory[:4] == [True, False, True, True]
    assert in_memory[4]["user"]["username"] == "alice" and in_memory[5]["authenticated"] is False
    assert in_memory[6] == (422, "Invalid")
