"""The webhook's caches over the in-memory API: access answers (TTL, bound, shared reviews) and the
cluster state (pending gangs kept as pods come and go, Projects re-indexed on change)."""

from __future__ import annotations

import asyncio

import pytest

from gpufleet.domain import QueueName
from gpufleet.kube import Kind
from gpufleet.kube.webhook.access import AccessCache, AccessQuestion, RecordingReviewer
from gpufleet.kube.webhook.state import AdmissionState
from gpufleet.testing import FakeCluster, VirtualClock

pytestmark = pytest.mark.asyncio


def _question(user: str, queue: str = "q") -> AccessQuestion:
    return AccessQuestion(user, (), QueueName(queue), "ns")


def _reviews(store: FakeCluster) -> int:
    return sum(1 for c in store.calls if c.kind is Kind.SUBJECT_ACCESS_REVIEW)


async def test_answers_expire_after_their_ttl_denials_sooner() -> None:
    clock = VirtualClock()
    store = FakeCluster(clock)
    store.grant_queue("q", user="alice")
    cache = AccessCache(store.client("webhook"), clock, allowed_ttl=60, denied_ttl=10)
    assert await cache.ask(_question("alice")) is True
    assert await cache.ask(_question("bob")) is False
    await clock.advance(9)
    assert cache.lookup(_question("alice")) is True and cache.lookup(_question("bob")) is False
    await clock.advance(2)
    assert cache.lookup(_question("alice")) is True and cache.lookup(_question("bob")) is None
    await clock.advance(50)
    assert cache.lookup(_question("alice")) is None
    assert _reviews(store) == 2


async def test_the_cache_is_bounded_and_drops_the_least_recently_used() -> None:
    clock = VirtualClock()
    store = FakeCluster(clock)
    cache = AccessCache(store.client(), clock, max_entries=3)
    for user in ("a", "b", "c"):
        await cache.ask(_question(user))
    cache.lookup(_question("a"))  # a is used again: b is now the oldest
    await cache.ask(_question("d"))
    assert len(cache) == 3
    assert cache.lookup(_question("b")) is None and cache.lookup(_question("a")) is False


async def test_identical_questions_in_flight_share_one_review() -> None:
    clock = VirtualClock()
    store = FakeCluster(clock)
    store.grant_queue("q", group="ml")
    cache = AccessCache(store.client(), clock)
    question = AccessQuestion("alice", ("ml",), QueueName("q"), "ns")
    answers = await asyncio.gather(*(cache.ask(question) for _ in range(5)))
    assert answers == [True] * 5 and _reviews(store) == 1 and cache.reviews_sent == 1


async def test_the_recording_reviewer_answers_from_the_cache_only() -> None:
    clock = VirtualClock()
    store = FakeCluster(clock)
    store.grant_queue("q", user="alice")
    cache = AccessCache(store.client(), clock)
    reviewer = RecordingReviewer(cache, {"uid": "u", "extra": {"k": ["v"]}})
    assert reviewer.can_use_queue("alice", ["b", "a"], QueueName("q"), "ns") is False
    assert reviewer.missing == [AccessQuestion("alice", ("a", "b"), QueueName("q"), "ns")]
    assert reviewer.missing[0].uid == "u" and reviewer.missing[0].extra == (("k", ("v",)),)
    await cache.ask(reviewer.missing[0])
    assert RecordingReviewer(cache, {}).can_use_queue("alice", ["a", "b"], QueueName("q"), "ns") is True


def _pending(name: str, user: str, group: str | None = None, namespace: str = "vision") -> dict[str, object]:
    labels = {"gpufleet.dev/pod-group": group} if group else {}
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "annotations": {"gpufleet.dev/submitted-by": user}},
            "spec": {"schedulerName": "gpufleet", "containers": []}}


async def _settle(state: AdmissionState, until: object, rounds: int = 200) -> None:
    for _ in range(rounds):
        if until():  # type: ignore[operator]
            return
        await asyncio.sleep(0)
    raise AssertionError("the watch did not deliver in time")


async def test_pending_gangs_follow_the_pods() -> None:
    clock = VirtualClock()
    store = FakeCluster(clock)
    store.put(Kind.POD, _pending("a-0", "alice", "g"))
    store.put(Kind.POD, _pending("a-1", "alice", "g"))
    store.put(Kind.POD, _pending("solo", "alice"))
    store.put(Kind.POD, {**_pending("other", "alice"), "spec": {"schedulerName": "default-scheduler"}})
    state = AdmissionState(store.client("webhook"), clock)
    await state.start()
    try:
        await asyncio.wait_for(state.synced.wait(), 5)
        assert state.context().pending_gangs == {"alice": {"vision": {"vision/g": 2, "vision/solo": 1}}}
        store.put(Kind.POD, {**_pending("solo", "alice"), "spec": {"schedulerName": "gpufleet", "nodeName": "n"}})
        store.delete(Kind.POD, "vision", "a-0")
        await _settle(state, lambda: state.context().pending_gangs == {"alice": {"vision": {"vision/g": 1}}})
        store.delete(Kind.POD, "vision", "a-1")
        await _settle(state, lambda: state.context().pending_gangs == {})
        store.put(Kind.PROJECT, {"metadata": {"name": "p"}, "spec": {"namespaces": {"names": ["vision"]}}})
        await _settle(state, lambda: state.context().index.project_of("vision") is not None)
    finally:
        await state.stop()
