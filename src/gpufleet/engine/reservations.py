"""Reservation and backfill (docs/semantics.md, "Reservation and backfill").

A gang that waited longer than ``reservation.after`` gets, at the start of a decision, the nodes where
it will fit soonest by the running pods' expected ends. While the reservation is held, the whole GPUs
of those nodes that are free are taken by the reservation (``ClusterState.take`` with no other
resource), except while a gang that may use them is tried: the gang itself, a preemptible gang, or one
whose every pending member declared a runtime that ends before the reservation starts.

Pure: the time is the snapshot's ``now``. Node-wide work is NumPy over the GPU cells; the Python loops
run over the pods that hold GPUs (once per reservation made) and over a reservation's own nodes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpufleet.domain import BLOCKS_PER_GPU, NodeName, Reservation, ReservationConfig
from gpufleet.domain.units import duration_seconds
from gpufleet.domain.wire import ANNOTATION_EXPECTED_RUNTIME
from gpufleet.engine.cluster import BoolArray, ClusterState, IntArray
from gpufleet.engine.workload import Gang, PodInfo

__all__ = ["Held", "Reservations", "declared_runtimes", "earliest_fit"]

FloatArray = npt.NDArray[np.float64]


def declared_runtimes(pods: Sequence[PodInfo], warnings: list[str]) -> dict[int, float]:
    """Pod index -> its declared runtime (annotation ``gpufleet.dev/expected-runtime``), seconds. A
    malformed one is left out with a warning (the pod then has none)."""
    out: dict[int, float] = {}
    for info in pods:
        text = info.pod.annotations.get(ANNOTATION_EXPECTED_RUNTIME)
        if text is None:
            continue
        try:
            out[info.idx] = duration_seconds(text)
        except ValueError as e:
            warnings.append(f"pod {info.key}: annotation {ANNOTATION_EXPECTED_RUNTIME}: {e}; ignored")
    return out


def earliest_fit(cell_end: FloatArray, candidates: BoolArray, domain: IntArray, per_pod: int,
                 need: int) -> tuple[float, int, IntArray] | None:
    """When and where ``need`` pods of ``per_pod`` whole GPUs fit soonest.

    ``cell_end[n, g]``: when GPU g of node n is expected free (``now`` if free now, inf if never).
    ``candidates``: the nodes that may be reserved; ``domain[n]``: node n's domain code (>= 0 for a
    candidate). Returns (start, domain code, its nodes to reserve: most slots at the start first, then
    index) or None when no expected end frees enough."""
    nodes = np.flatnonzero(candidates)
    if not len(nodes) or per_pod <= 0:
        return None
    ends = cell_end[nodes]
    codes = domain[nodes]
    n_domains = int(codes.max()) + 1
    times = np.unique(ends[np.isfinite(ends)])

    def slots_at(t: float) -> IntArray:
        out: IntArray = (ends <= t).sum(axis=1) // per_pod
        return out

    def best(t: float) -> IntArray:
        out: IntArray = np.bincount(codes, weights=slots_at(t), minlength=n_domains).astype(np.int64)
        return out

    lo, hi = 0, len(times)
    while lo < hi:  # the least time at which one domain reaches ``need`` (monotone in t)
        mid = (lo + hi) // 2
        if best(float(times[mid])).max() >= need:
            hi = mid
        else:
            lo = mid + 1
    if lo == len(times):
        return None
    start = float(times[lo])
    per_domain = best(start)
    chosen = int(np.argmax(per_domain))  # most slots; the first domain (lowest code, by name) on a tie
    slots = slots_at(start)
    inside = np.flatnonzero((codes == chosen) & (slots > 0))
    order = inside[np.lexsort((nodes[inside], -slots[inside]))]
    covered = np.cumsum(slots[order])
    take = order[: int(np.searchsorted(covered, need)) + 1]
    return start, chosen, np.sort(nodes[take])


@dataclass
class Held:
    """One reservation in a decision: its gang, nodes, start, and the GPUs it holds now per node."""

    gang: int
    nodes: IntArray
    start: float
    gpus: int
    holding: dict[int, list[int]] = field(default_factory=dict)


class Reservations:
    """The reservations of one ``schedule()`` call and the holds on their free GPUs."""

    def __init__(self, config: ReservationConfig, now: float, cluster: ClusterState, pods: list[PodInfo],
                 gangs: list[Gang], queue_names: Sequence[str], warnings: list[str]) -> None:
        self.config = config
        self.now = now
        self.cluster = cluster
        self.pods = pods
        self.gangs = gangs
        self.declared = declared_runtimes(pods, warnings)
        observed: Mapping[str, float] = config.observed_runtime
        self.observed = [observed.get(name) for name in queue_names]  # by leaf queue index
        self.held: dict[int, Held] = {}  # gang index -> its reservation
        self.reserved = np.zeros(len(cluster.nodes), dtype=np.bool_)
        self._none = np.zeros(len(cluster.resources), dtype=np.int64)

    # -- facts --------------------------------------------------------------------------------

    def overdue(self, gang: Gang) -> bool:
        return self.now - gang.creation >= self.config.after

    def start_of(self, info: PodInfo) -> float:
        return info.start if info.pod.bound else self.now

    def expected_end(self, info: PodInfo) -> float:
        declared = self.declared.get(info.idx)
        if declared is not None:
            end = self.start_of(info) + declared
        else:
            observed = self.observed[info.queue] if info.queue >= 0 else None
            end = self.start_of(info) + observed if observed is not None else math.inf
        return max(end, self.now)

    def gang_start(self, gang: Gang) -> float:
        starts = [self.start_of(self.pods[m]) for m in gang.members if self.pods[m].node is not None]
        return min(starts) if starts else self.now

    def overran(self, gang: Gang) -> bool:
        """A bound member runs past its declared runtime."""
        for m in gang.members:
            info = self.pods[m]
            d = self.declared.get(m)
            if info.node is not None and d is not None and self.start_of(info) + d < self.now:
                return True
        return False

    def evictable(self, gang: Gang, by: Gang) -> bool:
        """Whether ``gang`` may be evicted for the reservation of ``by``."""
        return (gang.idx != by.idx and gang.ours and gang.alive > 0 and self.gang_start(gang) >= by.creation
                and (gang.preemptible or self.overran(gang)))

    def may_use(self, gang: Gang, held: Held, members: Sequence[int]) -> bool:
        """Backfill: whether ``gang`` (pending ``members``) may take ``held``'s GPUs."""
        if gang.idx == held.gang or gang.preemptible:
            return True
        for m in members:
            d = self.declared.get(m)
            if d is None or self.now + d > held.start:
                return False
        return bool(members)

    # -- making them ------------------------------------------------------------------------

    def reserve(self, gang: Gang, members: Sequence[int], need: int, feasible: BoolArray,
                domains: tuple[IntArray, list[str]] | None) -> Held | None:
        """Reserve for ``gang`` (its pending ``members`` all whole-GPU pods of one count; ``need`` of
        them must start) on ``feasible`` nodes not reserved yet; None when no expected end frees
        enough. ``domains``: the codes of its required topology level (None: one domain)."""
        per_pod = {self.pods[m].whole for m in members}
        if len(per_pod) != 1 or any(self.pods[m].fractional for m in members):
            return None
        g = per_pod.pop()
        if g <= 0:
            return None
        c = self.cluster
        cell_end = np.where(c.gpu_free == BLOCKS_PER_GPU, self.now, np.inf)
        cell_end[~c.healthy] = np.inf
        by_gang: dict[int, bool] = {}
        cells_n: list[int] = []
        cells_g: list[int] = []
        cells_t: list[float] = []
        for info in self.pods:
            if info.node is None or not info.gpus:
                continue
            ev = by_gang.get(info.gang)
            if ev is None:
                ev = by_gang[info.gang] = info.gang >= 0 and self.evictable(self.gangs[info.gang], gang)
            end = self.now if ev else self.expected_end(info)
            for gpu in info.gpus:
                cells_n.append(info.node)
                cells_g.append(gpu)
                cells_t.append(end)
        used = np.full(cell_end.shape, -np.inf)
        if cells_n:
            np.maximum.at(used, (np.array(cells_n), np.array(cells_g)), np.array(cells_t))
        cell_end = np.where(used > -np.inf, used, cell_end)  # a used GPU frees when its last pod ends
        cell_end[~c.healthy] = np.inf
        candidates = feasible & c.schedulable & ~self.reserved
        if domains is None:
            codes = np.zeros(len(c.nodes), dtype=np.int64)
        else:
            codes = domains[0]
            candidates = candidates & (codes >= 0)
        found = earliest_fit(cell_end, candidates, codes, g, need)
        if found is None:
            return None
        start, _, nodes = found
        held = Held(gang.idx, nodes, start, g * need)
        self.held[gang.idx] = held
        self.reserved[nodes] = True
        return held

    # -- holds --------------------------------------------------------------------------------

    def hold_for(self, gang: Gang, members: Sequence[int]) -> None:
        """Set the holds for an attempt of ``gang``: the reservations it may use give their GPUs back,
        the others take every whole GPU of their nodes free now."""
        for held in self.held.values():
            if self.may_use(gang, held, members):
                self._release(held)
            else:
                self._hold(held)

    def _hold(self, held: Held) -> None:
        c = self.cluster
        for n in held.nodes.tolist():
            free = np.flatnonzero(c.gpu_free[n] == BLOCKS_PER_GPU).tolist()
            if free:
                c.take(n, self._none, free, None)
                held.holding.setdefault(n, []).extend(free)

    def _release(self, held: Held) -> None:
        for n, gpus in held.holding.items():
            self.cluster.give_back(n, self._none, gpus, None)
        held.holding.clear()

    def drop(self, gang: int) -> None:
        held = self.held.pop(gang, None)
        if held is not None:
            self._release(held)
            self.reserved[held.nodes] = False

    def release_all(self) -> None:
        for held in self.held.values():
            self._release(held)

    # -- output -------------------------------------------------------------------------------

    def output(self, node_names: Sequence[str]) -> tuple[Reservation, ...]:
        out = [Reservation(self.gangs[g].key, tuple(NodeName(node_names[n]) for n in h.nodes.tolist()),
                           h.start, h.gpus) for g, h in self.held.items()]
        return tuple(sorted(out, key=lambda r: r.gang))
