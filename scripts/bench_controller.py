#!/usr/bin/env python
"""End-to-end throughput of ``gpufleet controller`` over HTTP, against the API server emulator.

The emulator (gpufleet.testing.emulator: kmock's HTTP side over the in-memory store) runs in a child
process, as an API server runs apart from its clients, loaded with the objects of a bench shape
(``gpufleet.bench.shapes.make_shape``; ``basic``: 5,000 nodes, 1,000 running and 10,000 pending
pods). The controller (the real lightkube adapter) then starts cold: lists and watches everything,
runs its cycles, and binds. The clock stops when the controller's own cache (fed by its watches)
shows every pod bound: that is pods bound per second end to end. The emulator's call log gives the
API calls per binding and checks that each pod was bound exactly once.

    .venv/bin/python scripts/bench_controller.py --shape basic --repeat 3
    .venv/bin/python scripts/bench_controller.py --emulator inprocess   # on the controller's event loop
    .venv/bin/python scripts/bench_controller.py --profile /tmp/p       # cProfile: /tmp/p.controller, /tmp/p.emulator
    .venv/bin/python scripts/bench_controller.py --profile /tmp/p.pyi   # pyinstrument samples of the controller

Besides pods/s: the controller process's CPU seconds (``time.process_time``, the engine's thread
included) in all and per pod, at the marks (synced, decided, every pod bound, the Scheduled Events
posted), and the CPU of two more cycles once everything is bound: the first converts the pods the
bindings changed, the second (``idle_cycle_cpu_s``) is a cycle over the whole cache where nothing
changed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import statistics
import time
from collections import Counter
from multiprocessing.connection import Connection
from typing import Any


def _loaded_store(shape: str, scale: float) -> Any:
    """The emulator's store with the shape's objects (its call log then cleared)."""
    from gpufleet.adapters.k8s_yaml_writer import snapshot_to_documents
    from gpufleet.bench.shapes import make_shape
    from gpufleet.kube import Kind
    from gpufleet.testing.fake_cluster import FakeCluster

    kinds = {k.kind: k for k in Kind}
    store = FakeCluster()
    store.log_calls = False
    for doc in snapshot_to_documents(make_shape(shape, scale=scale)):
        store.put(kinds[doc["kind"]], doc)
    store.calls.clear()
    store.log_calls = True
    return store


def _server_stats(store: Any, emulator: Any, cpu_s: float) -> dict[str, Any]:
    from gpufleet.kube import Kind

    ops = Counter(c.op for c in store.calls)
    binds = Counter(c.name for c in store.calls if c.op == "bind" and c.status == 201)
    bound = sum(1 for p in store.objects(Kind.POD) if (p.get("spec") or {}).get("nodeName"))
    return {"ops": dict(ops), "bound_pods": bound, "bound_twice": sum(1 for n in binds.values() if n > 1),
            "requests": len(emulator._requests), "cpu_s": round(cpu_s, 2)}


def _serve(shape: str, scale: float, conn: Connection, profile_to: str | None = None) -> None:
    """Child process: the API server emulator with the shape's objects."""
    from gpufleet.testing.emulator import ApiServerEmulator

    async def main() -> None:
        store = _loaded_store(shape, scale)
        async with ApiServerEmulator(store=store) as emulator:
            if profile_to:
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()
            cpu0 = time.process_time()
            conn.send(emulator.url_text)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, conn.recv)  # "stop"
            cpu = time.process_time() - cpu0
            if profile_to:
                profiler.disable()
                profiler.dump_stats(profile_to)
            conn.send(_server_stats(store, emulator, cpu))

    asyncio.run(main())


