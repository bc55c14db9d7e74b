"""The in-memory API (FakeCluster) behaves as the controller expects an API server to."""

from __future__ import annotations

import asyncio

import pytest

from gpufleet.kube.client.port import ApiError, Kind
from gpufleet.testing.fake_cluster import FakeCluster, VirtualClock, merge_patch
from kube.controller.controller_objects import node, pdb, pod


@pytest.mark.asyncio
async def test_watch_resumes_after_a_version_and_410_after_compaction() -> None:
    cluster = FakeCluster()
    api = cluster.client()
    cluster.put(Kind.NODE, node("a"))
    listing = await api.list(Kind.NODE)
    cluster.put(Kind.NODE, node("b"))
    cluster.delete(Kind.NODE, "", "a")

    seen: list[tuple[str, str]] = []
    stream = api.watch(Kind.NODE, listing.resource_version)
    async for event in stream:
        seen.append((event.type, event.object["metadata"]["name"]))
        if len(seen) == 2:
            break
    await stream.aclose()
    assert seen == [("ADDED", "b"), ("DELETED", "a")]

    cluster.compact()
    with pytest.raises(ApiError) as err:
        async for _ in api.watch(Kind.NODE, listing.resource_version):
            pass
    assert err.value.status == 410


@pytest.mark.asyncio
async def test_binding_conflicts_when_already_bound_and_copies_nothing_else() -> None:
    cluster = FakeCluster()
    api = cluster.client()
    cluster.put(Kind.POD, pod("p"))
    await api.bind("ml", "p", "n1")
    assert cluster.object(Kind.POD, "ml", "p")["spec"]["nodeName"] == "n1"  # type: ignore[index]
    with pytest.raises(ApiError) as err:
        await api.bind("ml", "p", "n2")
    assert err.value.status == 409
    with pytest.raises(ApiError) as missing:
        await api.bind("ml", "nope", "n1")
    assert missing.value.status == 404


@pytest.mark.asyncio
async def test_eviction_respects_pod_disruption_budgets() -> None:
    cluster = FakeCluster()
    api = cluster.client()
    for name in ("w0", "w1"):
        cluster.put(Kind.POD, pod(name, labels={"app": "web"}, node_name="n1", phase="Running"))
    cluster.put(Kind.PDB, pdb("web", {"app": "web"}, min_available=2))
    with pytest.raises(ApiError) as err:
        await api.evict("ml", "w0")
    assert err.value.status == 429
    assert "web needs 2 healthy pods and has 2" in err.value.message
    cluster.put(Kind.PDB, pdb("web", {"app": "web"}, min_available=1))
    await api.evict("ml", "w0")
    assert cluster.object(Kind.POD, "ml", "w0") is None


@pytest.mark.asyncio
async def test_graceful_eviction_leaves_a_terminating_pod_until_finished() -> None:
    cluster = FakeCluster(graceful_eviction=True)
    cluster.put(Kind.POD, pod("v", node_name="n1", phase="Running"))
    await cluster.client().evict("ml", "v")
    assert cluster.object(Kind.POD, "ml", "v")["metadata"]["deletionTimestamp"]  # type: ignore[index]
    assert cluster.finish_terminations() == 1
    assert cluster.object(Kind.POD, "ml", "v") is None


@pytest.mark.asyncio
async def test_replace_is_optimistic() -> None:
    cluster = FakeCluster()
    api = cluster.client()
    lease = await api.create(Kind.LEASE, {"metadata": {"name": "l", "namespace": "ns"}, "spec": {}})
    await api.replace(Kind.LEASE, {**lease, "spec": {"holderIdentity": "a"}})
    with pytest.raises(ApiError) as err:  # the version read is stale now
        await api.replace(Kind.LEASE, {**lease, "spec": {"holderIdentity": "b"}})
    assert err.value.status == 409


@pytest.mark.asyncio
async def test_injected_faults_and_call_log() -> None:
    cluster = FakeCluster()
    api = cluster.client("x")
    cluster.put(Kind.POD, pod("p"))
    cluster.fail("bind", 0, after_apply=True)
    with pytest.raises(ApiError) as err:
        await api.bind("ml", "p", "n1")
    assert err.value.status == 0
    assert cluster.object(Kind.POD, "ml", "p")["spec"]["nodeName"] == "n1"  # type: ignore[index]  # applied
    assert cluster.count("bind", caller="x") == 1


@pytest.mark.asyncio
async def test_virtual_clock_wakes_sleepers_in_order() -> None:
    clock = VirtualClock(start=100.0)
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.now()))

    tasks = [asyncio.create_task(sleeper("late", 5)), asyncio.create_task(sleeper("early", 1))]
    await asyncio.sleep(0)
    await clock.advance(3)
    assert woke == [("early", 101.0)]
    await clock.advance(3)
    assert woke == [("early", 101.0), ("late", 105.0)]
    await asyncio.gather(*tasks)


