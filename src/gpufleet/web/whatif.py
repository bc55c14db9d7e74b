"""The What-if page's work: the simulator (``gpufleet simulate run``'s own ``prepare``-less path:
:func:`gpufleet.sim.simulate`, :func:`gpufleet.sim.compute_metrics`, :func:`gpufleet.sim.summary_rows`)
run twice, before and after one change (a queue's GPU quota or weight, or nodes added), in a worker
thread; the page polls the run by its id.

The workload, chosen on the form (``trace``; :func:`parse_workload`):

- ``ledger`` (the default when a ledger is given): the usage ledger's allocations of the last
  ``days`` days (each interval a job: submitted when created, running as long as it held its GPUs);
- ``snapshot`` (the default without a ledger): the snapshot's jobs (each gang a job, submitted at its
  creation time, running :data:`SNAPSHOT_JOB_S`); ``days`` does not apply;
- a named trace: ``openb`` (the bundled openb default task list, read by
  :func:`gpufleet.adapters.traces.load_trace` as ``gpufleet simulate run --trace openb`` reads it) or
  a trace file given to ``gpufleet dashboard --trace FILE`` (named by its file name): its jobs
  submitted in its last ``days`` days (up to its last submission, as the ledger's are the last days
  up to now; the window's start is the simulation's time 0); a job without a duration runs
  :data:`SNAPSHOT_JOB_S`. Each job goes to a queue of the snapshot by :func:`map_queues`.

At most :data:`MAX_JOBS` jobs, the newest. The cluster: the snapshot's nodes (plus those added). The
queues: the snapshot's (the one changed in the after run).
"""

from __future__ import annotations

import threading
import uuid
import zlib
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.adapters.traces.records import TraceJob
from gpufleet.domain import GPU, LABEL_GPU_PRODUCT, MILLI, Node, NodeName, QueueName, QueueResource, Snapshot
from gpufleet.domain.queues import QueueTree
from gpufleet.web.fleet import Fleet

__all__ = [
    "BUNDLED_TRACES",
    "DEFAULT_DAYS",
    "LEDGER",
    "MAPPING_ATTRS",
    "MAX_DAYS",
    "SNAPSHOT",
    "SNAPSHOT_JOB_S",
    "Change",
    "Choice",
    "Mapped",
    "WhatIfRun",
    "WhatIfRunner",
    "Workload",
    "bundled_trace",
    "choose_workload",
    "map_queues",
    "parse_workload",
    "trace_workload",
    "workload",
    "workload_choices",
]

SNAPSHOT_JOB_S = 3600.0  # how long a snapshot's job runs in the what-if (the snapshot does not say)
MAX_ADDED_NODES = 1000
MAX_JOBS = 20_000  # the newest are kept when the workload is larger
DEFAULT_DAYS = 7  # the last days of the ledger (or of a trace) replayed unless the form says
MAX_DAYS = 90
LEDGER, SNAPSHOT = "ledger", "snapshot"
BUNDLED_TRACES = ("openb",)  # load_trace's bundled task list (BUNDLED_TASK_NAMES' first name)
MAPPING_ATTRS = ("queue", "vc", "group", "user")  # a trace job's attributes read by map_queues, in order


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


@dataclass(frozen=True, slots=True)
class Choice:
    """The form's workload: ``trace`` (``ledger``, ``snapshot`` or a trace's name) and ``days``."""

    trace: str
    days: int = DEFAULT_DAYS


def workload_choices(has_ledger: bool, traces: Iterable[str] = ()) -> list[str]:
    """The form's workloads, the default first: ``ledger`` (with a ledger), ``snapshot``, the bundled
    traces, then the ``--trace`` files' names."""
    return [*([LEDGER] if has_ledger else []), SNAPSHOT, *BUNDLED_TRACES,
            *(t for t in traces if t not in BUNDLED_TRACES)]


def parse_workload(form: Mapping[str, str], choices: Sequence[str]) -> Choice:
    """The form's ``trace`` (one of ``choices``; empty: the first) and ``days`` (a whole number
    1..:data:`MAX_DAYS`; empty: :data:`DEFAULT_DAYS`); ValueError naming the field for bad input."""
    trace = form.get("trace", "").strip() or choices[0]
    if trace not in choices:
        raise ValueError(f"trace: no workload named {trace[:80]!r} (one of {', '.join(choices)})")
    text = form.get("days", "").strip()
    if not text:
        return Choice(trace)
    try:
        days = int(text)
    except ValueError:
        raise ValueError(f"days: {text[:40]!r} is not a whole number") from None
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"days: {days} is outside 1..{MAX_DAYS}")
    return Choice(trace, days)


@dataclass(frozen=True, slots=True)
class Mapped:
    """How :func:`map_queues` placed a trace's jobs: counts of each rule."""

    by_name: int = 0  # an attribute named a leaf queue of the snapshot
    assigned: int = 0  # spread over the leaf queues by a hash of the attribute (else the name)
    defaulted: int = 0  # the snapshot has no usable leaf queue: its default queue


