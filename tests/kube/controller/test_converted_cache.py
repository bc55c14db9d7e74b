"""The informers' cache keeps each object's domain object between cycles (issue 13): a change
converts that object again, a deletion takes it out, an unchanged object keeps the very same
domain object, and a bad object still gives its one-line problem."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpufleet.domain import Decisions, Snapshot
from gpufleet.kube.client.port import Kind, WatchEvent
from gpufleet.kube.controller import informers
from gpufleet.kube.controller.informers import ObjectCache
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import bound_pods, informing, make_controller, pod, running, small_cluster, until


def _versioned(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = str(rv)
    return out


def _cache(*pods: dict[str, Any]) -> ObjectCache:
    cache = ObjectCache([Kind.POD])
    cache.replace(Kind.POD, list(pods))
    return cache


def _names(cache: ObjectCache) -> list[str]:
    values, _ = cache.converted(Kind.POD)
    return [p.name for p in values]


def test_unchanged_objects_keep_their_domain_objects_and_a_changed_one_is_converted_again() -> None:
    cache = _cache(_versioned(pod("a"), 1), _versioned(pod("b"), 2))
    first, _ = cache.converted(Kind.POD)
    changed = _versioned(pod("b", 2), 3)
    cache.apply(Kind.POD, WatchEvent("MODIFIED", changed))
    second, problems = cache.converted(Kind.POD)
    assert not problems
    assert [p.name for p in second] == ["a", "b"]  # the order of the cache, as before the change
    assert second[0] is first[0]  # unchanged: the same object
    assert second[1] is not first[1] and second[1].requests["nvidia.com/gpu"] == 2000 and first[1].requests["nvidia.com/gpu"] == 1000


def test_a_cycle_without_changes_converts_and_inspects_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = _cache(*(_versioned(pod(f"p{i}"), i + 1) for i in range(50)))
    cache.converted(Kind.POD)
    seen: list[Any] = []
    real_convert, real_wanted = informers.convert_object, informers.wanted_pod
    monkeypatch.setattr(informers, "convert_object", lambda kind, obj: seen.append(obj) or real_convert(kind, obj))
    monkeypatch.setattr(informers, "wanted_pod", lambda obj: seen.append(obj) or real_wanted(obj))
    values, _ = cache.converted(Kind.POD)
    assert len(values) == 50 and seen == []
    cache.apply(Kind.POD, WatchEvent("MODIFIED", _versioned(pod("p7", 2), 100)))
    cache.apply(Kind.POD, WatchEvent("MODIFIED", _versioned(pod("p7", 3), 101)))  # twice: converted once
    values, _ = cache.converted(Kind.POD)
    assert [o["metadata"]["name"] for o in seen] == ["p7", "p7"]  # wanted_pod, then convert_object, once each
    assert values[7].requests["nvidia.com/gpu"] == 3000


def test_deleted_objects_leave_the_snapshot() -> None:
    cache = _cache(_versioned(pod("a"), 1), _versioned(pod("b"), 2), _versioned(pod("c"), 3))
    assert _names(cache) == ["a", "b", "c"]
    cache.apply(Kind.POD, WatchEvent("DELETED", _versioned(pod("b"), 4)))
    assert _names(cache) == ["a", "c"]
    cache.apply(Kind.POD, WatchEvent("ADDED", _versioned(pod("b"), 5)))  # back, at the end as in the cache
    assert _names(cache) == ["a", "c", "b"]
    cache.replace(Kind.POD, [_versioned(pod("c"), 3)])  # a relist without a and b
    values, _ = cache.converted(Kind.POD)
    assert [p.name for p in values] == ["c"]


def test_a_relist_keeps_unchanged_objects_and_converts_changed_ones() -> None:
    cache = _cache(_versioned(pod("a"), 1), _versioned(pod("b"), 2))
    first, _ = cache.converted(Kind.POD)
    cache.replace(Kind.POD, [_versioned(pod("a"), 1), _versioned(pod("b", 4), 9)])
    second, _ = cache.converted(Kind.POD)
    assert second[0] is first[0] and second[1].requests["nvidia.com/gpu"] == 4000


def test_pods_no_snapshot_holds_are_left_out_and_come_in_when_they_change() -> None:
    other = _versioned(pod("other", scheduler="default-scheduler"), 1)
    cache = _cache(_versioned(pod("a"), 2), other)
    assert _names(cache) == ["a"]
    on_node = _versioned(pod("other", scheduler="default-scheduler", node_name="n0", phase="Running"), 3)
    cache.apply(Kind.POD, WatchEvent("MODIFIED", on_node))  # now it holds capacity
    assert _names(cache) == ["a", "other"]
    deleting = _versioned(pod("a"), 4)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    cache.apply(Kind.POD, WatchEvent("MODIFIED", deleting))  # deleted before it was bound
    assert _names(cache) == ["other"]


def test_a_bad_object_gives_its_one_line_problem_until_it_is_fixed_or_gone() -> None:
    bad = _versioned(pod("bad"), 2)
    bad["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "lots"
    cache = _cache(_versioned(pod("a"), 1), bad)
    values, problems = cache.converted(Kind.POD)
    assert [p.name for p in values] == ["a"]
    assert len(problems) == 1 and "\n" not in problems[0] and problems[0].startswith("Pod ml/bad: ")
    assert cache.converted(Kind.POD)[1] == problems  # said again each cycle while it stays bad
    cache.apply(Kind.POD, WatchEvent("MODIFIED", _versioned(pod("bad"), 3)))
    values, problems = cache.converted(Kind.POD)
    assert [p.name for p in values] == ["a", "bad"] and problems == []
    cache.apply(Kind.POD, WatchEvent("MODIFIED", bad | {"metadata": {**bad["metadata"], "resourceVersion": "4"}}))
    assert len(cache.converted(Kind.POD)[1]) == 1
    cache.apply(Kind.POD, WatchEvent("DELETED", bad))
    assert cache.converted(Kind.POD) == (cache.converted(Kind.POD)[0], [])


class _Recording:
    """An engine that records the snapshots it is given."""

    def __init__(self) -> None:
        self.snapshots: list[Snapshot] = []

    def __call__(self, snapshot: Snapshot) -> Decisions:
        from gpufleet.engine import schedule

        self.snapshots.append(snapshot)
        return schedule(snapshot)


@pytest.mark.asyncio
async def test_the_controller_calls_its_engine_with_snapshots_that_share_unchanged_pods() -> None:
    cluster = FakeCluster()
    small_cluster(cluster, pending=0)
    for i in range(3):
        cluster.put(Kind.POD, pod(f"r{i}", node_name="n0", phase="Running", gpu_index=str(i)))
    cluster.put(Kind.POD, pod("p0"))
    engine = _Recording()
    controller = make_controller(cluster)
    controller_with = type(controller)(controller.api, controller.clock, controller.config, engine=engine)
    async with informing(controller_with):
        await controller_with.cycle()
        cluster.put(Kind.POD, pod("p1"))
        await until(lambda: controller_with.cache.get(Kind.POD, "ml", "p1") is not None, what="p1 seen")
        await controller_with.cycle()
    first, second = ({p.name: p for p in s.pods} for s in engine.snapshots)
    assert {"r0", "r1", "r2"} <= set(first) and "p1" in second
    assert all(second[name] is first[name] for name in ("r0", "r1", "r2"))  # the same objects


@pytest.mark.asyncio
async def test_the_default_engine_is_one_incremental_engine_for_the_controllers_life() -> None:
    from gpufleet.engine import IncrementalEngine

    cluster = FakeCluster()
    small_cluster(cluster, pending=2)
    controller = make_controller(cluster)
    engine = controller.engine
    assert isinstance(engine, IncrementalEngine)
    async with running(controller):
        await until(lambda: len(bound_pods(cluster)) == 2, what="2 pods bound")
    assert controller.engine is engine


def test_the_collector_waits_while_many_objects_are_converted(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    seen: list[bool] = []
    real_convert = informers.convert_object

    def convert(kind: Kind, obj: dict[str, Any]) -> Any:
        seen.append(gc.isenabled())
        return real_convert(kind, obj)

    monkeypatch.setattr(informers, "convert_object", convert)
    assert gc.isenabled()
    many = _cache(*(_versioned(pod(f"p{i}"), i + 1) for i in range(informers.PAUSE_GC_FROM)))
    assert len(many.converted(Kind.POD)[0]) == informers.PAUSE_GC_FROM
    assert not any(seen) and gc.isenabled()  # paused for the burst, then back on
    seen.clear()
    few = _cache(_versioned(pod("a"), 1))
    few.converted(Kind.POD)
    assert seen == [True]  # a few objects: nothing to gain


@pytest.mark.asyncio
async def test_the_collector_waits_during_a_burst_of_bindings_and_comes_back() -> None:
    import gc

    from gpufleet.kube.controller import loop

    cluster = FakeCluster()
    small_cluster(cluster, nodes=2, pending=3)
    controller = make_controller(cluster)
    states: list[bool] = []
    real_bind = controller.binder.bind_gangs

    async def bind_gangs(*args: Any) -> Any:
        states.append(gc.isenabled())
        return await real_bind(*args)

    controller.binder.bind_gangs = bind_gangs  # type: ignore[method-assign]
    loop_threshold = loop.PAUSE_GC_FROM
    try:
        loop.PAUSE_GC_FROM = 2  # three pods: a "burst"
        async with informing(controller):
            await controller.cycle()
    finally:
        loop.PAUSE_GC_FROM = loop_threshold
    assert states == [False] and gc.isenabled()
    assert len(bound_pods(cluster)) == 3
