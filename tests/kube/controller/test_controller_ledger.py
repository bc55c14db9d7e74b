"""The controller records the usage ledger: intervals open at bindings, close at the pods' ends, are
reconciled after a restart, take telemetry samples, and a database that is away stops nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.accounting import (
    ANNOTATION_BOUND_AT,
    AccountingConfig,
    bound_time,
    format_time,
    parse_time,
)
from gpufleet.kube.controller.loop import Controller, ControllerConfig
from gpufleet.ledger import EndReason, IntervalStart, LedgerEvent, LedgerStore, open_ledger
from gpufleet.telemetry import PodKey as TelemetryPod
from gpufleet.telemetry import PodUsage, TelemetryPage
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import bound_pods, informing, node, pod, queue
from .test_controller_projects import project

pytestmark = pytest.mark.asyncio


class Flaky:
    """A ledger that can be taken away: writes and reads fail while ``down``."""

    def __init__(self, store: LedgerStore) -> None:
        self.store = store
        self.down = False
        self.writes = 0

    def write(self, events: Sequence[LedgerEvent]) -> None:
        if self.down:
            raise ConnectionError("connection refused")
        self.writes += 1
        self.store.write(events)

    def open_intervals(self) -> list[IntervalStart]:
        if self.down:
            raise ConnectionError("connection refused")
        return self.store.open_intervals()


def cluster_with(pending: int = 3, spot: bool = False) -> FakeCluster:
    cluster = FakeCluster()
    cluster.put(Kind.NODE, node("n0", labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                              **({"karpenter.sh/capacity-type": "spot"} if spot else {})}))
    cluster.put(Kind.QUEUE, queue("team-a", 8))
    for i in range(pending):
        obj = pod(f"p{i}", labels={"team": "vision", "other": "x"})
        obj["metadata"]["annotations"]["gpufleet.dev/submitted-by"] = "alice"
        cluster.put(Kind.POD, obj)
    return cluster


def controller(cluster: FakeCluster, ledger: Any, **config: Any) -> Controller:
    options = ControllerConfig(identity="c", min_interval=0.0, engine_in_thread=False)
    accounting = AccountingConfig(cost_centre_labels=("team", "missing"), event_pod=("gpufleet-system", "c-0"),
                                  **config)
    return Controller(cluster.client("c"), cluster.clock, options, ledger=ledger, accounting=accounting)


def flush(c: Controller) -> None:
    assert c.accountant is not None
    assert c.accountant.writer.flush(force=True)


async def test_times_round_trip_at_the_ledgers_resolution() -> None:
    for seconds in (0.0, 1.5, 1_795_000_000.123456, 1_795_000_000.9999996):
        text = format_time(seconds)
        parsed = parse_time(text)
        assert parsed is not None and round(parsed * 1e6) == round(seconds * 1e6)
    assert parse_time("not a time") is None and parse_time(None) is None
    scheduled = {"status": {"conditions": [{"type": "PodScheduled", "status": "True",
                                            "lastTransitionTime": "2026-11-01T00:00:00Z"}]}}
    assert bound_time(scheduled) == parse_time("2026-11-01T00:00:00Z")


async def test_a_binding_opens_an_interval_with_the_pods_facts(tmp_path: Path) -> None:
    cluster = cluster_with()
    store = open_ledger(str(tmp_path / "ledger.db"))
    c = controller(cluster, store)
    async with informing(c):
        await c.cycle()
        flush(c)
    assert len(bound_pods(cluster)) == 3
    intervals = store.intervals()
    assert len(intervals) == 3
    for interval in intervals:
        start = interval.start
        obj = cluster.object(Kind.POD, "ml", start.pod_name)
        assert obj is not None
        assert start.pod_uid == obj["metadata"]["uid"]
        assert start.bound_at == parse_time(obj["metadata"]["annotations"][ANNOTATION_BOUND_AT])
        assert start.bound_at == cluster.clock.now()
        assert (start.namespace, start.queue, start.node, start.gpus) == ("ml", "team-a", "n0", 1.0)
        assert start.gpu_model == "NVIDIA-H100-80GB-HBM3"
        assert start.submitter == "alice"
        assert dict(start.labels) == {"team": "vision"}
        assert start.cpu_milli == 1000 and start.memory_bytes == 1024**3
        assert len(start.gpu_indices) == 1
        assert interval.ended_at is None


async def test_the_ledger_off_writes_no_bound_at_annotation() -> None:
    cluster = cluster_with(pending=1)
    c = Controller(cluster.client("c"), cluster.clock, ControllerConfig(identity="c", min_interval=0.0,
                                                                        engine_in_thread=False))
    async with informing(c):
        await c.cycle()
    obj = cluster.object(Kind.POD, "ml", "p0")
    assert obj is not None and obj["spec"]["nodeName"] == "n0"
    assert ANNOTATION_BOUND_AT not in obj["metadata"]["annotations"]
    assert c.accountant is None


@pytest.mark.parametrize(("spot", "expected"), [(False, EndReason.NODE_FAILURE), (True, EndReason.SPOT_RECLAIM)])
async def test_ends_completed_failed_deleted_and_node_lost(tmp_path: Path, spot: bool, expected: EndReason) -> None:
    cluster = cluster_with(pending=4, spot=spot)
    store = open_ledger(str(tmp_path / "ledger.db"))
    c = controller(cluster, store)
    async with informing(c):
        await c.cycle()
        await cluster.clock.advance(10)
        cluster.set_pod_phase("ml", "p0", "Succeeded")
        cluster.set_pod_phase("ml", "p1", "Failed")
        cluster.delete(Kind.POD, "ml", "p2")
        await cluster.clock.advance(5)
        cluster.delete(Kind.NODE, "", "n0")
        for _ in range(50):
            if len(c.cache.objects(Kind.NODE)) == 0:
                break
            await cluster.clock.advance(0.01)
        flush(c)
    by_name = {i.start.pod_name: i for i in store.intervals()}
    assert {k: v.end_reason for k, v in by_name.items()} == {
        "p0": EndReason.COMPLETED, "p1": EndReason.FAILED, "p2": EndReason.DELETED, "p3": expected}
    assert all(i.ended_at is not None and i.ended_at >= i.start.bound_at for i in by_name.values())


async def test_reconciliation_closes_vanished_and_opens_unrecorded(tmp_path: Path) -> None:
    cluster = cluster_with(pending=2)
    store = open_ledger(str(tmp_path / "ledger.db"))
    first = controller(cluster, store)
    async with informing(first):
        await first.cycle()  # bound, but the writes never reach the ledger (a crash)
    ghost = IntervalStart(pod_uid="gone", bound_at=1.0, namespace="ml", pod_name="ghost", queue="team-a",
                          node="n0", gpus=1.0)
    store.write([ghost])
    cluster.delete(Kind.POD, "ml", "p1")
    again = controller(cluster, store)
    async with informing(again):
        assert again.accountant is not None
        await again._reconcile_ledger(again.accountant)
        assert again.accountant.reconciled.is_set()
        flush(again)
    intervals = {i.start.pod_name: i for i in store.intervals()}
    assert set(intervals) == {"ghost", "p0"}
    assert intervals["ghost"].end_reason == EndReason.DELETED
    p0 = cluster.object(Kind.POD, "ml", "p0")
    assert p0 is not None and intervals["p0"].start.bound_at == bound_time(p0)
    assert intervals["p0"].ended_at is None
    # Reconciling again changes nothing.
    async with informing(again):
        assert again.accountant is not None
        await again._reconcile_ledger(again.accountant)
        flush(again)
    assert {i.start.pod_name: i.end() for i in store.intervals()} == {k: v.end() for k, v in intervals.items()}


async def test_an_eviction_closes_with_the_preemptor(tmp_path: Path) -> None:
    from gpufleet.domain import Eviction, EvictionReason, PodKey

    cluster = cluster_with(pending=1)
    store = open_ledger(str(tmp_path / "ledger.db"))
    c = controller(cluster, store)
    async with informing(c):
        await c.cycle()
        assert c.accountant is not None
        c.accountant.evicted(Eviction(PodKey("ml/p0"), EvictionReason.PREEMPT, PodKey("ml/urgent")), 50.0)
        flush(c)
    (interval,) = store.intervals()
    assert (interval.end_reason, interval.preemptor) == (EndReason.EVICTED_PREEMPTION, "ml/urgent")


async def test_telemetry_samples_go_to_open_intervals(tmp_path: Path) -> None:
    cluster = cluster_with(pending=1)
    store = open_ledger(str(tmp_path / "ledger.db"))
    c = controller(cluster, store)
    async with informing(c):
        await c.cycle()
        flush(c)
        assert c.accountant is not None
        at = cluster.clock.now() + 30
        key, stranger = TelemetryPod("ml", "p0"), TelemetryPod("ml", "nobody")
        usage = PodUsage(key, at, ("GPU-1",), 40.0, 0.5, 1024.0)
        other = PodUsage(stranger, at, ("GPU-2",), 90.0, 0.9, 1.0)
        c.accountant.on_page(TelemetryPage("dcgm-exporter", at, {key: usage, stranger: other}, 2))
        later = PodUsage(key, at + 30, ("GPU-1",), 60.0, None, 3072.0)
        c.accountant.on_page(TelemetryPage("dcgm-exporter", at + 30, {key: later}, 1))
        flush(c)
    (interval,) = store.intervals()
    assert interval.gpu_util_mean == pytest.approx(50.0)
    assert interval.sm_active_mean == pytest.approx(0.5)
    assert interval.fb_used_mean_bytes == pytest.approx(2048 * 1024 * 1024)


async def test_a_database_away_buffers_then_writes_everything(tmp_path: Path) -> None:
    cluster = cluster_with(pending=3)
    flaky = Flaky(open_ledger(str(tmp_path / "ledger.db")))
    flaky.down = True
    c = controller(cluster, flaky)
    assert c.accountant is not None
    accountant = c.accountant
    async with informing(c):
        await c._reconcile_ledger(accountant)  # cannot read: goes on in the background
        assert not accountant.reconciled.is_set()
        await c.cycle()
        assert len(bound_pods(cluster)) == 3  # scheduling goes on
        for _ in range(3):
            assert not accountant.writer.flush(force=True)
            await accountant._after_flush()
        assert c.metrics.ledger_buffered._value.get() == 3
        assert c.metrics.ledger_failures._value.get() == 3
        warnings = [e for e in cluster.objects(Kind.EVENT) if e["reason"] == "LedgerWriteFailing"]
        assert len(warnings) == 1  # once per outage
        assert warnings[0]["type"] == "Warning" and warnings[0]["regarding"]["name"] == "c-0"
        flaky.down = False
        await cluster.clock.advance(10)  # the reconciliation's retry
        # The retry reads the ledger in a worker thread, which a loaded machine may run late: give
        # the thread real time between clock steps instead of a fixed number of loop turns.
        for _ in range(1200):
            if accountant.reconciled.is_set():
                break
            await cluster.clock.advance(1)
            await asyncio.wait([asyncio.ensure_future(accountant.reconciled.wait())], timeout=0.1)
        assert accountant.reconciled.is_set()
        assert accountant.writer.flush(force=True)
        await accountant._after_flush()
        assert c.metrics.ledger_buffered._value.get() == 0
        assert c.metrics.ledger_failures._value.get() == 0
    assert len(flaky.store.intervals()) == 3
    assert all(i.ended_at is None for i in flaky.store.intervals())


async def test_a_full_buffer_counts_what_it_drops(tmp_path: Path) -> None:
    cluster = cluster_with(pending=3)
    flaky = Flaky(open_ledger(str(tmp_path / "ledger.db")))
    flaky.down = True
    c = controller(cluster, flaky, buffer_capacity=2)
    async with informing(c):
        await c.cycle()
    assert len(bound_pods(cluster)) == 3
    assert c.metrics.ledger_dropped._value.get() == 1


async def test_over_http_a_database_away_stops_no_binding(tmp_path: Path) -> None:
    from gpufleet.kube.client.lightkube_api import connect
    from gpufleet.kube.client.port import RealClock
    from gpufleet.kube.controller.metrics import ControllerMetrics
    from gpufleet.testing.emulator import ApiServerEmulator

    from .controller_objects import eventually, small_cluster

    flaky = Flaky(open_ledger(str(tmp_path / "ledger.db")))
    flaky.down = True
    async with ApiServerEmulator() as emulator:
        small_cluster(emulator.store, pending=3)
        config = ControllerConfig(identity="c", min_interval=0.0, concurrency=8)
        accounting = AccountingConfig(flush_interval=0.05, reconcile_wait=0.2, event_pod=("gpufleet-system", "c-0"))
        c = Controller(connect(server=emulator.url_text, field_manager="c", timeout=5.0), RealClock(), config,
                       ControllerMetrics(), ledger=flaky, accounting=accounting)
        task = asyncio.create_task(c.run())
        try:
            await eventually(lambda: len(bound_pods(emulator.store)) == 3, what="bound while the database is away")
            await eventually(lambda: c.metrics.ledger_buffered._value.get() == 3
                             and c.metrics.ledger_failures._value.get() >= 2, what="the metrics say so")

            def warnings() -> list[dict[str, Any]]:
                return [e for e in emulator.store.objects(Kind.EVENT) if e["reason"] == "LedgerWriteFailing"]

            await eventually(lambda: len(warnings()) == 1, what="a Warning Event")
            flaky.down = False
            await eventually(lambda: len(flaky.store.intervals()) == 3, what="everything written once back")
            await eventually(lambda: c.metrics.ledger_buffered._value.get() == 0, what="the buffer emptied")
            assert len(warnings()) == 1  # once per outage, not per retry
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await c.api.close()
    assert c.metrics.ledger_dropped._value.get() == 0


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--database", "mysql://db/ledger"], "unsupported database 'mysql'"),
        (["--database", "/no/such/dir/ledger.db"], "the directory '/no/such/dir' does not exist"),
        (["--cost-centre-labels", "team"], "--cost-centre-labels: needs --database"),
        (["--telemetry-exporters", "http://x:9400/metrics"], "--telemetry-exporters: needs --database"),
        (["--database", "{db}", "--telemetry-exporters", "http://x/metrics", "--telemetry-prometheus", "http://p"],
         "give one of them"),
        (["--database", "{db}", "--telemetry-prometheus", "prometheus:9090"], "is not an http:// or https:// URL"),
    ],
)
async def test_bad_ledger_options_are_one_line_and_exit_2(tmp_path: Path, args: list[str], line: str) -> None:
    from click.testing import CliRunner

    from gpufleet.cli import main

    argv = [a.replace("{db}", str(tmp_path / "l.db")) for a in args]
    result = CliRunner().invoke(main, ["controller", "--server", "http://127.0.0.1:1", *argv])
    assert result.exit_code == 2, result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1 and line in lines[0], result.output
    assert "Traceback" not in result.output


class Pages:
    """A telemetry source giving the same pod's usage at each read; fails while ``down``."""

    name = "fake"

    def __init__(self, cluster: FakeCluster, util: float = 30.0) -> None:
        self.cluster = cluster
        self.down = False
        self.reads = 0
        self.util = util

    async def read(self) -> TelemetryPage:
        from gpufleet.telemetry import TelemetryError

        self.reads += 1
        if self.down:
            raise TelemetryError("fake: connection refused")
        at = self.cluster.clock.now()
        key = TelemetryPod("ml", "p0")
        return TelemetryPage(self.name, at, {key: PodUsage(key, at, ("GPU-1",), self.util, 0.3, 10.0)}, 1)

    async def close(self) -> None:
        return None