def test_merge_patch_deletes_with_null() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}) == {"a": {"c": 2, "d": 3}}


def _access(user: str, queue: str, namespace: str, groups: tuple[str, ...] = ()) -> dict[str, object]:
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": list(groups), "resourceAttributes": {
                "namespace": namespace, "verb": "use", "group": "gpufleet.dev", "resource": "queues", "name": queue}}}


@pytest.mark.asyncio
async def test_access_reviews_follow_the_grant_table_and_are_not_stored() -> None:
    cluster = FakeCluster()
    api = cluster.client("webhook")
    cluster.grant_queue("team-b", user="alice")  # cluster-wide
    cluster.grant_queue("team-c", group="ml", namespace="vision")  # in one namespace

    async def allowed(review: dict[str, object]) -> bool:
        answer = await api.create_access_review(review)  # type: ignore[arg-type]
        return bool(answer["status"]["allowed"])

    assert await allowed(_access("alice", "team-b", "anywhere"))
    assert not await allowed(_access("bob", "team-b", "anywhere"))
    assert await allowed(_access("bob", "team-c", "vision", ("ml",)))
    assert not await allowed(_access("bob", "team-c", "nlp", ("ml",)))
    assert cluster.count("create", caller="webhook") == 4
    assert cluster.objects(Kind.SUBJECT_ACCESS_REVIEW) == []
    cluster.access_answer = lambda spec: spec["user"] == "root"
    assert await allowed(_access("root", "x", "y"))
    with pytest.raises(ApiError) as caught:
        await api.create_access_review({"spec": {}})
    assert caught.value.status == 422


@pytest.mark.asyncio
async def test_a_field_selector_chooses_as_the_api_server_does() -> None:
    from gpufleet.kube import FieldSelector

    cluster = FakeCluster()
    api = cluster.client()
    here, there = pod("here"), pod("there")
    here["spec"]["nodeName"], there["spec"]["nodeName"] = "n1", "n2"
    cluster.put(Kind.POD, here)
    listing = await api.list(Kind.POD, FieldSelector.equals("spec.nodeName", "n1"))
    assert [p["metadata"]["name"] for p in listing.items] == ["here"]
    late = pod("late")
    late["spec"]["nodeName"] = "n1"
    cluster.put(Kind.POD, there)
    cluster.put(Kind.POD, late)
    stream = api.watch(Kind.POD, listing.resource_version, FieldSelector.equals("spec.nodeName", "n1"))
    async for event in stream:
        assert event.object["metadata"]["name"] == "late"
        break
    await stream.aclose()
    with pytest.raises(ApiError) as refused:
        await api.list(Kind.POD, FieldSelector.equals("spec.containers", "x"))
    assert refused.value.status == 400


@pytest.mark.asyncio
async def test_token_reviews_authenticate_known_tokens_and_are_not_stored() -> None:
    cluster = FakeCluster()
    api = cluster.client("dashboard")
    cluster.add_token("t-alice", "alice", ["team-a"])
    known = await api.create_token_review({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                           "spec": {"token": "t-alice"}})
    assert known["status"] == {"authenticated": True, "user": {
        "username": "alice", "uid": "uid-alice", "groups": ["team-a", "system:authenticated"]}}
    unknown = await api.create_token_review({"spec": {"token": "forged"}})
    assert unknown["status"]["authenticated"] is False
    assert unknown["status"]["error"] == "invalid bearer token"
    with pytest.raises(ApiError) as caught:
        await api.create_token_review({"spec": {}})
    assert caught.value.status == 422
    assert cluster.count("create", caller="dashboard") == 3
    assert cluster.objects(Kind.TOKEN_REVIEW) == []


@pytest.mark.asyncio
async def test_grants_of_any_verb_and_resource_follow_the_table() -> None:
    cluster = FakeCluster()
    api = cluster.client()
    cluster.grant("get", "projects", "vision", group="team-a")  # one project, by name
    cluster.grant("get", "queues", user="ops")  # every queue
    cluster.grant("create", "simulations", user="root")

    async def allowed(user: str, verb: str, resource: str, name: str = "", groups: tuple[str, ...] = ()) -> bool:
        attributes = {"verb": verb, "group": "gpufleet.dev", "resource": resource, "name": name}
        answer = await api.create_access_review({"spec": {"user": user, "groups": list(groups),
                                                          "resourceAttributes": attributes}})
        return bool(answer["status"]["allowed"])

    assert await allowed("bob", "get", "projects", "vision", ("team-a",))
    assert not await allowed("bob", "get", "projects", "nlp", ("team-a",))
    assert not await allowed("bob", "get", "projects", "", ("team-a",))  # a grant by name is not one on all
    assert not await allowed("bob", "list", "projects", "vision", ("team-a",))
    assert await allowed("ops", "get", "queues", "any-queue")
    assert await allowed("ops", "get", "queues")
    assert await allowed("root", "create", "simulations")
    assert not await allowed("ops", "create", "simulations")
