"""kill -9 during a burst of bindings loses no ledger interval and double-counts none.

The real ``gpufleet controller --database FILE`` runs as a child process against the HTTP API server
emulator (in this process); it is killed with SIGKILL in the middle of its burst of bindings, some
pods end or go away while it is down, and it is started again: after its reconciliation the SQLite
ledger holds exactly one interval per bound pod, with the bound time the pod's binding carries, and
none open for the pods that finished. ``GPUFLEET_LEDGER_CRASH_PODS`` sets the burst (400 by default;
the issue's figure: ``GPUFLEET_LEDGER_CRASH_PODS=10000``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.accounting import ANNOTATION_BOUND_AT, parse_time
from gpufleet.ledger import EndReason, open_ledger, to_micros
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import node, pod, queue

PODS = int(os.environ.get("GPUFLEET_LEDGER_CRASH_PODS", "400"))
LIMIT = 60.0 + PODS / 40  # seconds for each phase, generous on a loaded machine

pytestmark = pytest.mark.asyncio


def load(store: FakeCluster, pods: int) -> None:
    store.log_calls = False
    for i in range((pods + 7) // 8):
        store.put(Kind.NODE, node(f"n{i:05d}"))
    store.put(Kind.QUEUE, queue("team-a"))


def add_pods(store: FakeCluster, first: int, last: int) -> None:
    for i in range(first, last):
        store.put(Kind.POD, pod(f"p{i:05d}"))


def bound(store: FakeCluster) -> list[dict[str, Any]]:
    return [p for p in store.objects(Kind.POD) if (p.get("spec") or {}).get("nodeName")]


def kill_at(store: FakeCluster, process: asyncio.subprocess.Process, count: int, since: str) -> None:
    """SIGKILL ``process`` as the API server accepts the ``count``-th binding of a pod named ``since``
    or later (in the burst)."""
    seen: set[str] = set()
    emit = store._emit

    def counting(kind: Kind, event_type: str, obj: dict[str, Any]) -> None:
        emit(kind, event_type, obj)
        name = obj["metadata"]["name"]
        if kind is Kind.POD and name >= since and (obj.get("spec") or {}).get("nodeName") and len(seen) < count:
            seen.add(name)
            if len(seen) == count:
                os.kill(process.pid, signal.SIGKILL)

    store._emit = counting  # type: ignore[method-assign]


async def start(url: str, database: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpufleet", "controller", "--server", url, "--no-leader-elect", "--metrics-port", "0",
        "--min-interval", "0", "--log-level", "warning", "--database", str(database),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )


async def wait_for(what: str, condition: Any, process: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + LIMIT
    while not condition():
        if process.returncode is not None:
            raise AssertionError(f"the controller stopped: {(await process.communicate())[1].decode()[-2000:]}")
        assert time.monotonic() < deadline, f"{what}: not within {LIMIT:.0f} s"
        await asyncio.sleep(0.05)


async def test_kill_9_during_a_burst_loses_no_interval_and_double_counts_none(tmp_path: Path) -> None:
    database = tmp_path / "ledger.db"
    ledger = open_ledger(str(database))  # created before, read by the test throughout
    async with ApiServerEmulator() as emulator:
        store = emulator.store
        load(store, PODS)
        half = PODS // 2
        add_pods(store, 0, half)
        first = await start(emulator.url_text, database)
        try:
            # A first burst, written; then a second one, killed in its middle.
            await wait_for("the first burst written", lambda: len(ledger.intervals()) == half, first)
            kill_at(store, first, PODS // 6, f"p{half:05d}")
            add_pods(store, half, PODS)
            await asyncio.wait_for(first.wait(), LIMIT)
        finally:
            if first.returncode is None:
                first.kill()
                await first.wait()
        store._emit = FakeCluster._emit.__get__(store)  # type: ignore[method-assign]
        killed_at = len(bound(store))
        assert killed_at < PODS, "the burst was over before the kill: nothing tested"
        in_ledger = len(ledger.intervals())
        print(f"killed with {killed_at} of {PODS} pods bound, {in_ledger} intervals written")
        # While it is down some bound pods finish (the API server still shows them, Succeeded).
        done = bound(store)[:5]
        for obj in done:
            store.set_pod_phase("ml", obj["metadata"]["name"], "Succeeded")
        second = await start(emulator.url_text, database)
        try:
            await wait_for("every pod bound", lambda: len(bound(store)) == PODS, second)
            bindings = {obj["metadata"]["uid"]: parse_time(obj["metadata"]["annotations"][ANNOTATION_BOUND_AT]) or -1
                        for obj in bound(store)}
            # Once it runs again, some go away (their intervals close as deleted).
            gone = [obj for obj in bound(store) if obj["status"].get("phase") != "Succeeded"][:5]
            for obj in gone:
                store.delete(Kind.POD, "ml", obj["metadata"]["name"])
            done += gone
            finished = {obj["metadata"]["uid"] for obj in done}

            def settled() -> bool:
                intervals = ledger.intervals()
                return len(intervals) >= PODS and all(i.ended_at is not None for i in intervals
                                                      if i.start.pod_uid in finished)

            try:
                await wait_for("the ledger written", settled, second)
            except AssertionError:
                got = ledger.intervals()
                second.send_signal(signal.SIGTERM)
                _, err = await asyncio.wait_for(second.communicate(), 30)
                raise AssertionError(f"{len(got)} intervals, {sum(1 for i in got if i.start.pod_uid in finished)} "
                                     f"finished, killed at {killed_at}: {err.decode()[-3000:]}") from None
            second.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(second.communicate(), 30)
        finally:
            if second.returncode is None:
                second.kill()
                await second.wait()
    assert "Traceback" not in err.decode(), err.decode()[-2000:]
    intervals = ledger.intervals()
    uids = [i.start.pod_uid for i in intervals]
    assert len(uids) == len(set(uids)) == PODS  # one interval per bound pod: none lost, none twice
    assert {uid: to_micros(b) for uid, b in bindings.items()} == {
        i.start.pod_uid: to_micros(i.start.bound_at) for i in intervals}
    reasons = {i.start.pod_uid: i.end_reason for i in intervals}
    assert sorted(reasons[o["metadata"]["uid"]] or "" for o in done) == [EndReason.COMPLETED] * 5 + [
        EndReason.DELETED] * 5
    assert sum(1 for i in intervals if i.ended_at is None) == PODS - 10
