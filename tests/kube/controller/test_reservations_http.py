"""Reservations (docs/semantics.md, "Reservation and backfill") in a live cluster, over HTTP against the
API server emulator: the controller writes a gang's reservation in its Queue's status and drops it once
the gang is placed; ``gpufleet explain`` names it (nodes, start). The controller's clock is injected
(its time moves only when the test says); nothing waits on it."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.domain import ReservationConfig, SchedulerConfig, Snapshot
from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.convert import SnapshotView
from gpufleet.kube.controller.loop import Controller
from gpufleet.kube.controller.observed_runtime import ObservedRuntimes
from gpufleet.kube.inspect.explain import explain_in_cluster
from gpufleet.testing.emulator import ApiServerEmulator

from .controller_objects import SetClock, bound_pods, eventually, node, pod, priority_class, queue, running_over_http

START = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def running_pod(name: str, gpus: int, node_name: str, gpu_index: str, runtime: str) -> dict[str, Any]:
    out = pod(name, gpus, node_name=node_name, phase="Running", gpu_index=gpu_index)
    out["metadata"]["annotations"]["gpufleet.dev/expected-runtime"] = runtime
    return out


def reservations(emulator: ApiServerEmulator, name: str) -> Any:
    return ((emulator.store.object(Kind.QUEUE, "", name) or {}).get("status") or {}).get("reservations")


RESERVED = [{"gang": "ml/big", "nodes": ["n0"], "start": "2026-01-01T01:00:00Z", "gpus": 8}]


@pytest.mark.asyncio
async def test_the_queue_status_and_explain_name_a_waiting_gangs_reservation(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    store.put(Kind.NODE, node("n0", 8))
    store.put(Kind.NODE, node("n1", 8))
    store.put(Kind.QUEUE, queue("team-a", 16))
    store.put(Kind.SCHEDULER_CONFIG, {"metadata": {"name": "default"}, "spec": {"reservation": {"after": "15m"}}})
    # Half of each node runs until 01:00 (n0) and 02:00 (n1): the 8-GPU pod fits on n0 first.
    store.put(Kind.POD, running_pod("short", 4, "n0", "0,1,2,3", "1h"))
    store.put(Kind.POD, running_pod("long", 4, "n1", "0,1,2,3", "2h"))
    clock = SetClock(START + 1800)  # the gang has waited 30 minutes: over `after`
    async with running_over_http(emulator, clock, resync=0.02) as c:
        store.put(Kind.POD, pod("big", 8))
        await eventually(lambda: reservations(emulator, "team-a") == RESERVED, what="the reservation in the status")
        assert c.metrics.reserved_gpus._value.get() == 8
        explained = await explain_in_cluster(c.api, "ml", "big", now=START + 1800)
        assert explained.report["reservation"] == {"nodes": ["n0"], "start": "2026-01-01T01:00:00Z", "gpus": 8}
        assert ("Its gang holds a reservation (docs/semantics.md, \"Reservation and backfill\"): 8 GPUs on node n0, "
                "expected to fit there from 2026-01-01T01:00:00Z.") in explained.lines
        # Without a time the rule is off: no reservation to name.
        assert (await explain_in_cluster(c.api, "ml", "big")).report["reservation"] is None
        # A small pod that does not say it ends by 01:00 is kept off the reserved node (not preemptible:
        # priority 100 and up); it takes n1's free GPUs instead.
        small = pod("small", 2, priority_class="prod", created="2026-01-01T00:20:00Z")
        store.put(Kind.PRIORITY_CLASS, priority_class("prod", 1000))
        store.put(Kind.POD, small)
        await eventually(lambda: bound_pods(store).get("ml/small") == "n1", what="small bound beside the reservation")
        store.delete(Kind.POD, "ml", "short")  # n0 frees: the gang is placed and its reservation gone
        await eventually(lambda: bound_pods(store).get("ml/big") == "n0", what="big bound")
        await eventually(lambda: reservations(emulator, "team-a") is None, what="the reservation dropped")


def decided_pending(c: Controller, key: str) -> bool:
    return c.last is not None and any(p.pod == key for p in c.last.decisions.pending)


@pytest.mark.asyncio
async def test_the_controller_observes_runtimes_so_reservations_work_without_annotations(
        emulator: ApiServerEmulator) -> None:
    """No pod declares a runtime: with nothing observed, a running pod is never expected to end and no
    reservation is made; once a pod of the queue succeeds after an hour, the queue's observed runtime is an
    hour and the waiting gang reserves the node from the running pod's start plus that hour."""
    store = emulator.store
    store.put(Kind.NODE, node("n0", 8))
    store.put(Kind.QUEUE, queue("team-a", 16))
    store.put(Kind.SCHEDULER_CONFIG, {"metadata": {"name": "default"},
                                      "spec": {"reservation": {"after": "15m", "percentile": 50}}})
    first = pod("first", 4, node_name="n0", phase="Running", gpu_index="0,1,2,3", created="2025-12-31T22:00:00Z")
    store.put(Kind.POD, first)
    store.put(Kind.POD, pod("second", 4, node_name="n0", phase="Running", gpu_index="4,5,6,7"))
    clock = SetClock(START + 1800)
    async with running_over_http(emulator, clock, resync=0.02) as c:
        store.put(Kind.POD, pod("big", 8))
        await eventually(lambda: decided_pending(c, "ml/big"), what="big decided pending")
        assert c.last is not None and c.last.decisions.reservations == ()
        assert c.observed_runtime.percentiles(50) == {}
        done = {**first, "status": {"phase": "Succeeded", "startTime": "2025-12-31T22:00:00Z", "containerStatuses": [
            {"name": "main", "state": {"terminated": {"exitCode": 0, "finishedAt": "2025-12-31T23:00:00Z"}}}]}}
        store.put(Kind.POD, done)
        await eventually(lambda: c.observed_runtime.percentiles(50) == {"team-a": 3600.0}, what="runtime observed")
        reserved = [{"gang": "ml/big", "nodes": ["n0"], "start": "2026-01-01T01:00:00Z", "gpus": 8}]
        await eventually(lambda: reservations(emulator, "team-a") == reserved, what="reserved from second's end")


def test_observed_runtimes_take_the_percentile_of_the_last_pods_and_the_config_wins() -> None:
    counters = ObservedRuntimes(keep=4)
    for seconds in (100.0, 200.0, 300.0, 400.0, 500.0):  # the first falls out of the last 4
        counters.record("a", seconds)
    counters.record("b", 60.0)
    assert counters.percentiles(50) == {"a": 300.0, "b": 60.0}
    assert counters.percentiles(100) == {"a": 500.0, "b": 60.0}
    assert counters.percentiles(1) == {"a": 200.0, "b": 60.0}
    def view(config: SchedulerConfig) -> SnapshotView:
        return SnapshotView(Snapshot(config=config), {}, {}, {}, {}, ())

    configured = SchedulerConfig(reservation=ReservationConfig(after=60.0, percentile=50, observed_runtime={"a": 5.0}))
    filled = counters.fill(view(configured)).snapshot.config.reservation
    assert filled is not None and dict(filled.observed_runtime) == {"a": 5.0, "b": 60.0}  # the config's wins
    off = view(SchedulerConfig())
    assert counters.fill(off) is off
