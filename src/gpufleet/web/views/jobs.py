"""The Jobs page (a searchable, filterable list of gangs) and the job page: its pods and where they
run, its history in the usage ledger, and for a pending job ``gpufleet explain``'s own explanation
(:func:`gpufleet.kube.inspect.explain.explain_report`) with the blocking resource marked."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpufleet.kube.inspect.explain import PodFacts, explain_report
from gpufleet.web.access import Visibility
from gpufleet.web.fleet import Fleet, Job

__all__ = ["FILTERS", "JobDetail", "JobFilters", "JobList", "PodRow", "blocking", "job_detail", "job_list"]

PAGE = 200  # jobs listed at once
FILTERS = ("queue", "project", "user", "state", "model")
STATES = ("running", "pending", "partial")


@dataclass(frozen=True, slots=True)
class JobFilters:
    text: str = ""  # a substring of the job's key or user
    queue: str = ""
    project: str = ""
    user: str = ""
    state: str = ""
    model: str = ""
    offset: int = 0

    @classmethod
    def of(cls, params: Mapping[str, str]) -> JobFilters:
        try:
            offset = max(0, int(params.get("offset", "0") or 0))
        except ValueError:
            offset = 0
        return cls(text=params.get("q", "").strip(), offset=offset,
                   **{k: params.get(k, "").strip() for k in FILTERS})

    def query(self, offset: int | None = None) -> str:
        """The filters as a query string (for links)."""
        from urllib.parse import urlencode

        items = {"q": self.text, **{k: getattr(self, k) for k in FILTERS}}
        if offset:
            items["offset"] = str(offset)
        return urlencode({k: v for k, v in items.items() if v})


@dataclass(frozen=True, slots=True)
class JobList:
    rows: tuple[Job, ...]
    total: int  # jobs matching the filters
    visible: int  # jobs the caller may see at all
    filters: JobFilters
    facets: Mapping[str, tuple[str, ...]]  # filter -> the values among the visible jobs
    next_offset: int | None


def _value(job: Job, key: str) -> str:
    if key == "state":
        return job.state
    if key == "model":
        return job.gpu_model
    return getattr(job, key) or ""


@dataclass(frozen=True, slots=True)
class _Columns:
    """The jobs' filter values as NumPy columns (built once per fleet): filters are array compares."""

    values: Mapping[str, npt.NDArray[np.object_]]  # filter -> each job's value ("" none)
    text: tuple[str, ...]  # each job's key and user, lower case, for the search


def _columns(fleet: Fleet) -> _Columns:
    cached = fleet.view_cache.get("job-columns")
    if isinstance(cached, _Columns):
        return cached
    values = {k: np.array([_value(j, k) for j in fleet.jobs], dtype=object) for k in (*FILTERS, "queue", "project")}
    columns = _Columns(values, tuple(f"{j.key} {j.user or ''}".lower() for j in fleet.jobs))
    fleet.view_cache["job-columns"] = columns
    return columns


Facets = Mapping[str, tuple[str, ...]]


def _visible(fleet: Fleet, vis: Visibility, columns: _Columns) -> tuple[npt.NDArray[np.bool_], Facets]:
    """Which jobs ``vis`` sees, and the facets (each filter's values among them): kept per visibility."""
    key = ("job-facets", vis)
    cached = fleet.view_cache.get(key)
    if isinstance(cached, tuple):
        return cached[0], cached[1]
    if vis.all:
        mask = np.ones(len(fleet.jobs), dtype=np.bool_)
    else:
        mask = np.isin(columns.values["project"], list(vis.projects)) | np.isin(columns.values["queue"],
                                                                                list(vis.queues))
    facets = {k: tuple(sorted(set(columns.values[k][mask].tolist()) - {""})) for k in FILTERS}
    if len(fleet.view_cache) > 256:
        fleet.view_cache.clear()
    fleet.view_cache[key] = (mask, facets)
    return mask, facets


def job_list(fleet: Fleet, vis: Visibility, filters: JobFilters) -> JobList:
    columns = _columns(fleet)
    visible, facets = _visible(fleet, vis, columns)
    mask = visible.copy()
    for k in FILTERS:
        wanted = getattr(filters, k)
        if wanted:
            mask &= columns.values[k] == wanted
    text = filters.text.lower()
    if text:
        mask &= np.fromiter((text in t for t in columns.text), dtype=np.bool_, count=len(columns.text))
    matching = np.flatnonzero(mask)
    shown = matching[filters.offset:filters.offset + PAGE]
    end = filters.offset + len(shown)
    return JobList(tuple(fleet.jobs[i] for i in shown), len(matching), int(visible.sum()), filters, facets,
                   end if end < len(matching) else None)