async def test_the_controller_polls_its_telemetry_source_into_the_ledger(tmp_path: Path) -> None:
    cluster = cluster_with(pending=1)
    store = open_ledger(str(tmp_path / "ledger.db"))
    source = Pages(cluster)
    options = ControllerConfig(identity="c", min_interval=0.0, engine_in_thread=False)
    c = Controller(cluster.client("c"), cluster.clock, options, ledger=store,
                   accounting=AccountingConfig(telemetry_interval=30.0), telemetry=source)
    assert c.accountant is not None and c.telemetry is source
    async with informing(c):
        await c.cycle()
        flush(c)
        source.down = True  # an unreachable source: the poller backs off, nothing stops
        poller = asyncio.create_task(c._poll_telemetry(c.accountant, source))
        for _ in range(10):
            await cluster.clock.advance(1)
        source.down = False
        for _ in range(200):
            await cluster.clock.advance(1)
        # the same pages feed the used-GPU metric: 1 GPU at 30 %
        assert c.gpu_usage is not None
        await c.cycle()
        used = [sample.value for family in text_string_to_metric_families(c.metrics.render().decode())
                for sample in family.samples
                if sample.name == "gpufleet_queue_used_gpus" and sample.labels.get("queue") == "team-a"]
        assert used == [pytest.approx(0.3)]
        poller.cancel()
        await asyncio.gather(poller, return_exceptions=True)
        flush(c)
    assert c.gpu_usage is None  # no poller, no used series
    assert source.reads >= 3
    (interval,) = store.intervals()
    assert interval.samples >= 2 and interval.gpu_util_mean == pytest.approx(30.0)


