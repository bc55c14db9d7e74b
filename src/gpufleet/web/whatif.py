"""The What-if page's work: the simulator (``gpufleet simulate run``'s own ``prepare``-less path:
:func:`gpufleet.sim.simulate`, :func:`gpufleet.sim.compute_metrics`, :func:`gpufleet.sim.summary_rows`)
run twice, before and after one change (a queue's GPU quota or weight, or nodes added), in a worker
thread; the page polls the run by its id.

The workload: the usage ledger's allocations of the last N days when a ledger is given (each
interval a job: submitted when created, running as long as it held its GPUs), else the snapshot's
jobs (each gang a job, submitted at its creation time, running :data:`SNAPSHOT_JOB_S`). The cluster:
the snapshot's nodes (plus those added). The queues: the snapshot's (the one changed in the after run).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.adapters.traces.records import TraceJob
from gpufleet.domain import GPU, LABEL_GPU_PRODUCT, MILLI, Node, NodeName, QueueName, QueueResource, Snapshot
from gpufleet.web.fleet import Fleet

__all__ = ["SNAPSHOT_JOB_S", "Change", "WhatIfRun", "WhatIfRunner", "workload"]

SNAPSHOT_JOB_S = 3600.0  # how long a snapshot's job runs in the what-if (the snapshot does not say)
MAX_ADDED_NODES = 1000
MAX_JOBS = 20_000  # the newest are kept when the workload is larger


@dataclass(frozen=True, slots=True)
class Change:
    """One what-if: a queue's GPU quota (GPUs) and weight, and nodes added."""

    queue: str = ""
    quota_gpus: float | None = None
    weight: float | None = None
    add_nodes: int = 0
    node_gpus: int = 8
    node_model: str = ""

    def describe(self) -> str:
        parts = []
        if self.queue and self.quota_gpus is not None:
            parts.append(f"queue {self.queue}: GPU quota {self.quota_gpus:g}")
        if self.queue and self.weight is not None:
            parts.append(f"queue {self.queue}: weight {self.weight:g}")
        if self.add_nodes:
            parts.append(f"{self.add_nodes} node(s) of {self.node_gpus} {self.node_model or 'GPU'}s added")
        return "; ".join(parts) or "no change"


def parse_change(form: dict[str, str], queues: Sequence[str]) -> Change:
    """The page's form as a :class:`Change`; ValueError naming the field for bad input."""

    def number(name: str, lo: float, hi: float) -> float | None:
        text = form.get(name, "").strip()
        if not text:
            return None
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{name}: {text!r} is not a number") from None
        if not lo <= value <= hi:
            raise ValueError(f"{name}: {value:g} is outside {lo:g}..{hi:g}")
        return value

    queue = form.get("queue", "").strip()
    if queue and queue not in queues:
        raise ValueError(f"queue: no queue named {queue!r}")
    add = number("add_nodes", 0, MAX_ADDED_NODES)
    gpus = number("node_gpus", 1, 64)
    return Change(queue=queue, quota_gpus=number("quota", 0, 1e6), weight=number("weight", 0.001, 1000),
                  add_nodes=int(add or 0), node_gpus=int(gpus or 8), node_model=form.get("node_model", "").strip()[:63])


def changed_snapshot(snapshot: Snapshot, change: Change) -> Snapshot:
    queues = []
    for q in snapshot.queues:
        if q.name == change.queue:
            resources = dict(q.resources)
            if change.quota_gpus is not None:
                resources[GPU] = replace(resources.get(GPU, QueueResource()), quota=round(change.quota_gpus * MILLI))
            q = replace(q, resources=resources, weight=q.weight if change.weight is None else change.weight)
        queues.append(q)
    nodes = list(snapshot.nodes)
    template = next((n for n in nodes if n.gpu_count), None)
    for i in range(change.add_nodes):
        name = f"whatif-{i + 1}"
        labels = {"kubernetes.io/hostname": name}
        if change.node_model:
            labels[LABEL_GPU_PRODUCT] = change.node_model
        allocatable = dict(template.allocatable) if template is not None else {}
        allocatable[GPU] = change.node_gpus * MILLI
        nodes.append(Node(name=NodeName(name), labels=labels, allocatable=allocatable,
                          gpu_product=change.node_model or (template.gpu_product if template else None),
                          gpu_memory_mib=template.gpu_memory_mib if template else None))
    return replace(snapshot, queues=tuple(queues), nodes=tuple(nodes))


