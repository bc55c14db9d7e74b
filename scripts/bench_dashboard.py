"""The dashboard's server time and HTML size per page on a large cluster (issue 18's speed target:
under 300 ms and under 2 MB a page at 5,000 nodes, 40,000 pods, 200 queues).

    .venv/bin/python scripts/bench_dashboard.py [--nodes 5000] [--repeat 5]

The snapshot is ``gpufleet.testing.dashboard_snapshot.big_snapshot``; a usage ledger (SQLite, in a
temporary directory) gets one allocation interval per running pod. The source is decided once (the
build time is printed apart); each page is then requested ``--repeat`` times through Starlette's test
client (the whole ASGI app: routing, view model, template), and the median and worst are printed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from starlette.testclient import TestClient

from gpufleet.ledger import IntervalStart, open_ledger
from gpufleet.testing.dashboard_snapshot import big_snapshot
from gpufleet.web import SnapshotSource, create_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    started = time.perf_counter()
    snapshot = big_snapshot(nodes=args.nodes)
    print(f"snapshot: {len(snapshot.nodes):,} nodes, {len(snapshot.pods):,} pods, {len(snapshot.queues)} queues "
          f"({time.perf_counter() - started:.1f} s)")
    with tempfile.TemporaryDirectory() as tmp:
        store = open_ledger(str(Path(tmp) / "ledger.db"))
        now = snapshot.config.now or time.time()
        starts = [IntervalStart(pod_uid=f"uid-{p.key}", bound_at=p.start_time or now - 3600, namespace=p.namespace,
                                pod_name=p.name, queue=str(p.queue_label), node=str(p.node_name),
                                gpus=(p.gpu_blocks or 0) / 100 if p.gpu_blocks else p.whole_gpus,
                                project=p.namespace, submitter=p.submitted_by, created_at=p.creation_time)
                  for p in snapshot.pods if p.node_name]
        store.write(starts)
        source = SnapshotSource(snapshot, "big", ledger=store, clock=lambda: now)
        client = TestClient(create_app(source))
        started = time.perf_counter()
        client.get("/healthz")
        client.get("/queues")  # the first request decides the snapshot (Fleet.build)
        print(f"decided and indexed once: {time.perf_counter() - started:.1f} s")
        fleet = client.app.state.source._fleet  # type: ignore[attr-defined]
        pending = next(j.key for j in fleet.jobs if j.state == "pending" and j.decision == "pending")
        pages = ["/cluster", "/cluster?by=pool", "/cluster/group?by=rack&key=rack-000", "/queues", "/jobs",
                 "/jobs?state=pending&queue=org-00-team-0", "/jobs?q=gang-01", f"/jobs/{pending}",
                 "/usage?since=2025-12-01&group=project", "/usage?since=2025-12-01&group=user",
                 "/usage.csv?since=2025-12-01&group=queue", "/whatif"]
        print(f"{'page':48} {'median ms':>10} {'max ms':>8} {'KiB':>8}")
        for page in pages:
            times, size = [], 0
            for _ in range(args.repeat):
                t = time.perf_counter()
                response = client.get(page)
                times.append((time.perf_counter() - t) * 1000)
                assert response.status_code == 200, (page, response.status_code, response.text[:200])
                size = len(response.content)
            print(f"{page:48} {statistics.median(times):10.1f} {max(times):8.1f} {size / 1024:8.1f}")
        store.close()


if __name__ == "__main__":
    main()