async def test_an_idle_policy_warns_then_stops_the_idle_pod(tmp_path: Path) -> None:
    """docs/semantics-notes.md, "Idle policy": a Warning Event warnMinutes before the stop, then an
    eviction whose interval ends with reason idle; a pod of a Project without the policy is left alone."""
    cluster = cluster_with(pending=1)
    governed = project("ml-vision", names=["ml"])
    governed["spec"]["idlePolicy"] = {"idleMinutes": 10, "warnMinutes": 3}
    cluster.put(Kind.PROJECT, governed)
    store = open_ledger(str(tmp_path / "ledger.db"))
    source = Pages(cluster, util=1.0)  # 1 %: under the idle threshold
    options = ControllerConfig(identity="c", min_interval=0.0, engine_in_thread=False)
    c = Controller(cluster.client("c"), cluster.clock, options, ledger=store,
                   accounting=AccountingConfig(telemetry_interval=30.0), telemetry=source)
    assert c.accountant is not None

    def events(reason: str) -> list[dict[str, Any]]:
        return [e for e in cluster.objects(Kind.EVENT) if e["reason"] == reason]

    async with informing(c):
        await c.cycle()
        assert bound_pods(cluster) == {"ml/p0": "n0"}
        poller = asyncio.create_task(c._poll_telemetry(c.accountant, source))
        start = cluster.clock.now()
        warned_at = stopped_at = None
        while cluster.clock.now() - start < 20 * 60 and stopped_at is None:
            await cluster.clock.advance(30)
            await c.cycle()
            if warned_at is None and events("IdleWarning"):
                warned_at = cluster.clock.now()
            if events("IdleStopped"):
                stopped_at = cluster.clock.now()
        poller.cancel()
        await asyncio.gather(poller, return_exceptions=True)
        flush(c)
    assert warned_at is not None and stopped_at is not None
    assert stopped_at - warned_at >= 3 * 60  # the full notice
    assert 7 * 60 <= warned_at - start <= 9 * 60  # low since the first sample: 10m - 3m, within a read or two
    (warning,) = events("IdleWarning")
    assert warning["type"] == "Warning" and "project ml-vision stops pods idle for 10m" in warning["note"]
    assert "ml/p0" not in bound_pods(cluster)
    (interval,) = store.intervals()
    assert interval.end_reason is EndReason.IDLE and interval.preemptor is None


