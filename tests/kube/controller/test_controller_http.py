"""Contract tests: the real lightkube adapter over HTTP against an API server emulator (kmock-based).

Timings here are real but short (an HTTP server is involved): lease durations of a second or
two, backoffs of tens of milliseconds.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from gpufleet.domain import Binding, Eviction, EvictionReason, NodeName, PodKey
from gpufleet.kube.client.lightkube_api import LightkubeApi, connect
from gpufleet.kube.client.port import ApiError, Kind, RealClock
from gpufleet.kube.controller.binder import Binder
from gpufleet.kube.controller.informers import Informer, ObjectCache
from gpufleet.kube.controller.leader import LeaseConfig
from gpufleet.kube.controller.loop import Controller, ControllerConfig
from gpufleet.kube.controller.metrics import ControllerMetrics
from gpufleet.testing.emulator import ApiServerEmulator

from .controller_objects import bound_pods, eventually, node, pdb, pod, pod_group, queue, small_cluster

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def emulator() -> AsyncIterator[ApiServerEmulator]:
    async with ApiServerEmulator() as server:
        yield server


def client(emulator: ApiServerEmulator, identity: str = "test") -> LightkubeApi:
    return connect(server=emulator.url_text, field_manager=identity, timeout=5.0)


def controller(emulator: ApiServerEmulator, identity: str, lease: LeaseConfig | None = None) -> Controller:
    config = ControllerConfig(identity=identity, lease=lease, min_interval=0.0, concurrency=16)
    return Controller(client(emulator, identity), RealClock(), config, ControllerMetrics())


async def start(c: Controller) -> asyncio.Task[None]:
    task = asyncio.create_task(c.run())
    await eventually(lambda: c.ready, what="informers synced")
    return task


async def stop(task: asyncio.Task[None], c: Controller) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await c.api.close()


async def test_list_watch_and_relist_after_410(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    store.put(Kind.NODE, node("a"))
    api = client(emulator)
    cache = ObjectCache([Kind.NODE])
    metrics = ControllerMetrics()
    informer = Informer(api, Kind.NODE, cache, RealClock(), metrics, backoff=(0.02, 0.1))
    task = asyncio.create_task(informer.run())
    try:
        await eventually(lambda: cache.synced and cache.count(Kind.NODE) == 1, what="listed")
        store.put(Kind.NODE, node("b"))
        await eventually(lambda: cache.get(Kind.NODE, "", "b") is not None, what="watched ADDED")
        # While the API server is down, "a" is deleted and the history is compacted: the watch cannot
        # resume (410) and only a relist can tell that "a" is gone.
        await emulator.stop()
        store.delete(Kind.NODE, "", "a")
        store.put(Kind.NODE, node("c"))
        store.compact()
        await emulator.start()
        await eventually(lambda: cache.get(Kind.NODE, "", "a") is None and cache.get(Kind.NODE, "", "c") is not None,
                         what="relisted")
        assert metrics.relists.labels("nodes")._value.get() == 2
        assert store.count("list") == 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await api.close()


async def test_binding_answers_are_statuses_and_conflicts_are_recognised(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    for name in ("free", "taken"):
        store.put(Kind.POD, pod(name))
    store.put(Kind.POD, pod("mine-already", node_name="n1"))
    api = client(emulator)
    binder = Binder(api, RealClock(), lambda: True, backoff=0.01)
    pods = {name: store.object(Kind.POD, "ml", name) for name in ("free", "taken", "mine-already")}
    await api.bind("ml", "taken", "other-node")  # someone else binds it first
    outcomes = await binder.bind_gangs(
        [(f"ml/{n}", [Binding(PodKey(f"ml/{n}"), NodeName("n1"), (0,))]) for n in ("free", "taken", "mine-already")],
        lambda key: pods[key.split("/")[1]],
    )
    result = {o.gang: (o.bound, dict(o.failed)) for o in outcomes}
    assert result["ml/free"][0] == ("ml/free",)
    assert result["ml/mine-already"][0] == ("ml/mine-already",)  # 409, but it is on our node: done
    assert "someone else" in result["ml/taken"][1]["ml/taken"]
    assert store.object(Kind.POD, "ml", "free")["metadata"]["annotations"]["gpufleet.dev/gpu-index"] == "0"  # type: ignore[index]
    with pytest.raises(ApiError) as err:  # a Failure Status comes back as an error
        await api.bind("ml", "nope", "n1")
    assert err.value.status == 404
    await api.close()


async def test_eviction_with_and_without_a_disruption_budget(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    for name in ("w0", "w1", "solo"):
        labels = {"app": "web"} if name.startswith("w") else {"app": "solo"}
        store.put(Kind.POD, pod(name, node_name="n1", phase="Running", labels=labels))
    store.put(Kind.PDB, pdb("web", {"app": "web"}, min_available=2))
    api = client(emulator)
    binder = Binder(api, RealClock(), lambda: True, backoff=0.01)
    by = PodKey("ml/x")
    outcomes = await binder.evict([Eviction(PodKey("ml/w0"), EvictionReason.RECLAIM, by),
                                   Eviction(PodKey("ml/solo"), EvictionReason.PREEMPT, by),
                                   Eviction(PodKey("ml/ghost"), EvictionReason.PREEMPT, by)])
    result = {o.pod: o for o in outcomes}
    assert result["ml/w0"].result == "blocked"
    assert "disruption budget" in result["ml/w0"].message and "web needs 2" in result["ml/w0"].message
    assert result["ml/solo"].result == "evicted" and store.object(Kind.POD, "ml", "solo") is None
    assert result["ml/ghost"].result == "gone"
    assert store.count("evict", status=429) == 1  # a budget's refusal is not retried at once
    await api.close()


async def test_conflicts_on_patches_are_retried(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    small_cluster(store, pending=2)
    store.fail("patch", 409, times=2, match=lambda ns, name: name == "p1")
    c = controller(emulator, "c")
    task = await start(c)
    try:
        await eventually(lambda: len(bound_pods(store)) == 2, what="both bound")
    finally:
        await stop(task, c)
    assert [call.status for call in store.calls if call.op == "patch" and call.name == "p1"] == [409, 409, 200]


async def test_api_server_restart_mid_cycle(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    small_cluster(store, nodes=20, pending=150)
    # The server goes away after 40 bindings, in the middle of the cycle's calls; a node is added
    # meanwhile and the history compacted, so it comes back with watches that cannot resume (410):
    # calls in flight get no answer, informers must relist.
    restarted = asyncio.Event()

    async def restart_when_busy() -> None:
        await eventually(lambda: store.count("bind") >= 40, what="40 bindings")
        await emulator.stop()
        store.put(Kind.NODE, node("n-late"))
        store.compact()
        await asyncio.sleep(0.3)
        await emulator.start()
        restarted.set()

    c = controller(emulator, "c")
    task = await start(c)
    chaos = asyncio.create_task(restart_when_busy())
    try:
        await eventually(lambda: restarted.is_set() and len(bound_pods(store)) == 150, timeout=30, what="all bound")
        # The controller's own view catches up through a relist (its watches cannot resume: 410).
        await eventually(lambda: c.metrics.relists.labels("pods")._value.get() >= 2 and sum(
            1 for p in c.cache.objects(Kind.POD) if p["spec"].get("nodeName")) == 150, what="relisted")
        assert c.cache.get(Kind.NODE, "", "n-late") is not None
    finally:
        chaos.cancel()
        await stop(task, c)
    binds = Counter(call.name for call in store.calls if call.op == "bind" and call.status == 201)
    assert len(binds) == 150 and set(binds.values()) == {1}
    assert c.metrics.relists.labels("pods")._value.get() >= 2


async def test_two_replicas_only_the_leader_binds(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    small_cluster(store, nodes=4, pending=20)
    lease = {"namespace": "gpufleet-system", "name": "gpufleet", "lease_duration": 1.5, "renew_deadline": 1.0,
             "retry_period": 0.2}
    one = controller(emulator, "one", LeaseConfig(identity="one", **lease))  # type: ignore[arg-type]
    two = controller(emulator, "two", LeaseConfig(identity="two", **lease))  # type: ignore[arg-type]
    tasks = await asyncio.gather(start(one), start(two))
    try:
        await eventually(lambda: len(bound_pods(store)) == 20, what="20 bound")
        leader = "one" if one.is_leader() else "two"
        assert one.is_leader() != two.is_leader()
        writers = {call.caller for call in store.calls if call.op in ("patch", "bind", "patch_status", "create")
                   and call.kind is not Kind.LEASE}
        assert writers == {leader}
        # The leader dies without releasing its lease: the follower waits it out, then takes over.
        dying, survivor = (one, two) if leader == "one" else (two, one)
        dying_task = tasks[0] if leader == "one" else tasks[1]
        assert dying.elector is not None
        dying.elector.release = _no_release  # type: ignore[method-assign]
        dying_task.cancel()
        await asyncio.gather(dying_task, return_exceptions=True)
        store.put(Kind.POD, pod("late"))
        await eventually(lambda: "ml/late" in bound_pods(store), what="the survivor binds")
        assert survivor.is_leader()
        assert [call.caller for call in store.calls if call.op == "bind" and call.name == "late"] == [
            survivor.config.identity]
    finally:
        for c, t in zip((one, two), tasks, strict=True):
            await stop(t, c)


async def _no_release() -> None:
    return None


async def test_crash_mid_cycle_then_restart_binds_each_pod_once(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    small_cluster(store, nodes=12, pending=60)
    store.put(Kind.POD_GROUP, pod_group("job", 4))
    for i in range(4):
        store.put(Kind.POD, pod(f"job-{i}", 8, group="job"))
    first = controller(emulator, "first")
    task = await start(first)
    # The controller is killed when the API server has applied its 25th Binding, in the middle of
    # the cycle's calls: some pods are bound, some only annotated, some untouched.
    applied = {"binds": 0}
    original = store._bind

    def bind_then_crash(*args: object) -> None:
        original(*args)  # type: ignore[arg-type]
        applied["binds"] += 1
        if applied["binds"] == 25:
            task.cancel()

    store._bind = bind_then_crash  # type: ignore[method-assign]
    await asyncio.gather(task, return_exceptions=True)
    await first.api.close()
    store._bind = original  # type: ignore[method-assign]
    half = len(bound_pods(store))
    assert 25 <= half < 64
    annotated_only = [o["metadata"]["name"] for o in store.objects(Kind.POD)  # annotated, never bound
                      if "gpufleet.dev/gpu-index" in o["metadata"]["annotations"] and not o["spec"].get("nodeName")]

    assert annotated_only  # the crash left Bindings in flight
    second = controller(emulator, "second")
    task = await start(second)
    try:
        await eventually(lambda: len(bound_pods(store)) == 64, timeout=30, what="all 64 bound")
        await eventually(lambda: (store.object(Kind.QUEUE, "", "team-a") or {}).get("status", {})
                         .get("usage", {}).get("nvidia.com/gpu") == "92", what="queue usage")
    finally:
        await stop(task, second)
    binds = Counter(call.name for call in store.calls if call.op == "bind" and call.status == 201)
    assert len(binds) == 64 and set(binds.values()) == {1}, [n for n, k in binds.items() if k > 1]
    assert all(store.object(Kind.POD, "ml", n)["spec"]["nodeName"] for n in annotated_only)  # type: ignore[index]
    slots = Counter((bound_pods(store)[f"ml/{o['metadata']['name']}"], g)
                    for o in store.objects(Kind.POD)
                    for g in o["metadata"]["annotations"]["gpufleet.dev/gpu-index"].split(","))
    assert max(slots.values()) == 1  # no GPU of any node given twice
    group = store.object(Kind.POD_GROUP, "ml", "job")
    assert group is not None and group["status"]["boundPods"] == 4


async def test_metrics_and_health_endpoints(emulator: ApiServerEmulator, unused_tcp_port: int) -> None:
    import aiohttp

    from gpufleet.kube.controller.metrics import serve_http

    store = emulator.store
    small_cluster(store, pending=2)
    c = controller(emulator, "c")
    runner = await serve_http(c.metrics, lambda: c.ready, "127.0.0.1", (unused_tcp_port,))
    try:
        async with aiohttp.ClientSession() as session:
            base = f"http://127.0.0.1:{unused_tcp_port}"
            async with session.get(f"{base}/readyz") as r:
                assert r.status == 503
            task = await start(c)
            try:
                await eventually(lambda: len(bound_pods(store)) == 2, what="bound")
                async with session.get(f"{base}/readyz") as r:
                    assert r.status == 200
                async with session.get(f"{base}/healthz") as r:
                    assert r.status == 200
                async with session.get(f"{base}/metrics") as r:
                    text = await r.text()
            finally:
                await stop(task, c)
    finally:
        await runner.cleanup()
    assert 'gpufleet_bindings_total{result="bound"} 2.0' in text
    assert 'gpufleet_queue_usage{queue="team-a",resource="nvidia.com/gpu"} 2.0' in text
    assert "gpufleet_cycle_duration_seconds_count" in text
    assert 'gpufleet_admitted_gangs{queue="team-a"} 2.0' in text


async def test_queue_status_subresource_over_http(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    store.put(Kind.NODE, node("n0"))
    store.put(Kind.QUEUE, queue("team-a", 2))
    for i in range(3):
        store.put(Kind.POD, pod(f"p{i}"))
    c = controller(emulator, "c")
    task = await start(c)
    try:
        await eventually(lambda: (store.object(Kind.QUEUE, "", "team-a") or {}).get("status", {})
                         .get("borrowed", {}).get("nvidia.com/gpu") == "1", what="status written")
    finally:
        await stop(task, c)
    assert store.count("patch_status", status=200) >= 1


async def test_namespaces_are_watched_over_http(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    store.put(Kind.NAMESPACE, {"metadata": {"name": "infra", "labels": {"team": "ml"}}})
    cache = ObjectCache([Kind.NAMESPACE])
    informer = Informer(client(emulator), Kind.NAMESPACE, cache, RealClock(), ControllerMetrics(), backoff=(0.02, 0.1))
    task = asyncio.create_task(informer.run())
    try:
        await eventually(lambda: cache.synced and cache.count(Kind.NAMESPACE) == 1, what="listed")
        store.put(Kind.NAMESPACE, {"metadata": {"name": "infra", "labels": {"team": "web"}}})
        await eventually(lambda: (cache.get(Kind.NAMESPACE, "", "infra") or {}).get("metadata", {})
                         .get("labels") == {"team": "web"}, what="watched MODIFIED")
        values, problems = cache.converted(Kind.NAMESPACE)
        assert [(ns.name, dict(ns.labels)) for ns in values] == [("infra", {"team": "web"})] and not problems
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