def map_queues(jobs: Sequence[TraceJob], snapshot: Snapshot) -> tuple[list[TraceJob], Mapped]:
    """Each trace job with ``attrs["queue"]`` set to a queue of ``snapshot``, first rule that applies:

    1. by name: the first of its attributes :data:`MAPPING_ATTRS` (queue, vc, group, user) whose
       value is a leaf queue of the snapshot (one pods may go to: no broken ancestry);
    2. assigned: the snapshot's usable leaf queues sorted by name, the one at index CRC-32 (of the
       first of those attributes the job has, else of its name, UTF-8) modulo their number, so
       jobs of one trace tenant stay together and the same trace maps the same way every run;
    3. defaulted: the snapshot has no usable leaf queue: its SchedulerConfig default queue.
    """
    default = snapshot.config.default_queue
    tree = QueueTree.of(snapshot.queues)
    leaves = sorted(q for q in tree.leaves() if tree.use_problem(q, default) is None)
    usable = set(leaves)
    out: list[TraceJob] = []
    by_name = assigned = defaulted = 0
    for job in jobs:
        values = [v for v in (job.attrs.get(a, "") for a in MAPPING_ATTRS) if v]
        named = next((v for v in values if v in usable), None)
        if named is not None:
            queue, by_name = named, by_name + 1
        elif leaves:
            key = values[0] if values else job.name
            queue, assigned = leaves[zlib.crc32(key.encode("utf-8")) % len(leaves)], assigned + 1
        else:
            queue, defaulted = str(default), defaulted + 1
        out.append(replace(job, attrs={**job.attrs, "queue": queue}))
    return out, Mapped(by_name, assigned, defaulted)


@dataclass(frozen=True, slots=True)
class Workload:
    """The jobs of a what-if and where they came from (said on the result page)."""

    source: str  # ledger | snapshot | a trace's name
    days: int | None  # the window replayed (None: the snapshot's jobs, no window)
    jobs: list[TraceJob]
    mapped: Mapped | None = None  # a trace's jobs: how they were given queues
    dropped: int = 0  # the oldest, over MAX_JOBS

    def describe(self) -> str:
        if self.source == LEDGER:
            text = f"the usage ledger's last {self.days} day(s)"
        elif self.source == SNAPSHOT:
            text = "the snapshot's jobs (each running one hour)"
        else:
            text = f"trace {self.source}, its last {self.days} day(s)"
        text += f": {len(self.jobs):,} jobs"
        if self.dropped:
            text += f" (the newest {MAX_JOBS:,}; {self.dropped:,} older left out)"
        if self.mapped is not None:
            m = self.mapped
            text += (f"; queues: {m.by_name:,} by name, {m.assigned:,} assigned to a leaf queue by hash"
                     + (f", {m.defaulted:,} to the default queue" if m.defaulted else ""))
        return text


_bundled_lock = threading.Lock()
_bundled: dict[str, list[TraceJob]] = {}


def bundled_trace(name: str) -> list[TraceJob]:
    """A bundled trace's jobs (read once, by ``load_trace`` as ``simulate run --trace`` reads it)."""
    from gpufleet.adapters.traces import load_trace

    with _bundled_lock:
        if name not in _bundled:
            _bundled[name] = load_trace(name)[0]
        return _bundled[name]


def trace_workload(name: str, jobs: Sequence[TraceJob], snapshot: Snapshot, days: int) -> Workload:
    """A trace's jobs submitted in its last ``days`` days: at or after its last submission time less
    ``days``, submit times then counted from that start (a trace shorter than that: all its jobs,
    their times as they are); the newest :data:`MAX_JOBS`; a job without a duration runs
    :data:`SNAPSHOT_JOB_S`; mapped onto the snapshot's queues by :func:`map_queues`."""
    end = max((j.submit_s for j in jobs), default=0.0)
    start = max(0.0, end - days * 86400.0)
    kept = sorted((j for j in jobs if j.submit_s >= start), key=lambda j: j.submit_s)
    dropped = max(0, len(kept) - MAX_JOBS)
    kept = [replace(j, submit_s=j.submit_s - start,
                    duration_s=SNAPSHOT_JOB_S if j.duration_s is None else j.duration_s) for j in kept[dropped:]]
    mapped, counts = map_queues(kept, snapshot)
    return Workload(name, days, mapped, counts, dropped)


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


def _history_jobs(fleet: Fleet, intervals: Sequence[Any] | None, since: float, until: float) -> list[TraceJob]:
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
    return jobs


def workload(fleet: Fleet, intervals: Sequence[Any] | None, since: float, until: float) -> list[TraceJob]:
    """The jobs of the ledger's ``intervals`` (None: of the snapshot), in submission order, at most
    :data:`MAX_JOBS` (see the module text)."""
    return _history_jobs(fleet, intervals, since, until)[-MAX_JOBS:]


def choose_workload(choice: Choice, fleet: Fleet, *, ledger: Any = None, now: float = 0.0,
                    traces: Mapping[str, Sequence[TraceJob]] | None = None) -> Workload:
    """The :class:`Workload` of ``choice``: the ledger's last ``days`` before ``now``, the snapshot's
    jobs, or a trace (one of ``traces``, else a bundled one) mapped onto the snapshot's queues."""
    if choice.trace == LEDGER and ledger is not None:
        since = now - choice.days * 86400.0
        jobs = _history_jobs(fleet, ledger.intervals(since=since, until=now), since, now)
        return Workload(LEDGER, choice.days, jobs[-MAX_JOBS:], dropped=max(0, len(jobs) - MAX_JOBS))
    if choice.trace in (LEDGER, SNAPSHOT):
        jobs = _history_jobs(fleet, None, 0.0, now)
        return Workload(SNAPSHOT, None, jobs[-MAX_JOBS:], dropped=max(0, len(jobs) - MAX_JOBS))
    given = (traces or {}).get(choice.trace)
    if given is None:
        if choice.trace not in BUNDLED_TRACES:
            raise ValueError(f"trace: no workload named {choice.trace!r}")
        given = bundled_trace(choice.trace)
    return trace_workload(choice.trace, given, fleet.snapshot, choice.days)


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
    workload: str = ""  # which workload ran (Workload.describe)
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

    def start(self, snapshot: Snapshot, jobs: Sequence[TraceJob], change: Change, workload: str = "") -> WhatIfRun:
        run = WhatIfRun(uuid.uuid4().hex[:12], change, len(jobs), workload)
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