# -- the job page ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodRow:
    key: str
    node: str | None  # where it runs (or would be bound)
    gpus: str
    state: str  # running | pending
    decision: str  # keep | bind <node> | evict (by ...) | pending


@dataclass(frozen=True, slots=True)
class HistoryRow:
    pod: str
    node: str
    gpus: float
    created: float | None
    bound: float
    ended: float | None
    end_reason: str | None
    preemptor: str | None


@dataclass(frozen=True, slots=True)
class JobDetail:
    job: Job
    pods: tuple[PodRow, ...]
    explanation: Mapping[str, Any] | None  # explain_report of its first pending pod (or first pod)
    blocking: tuple[str, ...]  # the blocking resources named in the pending reason
    reason_parts: tuple[tuple[str, bool], ...]  # the reason in pieces, True for a blocking word
    history: tuple[HistoryRow, ...] | None  # None: no ledger
    queue_rank: tuple[int, int] | None  # (rank, count) in its queue's admission order


# Words of the engine's pending reasons that name what blocks a gang (engine/placement.py,
# engine/queues.py, engine/admission.py). The first group names a resource, the second a rule.
_BLOCKING = re.compile(
    r"\b(GPUs?|nvidia\.com/gpu|gpu memory|blocks?|cpu|memory|ephemeral-storage|pods|quota|limit|"
    r"host ?ports?|volumes?|NVLink|topology|rack|taints?|node selector|affinity|scheduling gates?|"
    r"podgroup|minMember|reservation|project)\b",
    re.IGNORECASE,
)


def blocking(reason: str) -> tuple[tuple[str, ...], tuple[tuple[str, bool], ...]]:
    """The blocking words of a pending reason (lower case, in order, once each) and the reason split
    into (text, is-blocking) pieces for the page to mark."""
    words: list[str] = []
    parts: list[tuple[str, bool]] = []
    at = 0
    for m in _BLOCKING.finditer(reason):
        if m.start() > at:
            parts.append((reason[at:m.start()], False))
        parts.append((m.group(0), True))
        word = m.group(0).lower()
        if word not in words:
            words.append(word)
        at = m.end()
    if at < len(reason):
        parts.append((reason[at:], False))
    return tuple(words), tuple(parts)


def _gpus(gpus: Sequence[int], blocks: int | None) -> str:
    if blocks is not None:
        return f"{blocks}/100 of GPU {gpus[0] if gpus else '?'}"
    return ",".join(map(str, gpus)) if gpus else "-"


def job_detail(fleet: Fleet, vis: Visibility, key: str, history: Sequence[Any] | None = None) -> JobDetail | None:
    """The job ``key`` (its gang key), or None when there is none the caller may see. ``history``:
    the ledger's intervals of its pods (``LedgerStore.intervals`` filtered), None without a ledger."""
    job = fleet.job_by_key.get(key)
    if job is None or not vis.sees(job.project, job.queue):
        return None
    rows: list[PodRow] = []
    for pk in job.pods:
        pod = fleet.pods[pk]
        binding = fleet.bindings.get(pk)
        eviction = fleet.evictions.get(pk)
        if pod.bound:
            decision = f"evict (for {eviction.by}, {eviction.reason.value})" if eviction else "keep running"
            rows.append(PodRow(pk, pod.node_name, _gpus(pod.gpu_index, pod.gpu_blocks), "running", decision))
        elif binding is not None:
            rows.append(PodRow(pk, binding.node, _gpus(binding.gpus, binding.gpu_blocks), "pending",
                               f"bind to {binding.node}"))
        else:
            rows.append(PodRow(pk, None, "-", "pending", "stay pending"))
    first = next((pk for pk in job.pods if not fleet.pods[pk].bound), job.pods[0])
    pod = fleet.pods[first]
    report = explain_report(PodFacts(pod.namespace, pod.name, pod.phase, pod.scheduler_name, pod.node_name),
                            fleet.snapshot, fleet.decisions, fleet.order, fleet.owners.get(key))
    reason = report.get("pendingReason") or ""
    words, parts = blocking(reason)
    rank = None
    position = report.get("queuePosition")
    if isinstance(position, Mapping):
        rank = (int(position["rank"]), int(position["count"]))
    hist = None
    if history is not None:
        hist = tuple(HistoryRow(i.start.namespace + "/" + i.start.pod_name, i.start.node, i.start.gpus,
                                i.start.created_at, i.start.bound_at, i.ended_at,
                                i.end_reason.value if i.end_reason is not None else None, i.preemptor)
                     for i in sorted(history, key=lambda i: (i.start.bound_at, i.start.pod_name)))
    return JobDetail(job, tuple(rows), report, words, parts, hist, rank)
