"""The controller carries out consolidation moves (docs/semantics.md, "Consolidation", Controller),
over HTTP against the API server emulator: the moved pod gets ``gpufleet.dev/moved-at`` (and its
PodGroup too, with the gang's age), is evicted with reason ``consolidation`` and a ``Moved`` Event,
the gang the move was for binds where the plan put it, and the moved pod's replacement binds where it
fits; a gang whose PodGroup says it moved within the hour does not move again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from gpufleet.domain import ANNOTATION_CHECKPOINTED, ANNOTATION_MOVED_AT, ANNOTATION_QUEUED_AT
from gpufleet.kube.client.lightkube_api import connect
from gpufleet.kube.client.port import Kind, RealClock
from gpufleet.kube.controller.loop import Controller, ControllerConfig
from gpufleet.kube.controller.metrics import ControllerMetrics
from gpufleet.ledger import EndReason, open_ledger
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import (
    bound_pods,
    caught_up,
    eventually,
    informing_http,
    node,
    pod,
    pod_group,
    queue,
    running_over_http,
)

pytestmark = pytest.mark.asyncio

JsonDict = dict[str, Any]


@pytest_asyncio.fixture
async def emulator() -> AsyncIterator[ApiServerEmulator]:
    async with ApiServerEmulator(store=FakeCluster(graceful_eviction=True)) as server:
        yield server


def config(enabled: bool = True) -> JsonDict:
    return {"apiVersion": "gpufleet.dev/v1alpha1", "kind": "SchedulerConfig", "metadata": {"name": "default"},
            "spec": {"consolidation": {"enabled": enabled}}}


def checkpointed(obj: JsonDict) -> JsonDict:
    obj["metadata"]["annotations"][ANNOTATION_CHECKPOINTED] = "true"
    return obj


def fragmented(store: FakeCluster, group_annotations: dict[str, str] | None = None) -> None:
    """Two 4-GPU nodes with 2 GPUs free on each: m-0 (2 GPUs, checkpointed, PodGroup mover) on n1,
    b (2 GPUs) on n2; w (4 GPUs) pending fits only if m-0 moves to n2."""
    store.put(Kind.NODE, node("n1", 4))
    store.put(Kind.NODE, node("n2", 4))
    store.put(Kind.QUEUE, queue("team-a", 16))
    group = pod_group("mover", 1)
    group["metadata"]["annotations"] = dict(group_annotations or {})
    store.put(Kind.POD_GROUP, group)
    store.put(Kind.POD, checkpointed(pod("m-0", 2, group="mover", node_name="n1", phase="Running", gpu_index="0,1",
                                         created="2026-01-01T00:00:00Z")))
    store.put(Kind.POD, pod("b", 2, node_name="n2", phase="Running", gpu_index="0,1"))
    store.put(Kind.POD, pod("w", 4, created="2026-01-01T00:10:00Z"))


def annotations_of(store: FakeCluster, kind: Kind, name: str) -> dict[str, str]:
    [obj] = [o for o in store.objects(kind) if o["metadata"]["name"] == name]
    return dict(obj["metadata"].get("annotations") or {})


def moved_events(store: FakeCluster) -> list[JsonDict]:
    return [e for e in store.objects(Kind.EVENT) if e.get("reason") == "Moved"]


async def test_a_move_evicts_stamps_and_binds_the_gang_and_the_replacement(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    store.put(Kind.SCHEDULER_CONFIG, config())
    fragmented(store)
    async with running_over_http(emulator):
        await eventually(lambda: any(r.op == "evict" for r in store.calls), what="an eviction")
        evictions = [r for r in store.calls if r.op == "evict"]
        assert [(r.namespace, r.name) for r in evictions] == [("ml", "m-0")]
        # The pod's own moved-at was written before its eviction.
        writes = [(r.op, r.kind, r.name) for r in store.calls if r.op in ("patch", "evict") and r.name == "m-0"]
        assert writes == [("patch", Kind.POD, "m-0"), ("evict", Kind.POD, "m-0")], writes
        assert annotations_of(store, Kind.POD, "m-0")[ANNOTATION_MOVED_AT].startswith("20")
        # The move's history is on the PodGroup too, which outlives the pod, with the gang's age.
        group = annotations_of(store, Kind.POD_GROUP, "mover")
        assert group[ANNOTATION_MOVED_AT] == annotations_of(store, Kind.POD, "m-0")[ANNOTATION_MOVED_AT]
        assert group[ANNOTATION_QUEUED_AT].startswith("2026-01-01T00:00:00")
        await eventually(lambda: len(moved_events(store)) == 1, what="a Moved event")
        event = moved_events(store)[0]
        assert event["regarding"]["name"] == "m-0" and event["type"] == "Normal"
        assert "consolidation" in event["note"] and "ml/w" in event["note"] and "node n2" in event["note"]
        assert "ml/w" not in bound_pods(store)  # w waits for the moved pod to go (a plan)
        store.delete(Kind.POD, "ml", "m-0")  # its grace ends
        await eventually(lambda: bound_pods(store).get("ml/w") == "n1", what="w bound on n1")
        # The owner makes a replacement: it binds where it fits (n2, the plan's target).
        store.put(Kind.POD, checkpointed(pod("m-1", 2, group="mover", created="2026-01-01T01:00:00Z")))
        await eventually(lambda: bound_pods(store).get("ml/m-1") == "n2", what="the replacement bound on n2")
    assert bound_pods(store)["ml/b"] == "n2"


async def test_a_gang_moved_within_the_hour_does_not_move_again(emulator: ApiServerEmulator) -> None:
    """The PodGroup's history (the replacement pods have none of their own) keeps the limit of one
    move per pod per hour: w waits, nothing is evicted."""
    store = emulator.store
    store.put(Kind.SCHEDULER_CONFIG, config())
    fragmented(store, {ANNOTATION_MOVED_AT: "2099-01-01T00:00:00Z"})  # a future entry counts as a move
    async with running_over_http(emulator) as c:
        await eventually(lambda: c.last is not None and not c.last.skipped, what="a cycle")
        assert c.last is not None
        assert [p.pod for p in c.last.decisions.pending] == ["ml/w"]
    assert not [r for r in store.calls if r.op == "evict"]
    assert "ml/w" not in bound_pods(store)


async def test_with_consolidation_off_nothing_moves(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    store.put(Kind.SCHEDULER_CONFIG, config(enabled=False))
    fragmented(store)
    async with running_over_http(emulator) as c:
        await eventually(lambda: c.last is not None and not c.last.skipped, what="a cycle")
        assert c.last is not None
        assert c.last.decisions.moves is None
        assert [p.pod for p in c.last.decisions.pending] == ["ml/w"]
    assert not [r for r in store.calls if r.op == "evict"]
    assert bound_pods(store)["ml/m-0"] == "n1"


async def test_the_moved_pods_ledger_interval_ends_moved(emulator: ApiServerEmulator, tmp_path: Path) -> None:
    store = emulator.store
    ledger = open_ledger(str(tmp_path / "ledger.db"))
    store.put(Kind.SCHEDULER_CONFIG, config())
    fragmented(store)
    options = ControllerConfig(identity="c", min_interval=0.0, concurrency=16, engine_in_thread=False,
                               scheduled_events=False)
    c = Controller(connect(server=emulator.url_text, field_manager="c", timeout=5.0), RealClock(), options,
                   ControllerMetrics(), ledger=ledger)
    async with informing_http(c):
        await caught_up(c, store)
        assert c.accountant is not None  # the running pods' intervals opened, as at a start
        await c.accountant.reconcile(c.snapshot, lambda: c.cache.objects(Kind.POD))
        result = await c.cycle()
        assert [(e.pod, e.reason.value, e.by) for e in result.decisions.evictions] == [
            ("ml/m-0", "consolidation", "ml/w")]
        assert [o.result for o in result.evicted] == ["evicted"]
        assert c.accountant is not None and c.accountant.writer.flush(force=True)
    ended = {i.start.pod_name: (i.end_reason, i.preemptor) for i in ledger.intervals() if i.end_reason is not None}
    assert ended == {"m-0": (EndReason.MOVED, "ml/w")}