def _job(name: str, submit: float, duration: float | None, gpus: float, queue: str) -> TraceJob:
    if 0 < gpus < 1:
        return TraceJob(name, submit, duration, 1, max(1, round(gpus * MILLI)), attrs={"queue": queue})
    return TraceJob(name, submit, duration, max(0, round(gpus)), MILLI if gpus >= 1 else 0, attrs={"queue": queue})


def workload(fleet: Fleet, intervals: Sequence[Any] | None, since: float, until: float) -> list[TraceJob]:
    """The jobs of the what-if (see the module text), in submission order, at most :data:`MAX_JOBS`."""
    jobs: list[TraceJob] = []
    if intervals:
        for i in intervals:
            s = i.start
            created = s.created_at if s.created_at is not None else s.bound_at
            end = i.ended_at if i.ended_at is not None else until
            jobs.append(_job(f"{s.namespace}/{s.pod_name}/{s.bound_at:.0f}", max(0.0, created - since),
                             max(1.0, end - s.bound_at), s.gpus, s.queue))
    else:
        first = min((j.created for j in fleet.jobs if j.created), default=0.0)
        for j in fleet.jobs:
            if j.gpus <= 0:
                continue
            jobs.append(_job(j.key, max(0.0, j.created - first) if j.created else 0.0, SNAPSHOT_JOB_S, j.gpus,
                             j.queue))
    jobs.sort(key=lambda j: j.submit_s)
    return jobs[-MAX_JOBS:]


def simulate_once(snapshot: Snapshot, jobs: Sequence[TraceJob], label: str,
                  progress: Any = None) -> dict[str, Any]:
    """One simulator run of ``jobs`` on the snapshot's nodes and queues; its metrics."""
    from gpufleet.sim import compute_metrics, simulate
    from gpufleet.sim.cluster import SimCluster, SimNode
    from gpufleet.sim.jobs import build_jobs
    from gpufleet.sim.timeline import SimOptions, SimSetup

    cluster = SimCluster(tuple(SimNode(node=n) for n in snapshot.nodes))
    known = {q.name for q in snapshot.queues}
    default = snapshot.config.default_queue
    queues = [QueueName(j.attrs.get("queue", "")) if j.attrs.get("queue") in known else default for j in jobs]
    setup = SimSetup(cluster=cluster, jobs=build_jobs(jobs, queues, cluster, 1800.0), queues=snapshot.queues,
                     config=replace(snapshot.config, now=None), priority_classes=snapshot.priority_classes)
    result = simulate(setup, SimOptions(cycle_interval_s=60.0), progress=progress)
    return compute_metrics(result, label)


@dataclass
class WhatIfRun:
    id: str
    change: Change
    jobs: int
    phase: str = "queued"  # queued | before | after | done | failed
    done: int = 0  # jobs finished in the current run
    error: str = ""
    headers: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)

    @property
    def percent(self) -> int:
        per_run = self.done / self.jobs if self.jobs else 1.0
        base = {"queued": 0.0, "before": 0.0, "after": 0.5, "done": 1.0, "failed": 1.0}[self.phase]
        return int(100 * min(1.0, base + (per_run / 2 if self.phase in ("before", "after") else 0.0)))


class WhatIfRunner:
    """Runs what-ifs one at a time in a worker thread; keeps the last :data:`KEEP` runs by id."""

    KEEP = 20

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpufleet-whatif")
        self._runs: dict[str, WhatIfRun] = {}
        self._lock = threading.Lock()

    def start(self, snapshot: Snapshot, jobs: Sequence[TraceJob], change: Change) -> WhatIfRun:
        run = WhatIfRun(uuid.uuid4().hex[:12], change, len(jobs))
        with self._lock:
            self._runs[run.id] = run
            for old in list(self._runs)[:-self.KEEP]:
                del self._runs[old]
        self._pool.submit(self._work, run, snapshot, list(jobs))
        return run

    def get(self, run_id: str) -> WhatIfRun | None:
        with self._lock:
            return self._runs.get(run_id)

    def _work(self, run: WhatIfRun, snapshot: Snapshot, jobs: list[TraceJob]) -> None:
        from gpufleet.sim import summary_rows

        def progress(_t: float, finished: int) -> None:
            run.done = finished

        try:
            run.phase = "before"
            before = simulate_once(snapshot, jobs, "before", progress)
            run.phase, run.done = "after", 0
            after = simulate_once(changed_snapshot(snapshot, run.change), jobs, "after", progress)
            headers, rows = summary_rows([before, after])
            run.headers, run.rows = headers, rows
            run.phase = "done"
        except Exception as err:  # shown on the page, one line: the run's input is the user's edit
            run.error = f"{type(err).__name__}: {err}"
            run.phase = "failed"

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
