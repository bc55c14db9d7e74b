"""Where the dashboard's cluster state comes from: a snapshot file (the embedded default, what
``gpufleet replay`` reads) or a live cluster (``--kubeconfig``: ``gpufleet snapshot``'s own read,
``gpufleet.kube.inspect.read_cluster``, again after ``refresh_s``); either with an optional usage
ledger (the Usage page, the jobs' history, the what-if's workload), prices, and trace files (the
what-if's other workloads)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from gpufleet.adapters import load_snapshot_documents
from gpufleet.adapters.prices import PriceList
from gpufleet.adapters.traces.records import TraceJob
from gpufleet.domain import Snapshot
from gpufleet.web.fleet import Fleet

__all__ = ["ClusterSource", "DashboardSource", "SnapshotSource", "build_fleet"]


def open_utilisation(ledger: Any) -> dict[str, float]:
    """pod key -> the mean GPU utilisation (%) of its open interval in the usage ledger (those with
    samples): the Cluster page's "used" beside "allocated"."""
    return {f"{i.start.namespace}/{i.start.pod_name}": float(i.gpu_util_mean) for i in ledger.intervals()
            if i.ended_at is None and i.gpu_util_mean is not None}


def build_fleet(snapshot: Snapshot, documents: Iterable[Mapping[str, Any]] = (), ledger: Any = None) -> Fleet:
    """:meth:`Fleet.build`, and what the first pages would otherwise build on a visitor's time (the
    job list's columns and facets, the rack groups). ``documents``: the source's raw objects, for the
    workloads owning the pod-grouper's PodGroups (``gpufleet explain``'s :func:`group_owner`)."""
    from gpufleet.kube.inspect.explain import group_owner
    from gpufleet.web.access import EVERYTHING
    from gpufleet.web.views.cluster import group_ids
    from gpufleet.web.views.jobs import JobFilters, job_list

    fleet = Fleet.build(snapshot)
    for doc in documents:
        if doc.get("kind") == "PodGroup" and (owner := group_owner(doc)) is not None:
            meta = doc.get("metadata") or {}
            fleet.owners[f"{meta.get('namespace') or 'default'}/{meta.get('name')}"] = owner
    if ledger is not None:
        fleet.measure(open_utilisation(ledger))
    job_list(fleet, EVERYTHING, JobFilters())
    group_ids(fleet, "rack")
    return fleet


class DashboardSource:
    """The state the pages show: :meth:`fleet` (the decided snapshot), and the ledger and prices
    when given. ``describe`` names it in the page footer."""

    def __init__(self, *, ledger: Any = None, prices: PriceList | None = None, result: dict[str, Any] | None = None,
                 traces: Mapping[str, Sequence[TraceJob]] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.ledger = ledger  # gpufleet.ledger.LedgerStore, or None
        self.prices = prices
        self.result = result  # a `gpufleet simulate run --format json` result shown on the What-if page
        self.traces = dict(traces or {})  # name -> jobs: the What-if page's traces (`--trace FILE`)
        self.clock = clock

    async def fleet(self) -> Fleet:
        raise NotImplementedError

    def describe(self) -> str:
        return "no source"


class SnapshotSource(DashboardSource):
    """A snapshot, decided once (``Fleet.build``) when first asked for."""

    def __init__(self, snapshot: Snapshot, name: str = "snapshot", *,
                 documents: Sequence[Mapping[str, Any]] = (), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.snapshot = snapshot
        self.documents = documents  # the file's raw objects (the PodGroups' owners)
        self.name = name
        self._fleet: Fleet | None = None
        self._lock: asyncio.Lock | None = None  # made in the server's event loop, on first use

    async def fleet(self) -> Fleet:
        if self._fleet is None:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if self._fleet is None:
                    self._fleet = await asyncio.to_thread(build_fleet, self.snapshot, self.documents, self.ledger)
        return self._fleet

    def describe(self) -> str:
        return self.name


class ClusterSource(DashboardSource):
    """A live cluster: ``read`` returns the objects of ``gpufleet snapshot`` (``read_cluster`` over an
    API client); read again when the last read is older than ``refresh_s``."""

    def __init__(self, read: Callable[[], Awaitable[tuple[list[dict[str, Any]], str]]], refresh_s: float = 30.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._read = read
        self.refresh_s = refresh_s
        self._fleet: Fleet | None = None
        self._at = 0.0
        self._server = "cluster"
        self._lock = asyncio.Lock()

    async def fleet(self) -> Fleet:
        async with self._lock:
            if self._fleet is None or self.clock() - self._at >= self.refresh_s:
                documents, self._server = await self._read()
                snapshot = load_snapshot_documents(documents, f"cluster {self._server}")
                self._fleet = await asyncio.to_thread(build_fleet, snapshot, documents, self.ledger)
                self._at = self.clock()
            return self._fleet

    def describe(self) -> str:
        return f"live: {self._server}"