async def _control(
    url: str, concurrency: int, http: str, expected_bound: int, manager: str | None, annotate: str,
    scheduled_events: bool = True, engine_in_thread: bool = True, database: str | None = None,
) -> dict[str, Any]:
    from gpufleet.kube import Controller, ControllerConfig, Kind, RealClock, connect

    api = connect(server=url, field_manager=manager, fast_http=http == "aiohttp", concurrency=concurrency,
                  timeout=60.0, list_chunk_size=None)
    config = ControllerConfig(identity="bench", min_interval=0.0, concurrency=concurrency, annotate_via=annotate,
                              scheduled_events=scheduled_events, engine_in_thread=engine_in_thread)
    ledger: dict[str, Any] = {}
    if database:  # the usage ledger on (a fresh file each run)
        from gpufleet.ledger import open_ledger

        ledger = {"ledger": open_ledger(database)}
    controller = Controller(api, RealClock(), config, **ledger)
    bound = {"pods": 0}
    done = asyncio.Event()

    def count(kind: Kind, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        # Counted as the watch events arrive: polling 11,000 cached pods would cost the controller's CPU.
        if kind is Kind.POD:
            was = bool(old and (old.get("spec") or {}).get("nodeName"))
            now = bool(new and (new.get("spec") or {}).get("nodeName"))
            bound["pods"] += int(now) - int(was)
            if bound["pods"] >= expected_bound:
                done.set()

    controller.cache.hooks.append(count)
    cpu0, t0 = time.process_time(), time.perf_counter()
    task = asyncio.create_task(controller.run())
    marks: dict[str, float] = {}
    cpu_marks: dict[str, float] = {}  # the controller process's CPU seconds at the same marks
    while not (done.is_set() and controller.ready):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(done.wait()), 0.05)
        now = time.perf_counter() - t0
        if "synced" not in marks and controller.ready:
            marks["synced"] = now
            cpu_marks["synced_cpu_s"] = round(time.process_time() - cpu0, 2)
        if "decided" not in marks and controller.cycles and controller.binder.inflight:
            marks["decided"] = now
            cpu_marks["decided_cpu_s"] = round(time.process_time() - cpu0, 2)
        if task.done():
            task.result()
            raise RuntimeError("the controller stopped")
        if now > 600:
            raise RuntimeError(f"only {bound['pods']} of {expected_bound} bound after 600 s")
    marks["bound"] = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    # The Scheduled Events follow the bindings (in the background): their CPU counted apart.
    await controller.drain_events()
    cpu_marks["with_events_cpu_s"] = round(time.process_time() - cpu0, 2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    cycles = controller.cycles
    # Two more cycles (the informers stopped), nothing pending: the first converts the pods the
    # bindings changed; the second is what a cycle's snapshot, checks and reports cost over the
    # whole cache when nothing changed.
    for mark in ("next_cycle_cpu_s", "idle_cycle_cpu_s"):
        cycle0 = time.process_time()
        await controller.cycle()
        cpu_marks[mark] = round(time.process_time() - cycle0, 3)
    engine = controller.metrics.engine_duration.collect()[0].samples
    engine_s = next(s.value for s in engine if s.name.endswith("_sum"))
    await api.close()
    if controller.accountant is not None:  # every interval written (after the clock stopped)
        controller.accountant.writer.flush(force=True)
        cpu_marks["ledger_written"] = controller.accountant.writer.status.written
    return {**marks, "controller_cpu_s": round(cpu, 2), "engine_s": round(engine_s, 2), **cpu_marks,
            "client_calls": controller.binder.calls, "cycles": cycles}


async def _control_inprocess(shape: str, scale: float, *args: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The emulator on the controller's own event loop (as the contract tests run it): the
    controller's CPU figures then include the emulator's."""
    from gpufleet.testing.emulator import ApiServerEmulator

    store = _loaded_store(shape, scale)
    async with ApiServerEmulator(store=store) as emulator:
        result = await _control(emulator.url_text, *args)
        return result, _server_stats(store, emulator, float("nan"))


def run_once(shape: str, scale: float, concurrency: int, http: str, profile: str | None = None,
             manager: str | None = "gpufleet", annotate: str = "patch",
             scheduled_events: bool = True, emulator: str = "process", database: str | None = None) -> dict[str, Any]:
    from gpufleet.bench.shapes import make_shape

    snapshot = make_shape(shape, scale=scale)
    pending = sum(1 for p in snapshot.pods if p.ours and p.node_name is None)
    already = sum(1 for p in snapshot.pods if p.node_name is not None)
    # Profiled: the engine on the event loop's thread, where cProfile sees it (and no GIL handover
    # between the two threads is charged to whatever the loop was running).
    if database:
        import os

        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(database + suffix)
    args = (concurrency, http, pending + already, manager, annotate, scheduled_events, not profile, database)
    profiler: Any = None
    if profile and profile.endswith(".pyi"):  # sampled (pyinstrument): shares of CPU, not call counts
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005, async_mode="disabled")
        profiler.enable = profiler.start
        profiler.disable = profiler.stop
    elif profile:
        import cProfile

        profiler = cProfile.Profile()
    if emulator == "inprocess":
        if profiler is not None:
            profiler.enable()
        result, stats = asyncio.run(_control_inprocess(shape, scale, *args))
        if profiler is not None:
            profiler.disable()
    else:
        parent, child = multiprocessing.Pipe()
        server = multiprocessing.Process(target=_serve, args=(shape, scale, child, profile and profile + ".emulator"),
                                         daemon=True)
        server.start()
        url = parent.recv()
        try:
            if profiler is not None:
                profiler.enable()
            result = asyncio.run(_control(url, *args))
            if profiler is not None:
                profiler.disable()
        finally:
            parent.send("stop")
            stats = parent.recv() if parent.poll(60) else {}
            server.join(10)
    if profiler is not None and profile and profile.endswith(".pyi"):
        with open(profile + ".controller.txt", "w") as out:
            out.write(profiler.output_text(unicode=False, color=False, show_all=False))
    elif profiler is not None and profile:
        profiler.dump_stats(profile + ".controller")
    ops = stats.get("ops", {})
    binds = ops.get("bind", 0)
    writes = sum(n for op, n in ops.items() if op not in ("list", "watch"))
    cpu = result["controller_cpu_s"]
    return {
        "shape": shape, "scale": scale, "http": http, "annotate": annotate, "concurrency": concurrency, "pods": pending,
        "scheduled_events": scheduled_events, "emulator": emulator, "ledger": bool(database),
        "ledger_written": result.get("ledger_written"),
        "seconds": round(result["bound"], 2),
        "pods_per_s": round(pending / result["bound"], 1),
        "bind_phase_pods_per_s": round(pending / (result["bound"] - result.get("decided", 0.0)), 1),
        "synced_s": round(result.get("synced", 0.0), 2), "decided_s": round(result.get("decided", 0.0), 2),
        "engine_s": result["engine_s"], "controller_cpu_s": cpu,
        "controller_cpu_ms_per_pod": round(1000 * cpu / pending, 3),
        "synced_cpu_s": result.get("synced_cpu_s"), "decided_cpu_s": result.get("decided_cpu_s"),
        "with_events_cpu_s": result.get("with_events_cpu_s"), "next_cycle_cpu_s": result.get("next_cycle_cpu_s"),
        "idle_cycle_cpu_s": result.get("idle_cycle_cpu_s"),
        "emulator_cpu_s": stats.get("cpu_s"),
        "api_calls": ops, "api_calls_per_binding": round(writes / binds, 3) if binds else None,
        "server_bound": stats.get("bound_pods"), "bound_twice": stats.get("bound_twice"), "cycles": result["cycles"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="basic")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--http", choices=["aiohttp", "httpx"], default="aiohttp")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--annotate-via", choices=["patch", "binding"], default="patch",
                        help="patch: annotate, then bind (2 calls); binding: annotations carried by the Binding")
    parser.add_argument("--field-manager", default="gpufleet", help="'' for none")
    parser.add_argument("--profile", metavar="PREFIX",
                        help="cProfile stats of the controller (PREFIX.controller; with the emulator in-process, "
                             "both) and of the emulator's process (PREFIX.emulator); a PREFIX ending in .pyi: "
                             "pyinstrument's samples of the controller instead (PREFIX.controller.txt)")
    parser.add_argument("--emulator", choices=["process", "inprocess"], default="process",
                        help="process: the emulator in a child process (default); inprocess: on the controller's "
                             "event loop, as the contract tests run it")
    parser.add_argument("--no-scheduled-events", dest="scheduled_events", action="store_false",
                        help="without the Scheduled Event of each bound pod")
    parser.add_argument("--database", metavar="FILE",
                        help="the usage ledger on, in this SQLite file (made afresh each run)")
    parser.add_argument("--ledger-ab", action="store_true",
                        help="interleave runs with the ledger off and on (--database names its file): "
                             "medians of each and their ratio")
    args = parser.parse_args()
    if args.ledger_ab and not args.database:
        parser.error("--ledger-ab needs --database FILE")
    plan = [None, args.database] * args.repeat if args.ledger_ab else [args.database] * args.repeat
    runs = []
    for database in plan:
        run = run_once(args.shape, args.scale, args.concurrency, args.http, args.profile, args.field_manager or None,
                       args.annotate_via, args.scheduled_events, args.emulator, database)
        runs.append(run)
        print(json.dumps(run), flush=True)
    for ledger in sorted({r["ledger"] for r in runs}):
        chosen = [r for r in runs if r["ledger"] == ledger]
        if len(chosen) > 1:
            print(json.dumps({"ledger": ledger, "median_pods_per_s": statistics.median(r["pods_per_s"] for r in chosen),
                              "median_seconds": statistics.median(r["seconds"] for r in chosen),
                              "median_controller_cpu_s": statistics.median(r["controller_cpu_s"] for r in chosen)}))
    if args.ledger_ab and len(runs) > 1:
        off = statistics.median(r["pods_per_s"] for r in runs if not r["ledger"])
        on = statistics.median(r["pods_per_s"] for r in runs if r["ledger"])
        print(json.dumps({"ledger_on_over_off_pods_per_s": round(on / off, 3)}))


if __name__ == "__main__":
    main()