async def test_without_an_idle_policy_an_idle_pod_stays(tmp_path: Path) -> None:
    cluster = cluster_with(pending=1)
    cluster.put(Kind.PROJECT, project("ml-vision", names=["ml"]))
    source = Pages(cluster, util=0.0)
    options = ControllerConfig(identity="c", min_interval=0.0, engine_in_thread=False)
    c = Controller(cluster.client("c"), cluster.clock, options, ledger=open_ledger(str(tmp_path / "l.db")),
                   accounting=AccountingConfig(telemetry_interval=30.0), telemetry=source)
    assert c.accountant is not None
    async with informing(c):
        await c.cycle()
        poller = asyncio.create_task(c._poll_telemetry(c.accountant, source))
        for _ in range(60):
            await cluster.clock.advance(30)
            await c.cycle()
        poller.cancel()
        await asyncio.gather(poller, return_exceptions=True)
    assert bound_pods(cluster) == {"ml/p0": "n0"}
    assert not [e for e in cluster.objects(Kind.EVENT) if e["reason"].startswith("Idle")]


@pytest.mark.parametrize("annotate_via", ["binding", "patch"])
async def test_a_binding_retried_after_a_lost_answer_is_one_interval(tmp_path: Path, annotate_via: str) -> None:
    """Over HTTP: the first Binding goes through but its answer is lost and the pod cannot be read back
    (the binding counts as failed); before the watch shows the pod bound, the next cycle binds it again
    (409: already bound, on our node). The pod carries the first attempt's bound time (a Binding that
    is refused sets no annotation), so the ledger must record that one: one interval, which a restart's
    reconciliation leaves as it is (not closed as ``deleted`` and opened again at another time)."""
    from gpufleet.kube.client.lightkube_api import connect
    from gpufleet.kube.client.port import RealClock
    from gpufleet.kube.controller.informers import INFORMED_KINDS, Informer
    from gpufleet.kube.controller.metrics import ControllerMetrics
    from gpufleet.testing.emulator import ApiServerEmulator

    from .controller_objects import eventually, small_cluster

    store = open_ledger(str(tmp_path / "ledger.db"))
    async with ApiServerEmulator() as emulator:
        api_store = emulator.store
        small_cluster(api_store, nodes=1, pending=1)

        def make() -> Controller:
            config = ControllerConfig(identity="c", min_interval=0.0, engine_in_thread=False,
                                      annotate_via=annotate_via)
            return Controller(connect(server=emulator.url_text, field_manager="c", timeout=5.0), RealClock(), config,
                              ControllerMetrics(), ledger=store, accounting=AccountingConfig())

        c = make()
        informers = [asyncio.create_task(Informer(c.api, k, c.cache, c.clock).run()) for k in INFORMED_KINDS]
        try:
            await eventually(lambda: c.ready, what="informers synced")
        finally:  # from here on the cache lags behind the API server (a slow watch)
            for task in informers:
                task.cancel()
            await asyncio.gather(*informers, return_exceptions=True)
        api_store.fail("bind", 0, after_apply=True)  # bound, the answer lost
        api_store.fail("get", 403, kind=Kind.POD)  # and the pod cannot be read back: the binding failed
        first = await c.cycle()
        assert first.bound == () and "ml/p0" in first.failed
        second = await c.cycle()  # the cache still shows the pod pending: decided and bound again
        assert second.bound == ("ml/p0",)
        assert [call.status for call in api_store.calls if call.op == "bind"] == [0, 409, 409]
        flush(c)
        await c.api.close()
        obj = api_store.object(Kind.POD, "ml", "p0")
        assert obj is not None
        stamped = parse_time(obj["metadata"]["annotations"][ANNOTATION_BOUND_AT])
        assert [(i.start.pod_uid, i.start.bound_at) for i in store.intervals()] == [(obj["metadata"]["uid"], stamped)]

        again = make()  # a restart: the ledger reconciled with what the API server shows
        async with informing(again, real_time=True):
            assert again.accountant is not None
            await again._reconcile_ledger(again.accountant)
            flush(again)
        await again.api.close()
    [interval] = store.intervals()
    assert (interval.start.bound_at, interval.ended_at, interval.end_reason) == (stamped, None, None)
