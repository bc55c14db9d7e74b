"""Reservation and backfill (docs/semantics.md, "Reservation and backfill").

A gang that waited longer than ``reservation.after`` gets, at the start of a decision, the nodes where
it will fit soonest by the running pods' expected ends. While the reservation is held, the whole GPUs
of those nodes that are free are taken by the reservation (``ClusterState.take`` with no other
resource), except while a gang that may use them is tried: the gang itself, a preemptible gang, or one
whose every pending member declared a runtime that ends before the reservation starts.

Pure: the time is the snapshot's ``now``. Node-wide work is NumPy over the GPU cells; the running pods'
cells and expected ends are gathered once per decision, and each reservation is NumPy over them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, compress, repeat
from operator import attrgetter, is_not

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
    parsed: dict[str, float | str] = {}  # annotation text -> seconds, or why it is malformed
    for info in pods:
        text = info.pod.annotations.get(ANNOTATION_EXPECTED_RUNTIME)
        if text is None:
            continue
        seconds = parsed.get(text)
        if seconds is None:  # parsed once per distinct text: most pods share a few values
            try:
                seconds = parsed[text] = duration_seconds(text)
            except ValueError as e:
                seconds = parsed[text] = str(e)
        if isinstance(seconds, str):
            warnings.append(f"pod {info.key}: annotation {ANNOTATION_EXPECTED_RUNTIME}: {seconds}; ignored")
        else:
            out[info.idx] = seconds
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
    # By GPU then node (a row per GPU index): a node's count is a sum over the few rows, element-wise.
    ends = cell_end[nodes].T.copy()
    codes = domain[nodes]
    n_domains = int(codes.max()) + 1
    times = np.unique(ends[np.isfinite(ends)])

    def slots_at(t: float) -> IntArray:
        out: IntArray = (ends <= t).sum(axis=0) // per_pod
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
    borrows: bool = False  # the gang's request was not in quota when it reserved
    holding: dict[int, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Table:
    """The running pods' GPU cells (node, GPU, expected end, gang slot) and per-gang facts (the last
    slot stands for pods of no gang of ours)."""

    cell_node: IntArray
    cell_gpu: IntArray
    cell_end: FloatArray
    cell_gang: IntArray
    gang_start: FloatArray
    gang_preemptible: BoolArray
    gang_overran: BoolArray
    creation: FloatArray  # by gang: its wait start


class Reservations:
    """The reservations of one ``schedule()`` call and the holds on their free GPUs."""

    def __init__(self, config: ReservationConfig, now: float, cluster: ClusterState, pods: list[PodInfo],
                 gangs: list[Gang], queue_names: Sequence[str], warnings: list[str],
                 node_of: IntArray | None = None) -> None:
        """``node_of``: each pod's node (-1: none), kept by the placer with the pods' ``node`` (read only)."""
        self.config = config
        self.now = now
        self.cluster = cluster
        self.pods = pods
        self.gangs = gangs
        self.declared = declared_runtimes(pods, warnings)
        observed: Mapping[str, float] = config.observed_runtime
        self.observed = [observed.get(name) for name in queue_names]  # by leaf queue index
        self.held: dict[int, Held] = {}  # gang index -> its reservation
        self.changes = 0  # bumped whenever a reservation is made or dropped (``held`` changes)
        self.reserved = np.zeros(len(cluster.nodes), dtype=np.bool_)
        self._none = np.zeros(len(cluster.resources), dtype=np.int64)
        self._cells: _Table | None = None
        self._node_of = node_of

    # -- facts --------------------------------------------------------------------------------

    def overdue(self, gang: Gang) -> bool:
        return self.now - gang.creation >= self.config.after

    def start_of(self, info: PodInfo) -> float:
        return info.start if info.pod.bound else self.now

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

    def reserved_at(self, gang: Gang) -> float:
        """The gang's reservation time: its wait start plus ``after``."""
        return gang.creation + self.config.after

    def evictable(self, gang: Gang, by: Gang) -> bool:
        """Whether ``gang`` is backfill of ``by`` (may be evicted for its reservation)."""
        return (gang.idx != by.idx and gang.ours and gang.alive > 0 and self.waits_less(gang, by)
                and self.gang_start(gang) >= self.reserved_at(by) and (gang.preemptible or self.overran(gang)))

    @staticmethod
    def waits_less(gang: Gang, than: Gang) -> bool:
        """A later wait start (then a later key): a gang that waited longer is never backfill."""
        return (gang.creation, gang.key) > (than.creation, than.key)

    def may_use(self, gang: Gang, held: Held, members: Sequence[int], borrows: bool) -> bool:
        """Backfill: whether ``gang`` (pending ``members``; ``borrows``: its request is not in quota)
        may take ``held``'s GPUs: the reserved gang itself; a preemptible gang that would be backfill of
        it once running (it waited less, and borrows when the reserved gang borrows); a gang whose
        declared runtimes end by the start."""
        if gang.idx == held.gang:
            return True
        if gang.preemptible and self.waits_less(gang, self.gangs[held.gang]) and (borrows or not held.borrows):
            return True
        for m in members:
            d = self.declared.get(m)
            if d is None or self.now + d > held.start:
                return False
        return bool(members)

    def yields_all(self, gang: Gang) -> bool:
        """Whether every reservation lets ``gang`` take its GPUs whatever the gang's request: it is
        the reserved gang, or it is preemptible, waited less and the reserved gang did not borrow
        (:meth:`may_use`'s first two cases, neither depending on whether ``gang`` borrows). An attempt
        of such a gang holds nothing (``hold_for`` releases every hold): the batch path may admit it."""
        for held in self.held.values():
            if gang.idx == held.gang:
                continue
            if gang.preemptible and not held.borrows and self.waits_less(gang, self.gangs[held.gang]):
                continue
            return False
        return True

    # -- making them ------------------------------------------------------------------------

    def reserve(self, gang: Gang, members: Sequence[int], need: int, feasible: BoolArray,
                domains: tuple[IntArray, list[str]] | None, borrows: bool = False) -> Held | None:
        """Reserve for ``gang`` (its pending ``members`` all whole-GPU pods of one count; ``need`` of
        them must start) on ``feasible`` nodes not reserved yet; None when no expected end frees
        enough. ``domains``: the codes of its required topology level (None: one domain); ``borrows``:
        its request is not in quota."""
        per_pod = {self.pods[m].whole for m in members}
        if len(per_pod) != 1 or any(self.pods[m].fractional for m in members):
            return None
        g = per_pod.pop()
        if g <= 0:
            return None
        c = self.cluster
        table = self._table()
        # Backfill of this gang counts as ending by the start (it is evicted for it then): as now.
        backfill = (table.gang_start >= self.reserved_at(gang)) & (table.gang_preemptible | table.gang_overran)
        backfill[:-1] &= self._waited_less(table.creation, gang)
        ends = np.where(backfill[table.cell_gang], self.now, table.cell_end)
        used = np.full(c.gpu_free.shape, -np.inf)
        np.maximum.at(used, (table.cell_node, table.cell_gpu), ends)  # a used GPU frees when its last pod ends
        cell_end = np.where(used > -np.inf, used, np.where(c.gpu_free == BLOCKS_PER_GPU, self.now, np.inf))
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
        held = Held(gang.idx, nodes, start, g * need, borrows)
        self.held[gang.idx] = held
        self.changes += 1
        self.reserved[nodes] = True
        return held

    def _waited_less(self, creation: FloatArray, than: Gang) -> BoolArray:
        """By gang: :meth:`waits_less` than ``than`` (a later wait start, then a later key; a wait start
        of NaN after every other, as a sort puts it), with the keys compared only where the starts tie."""
        c0 = than.creation
        if math.isnan(c0):
            out: BoolArray = np.zeros(len(creation), dtype=np.bool_)
            tied = np.flatnonzero(np.isnan(creation))
        else:
            out = (creation > c0) | np.isnan(creation)
            tied = np.flatnonzero(creation == c0)
        gangs, key = self.gangs, than.key
        for g in tied.tolist():
            out[g] = gangs[g].key > key
        return out

    def _table(self) -> _Table:
        """The running pods' GPU cells and their expected ends, by gang: built once per decision, from
        the state when the first reservation is made (the start of the call)."""
        if self._cells is not None:
            return self._cells
        # The pods holding GPUs: a pod has GPUs only while bound (Placer.commit and release set both).
        bound = list(compress(self.pods, map(attrgetter("gpus"), self.pods)))
        n, n_gangs = len(bound), len(self.gangs)
        gpus = list(map(attrgetter("gpus"), bound))
        counts = np.fromiter(map(len, gpus), np.int64, n)
        cell_gpu = np.fromiter(chain.from_iterable(gpus), np.int64, int(counts.sum()))
        # Pod.bound: the pod table holds no finished pod, so a pod of it is bound where it names a node.
        is_bound = np.fromiter(map(is_not, map(attrgetter("pod.node_name"), bound), repeat(None)), np.bool_, n)
        start = np.where(is_bound, np.fromiter(map(attrgetter("start"), bound), np.float64, n), self.now)
        by_pod = np.full(len(self.pods), math.nan)  # declared runtimes over every pod
        if self.declared:
            by_pod[np.fromiter(self.declared.keys(), np.int64, len(self.declared))] = \
                np.fromiter(self.declared.values(), np.float64, len(self.declared))
        idx = np.fromiter(map(attrgetter("idx"), bound), np.int64, n)
        declared = by_pod[idx]
        # By leaf queue, the last slot (index -1) for pods of no queue of ours.
        per_queue = np.array([math.nan if o is None else o for o in self.observed] + [math.nan], dtype=np.float64)
        observed = per_queue[np.fromiter(map(attrgetter("queue"), bound), np.int64, n)]
        gang = np.fromiter(map(attrgetter("gang"), bound), np.int64, n)
        runtime = np.where(np.isnan(declared), observed, declared)
        # Past its expected end, a pod is expected to run as long again as it has run (docs/semantics.md).
        end = start + np.nan_to_num(runtime)
        end = np.where(end >= self.now, end, self.now + (self.now - start))
        pod_end = np.where(np.isnan(runtime), np.inf, end)
        ours = gang >= 0
        gang_start = np.full(n_gangs + 1, np.inf)  # the last slot: pods of no gang (never backfill)
        slot = np.where(ours, gang, n_gangs)
        np.minimum.at(gang_start, slot, start)
        gang_overran = np.zeros(n_gangs + 1, dtype=np.bool_)
        np.logical_or.at(gang_overran, slot, ~np.isnan(declared) & (start + np.nan_to_num(declared) < self.now))
        gang_ours = np.fromiter(map(attrgetter("ours"), self.gangs), np.bool_, n_gangs)
        gang_preemptible = np.zeros(n_gangs + 1, dtype=np.bool_)
        gang_preemptible[:n_gangs] = np.fromiter(map(attrgetter("preemptible"), self.gangs), np.bool_, n_gangs)
        gang_preemptible[:n_gangs] &= gang_ours
        gang_overran[:n_gangs] &= gang_ours
        gang_overran[n_gangs] = False
        creation = np.fromiter(map(attrgetter("creation"), self.gangs), np.float64, n_gangs)
        node = self._node_of[idx] if self._node_of is not None else np.fromiter(map(attrgetter("node"), bound),
                                                                                   np.int64, n)
        self._cells = _Table(
            np.repeat(node, counts), cell_gpu,
            np.repeat(pod_end, counts), np.repeat(slot, counts), gang_start, gang_preemptible, gang_overran,
            creation)
        return self._cells

    # -- holds --------------------------------------------------------------------------------

    def hold_for(self, gang: Gang, members: Sequence[int], borrows: bool) -> None:
        """Set the holds for an attempt of ``gang``: the reservations it may use give their GPUs back,
        the others take every whole GPU of their nodes free now."""
        for held in self.held.values():
            if self.may_use(gang, held, members, borrows):
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

    def holds(self) -> tuple[tuple[int, tuple[tuple[int, tuple[int, ...]], ...]], ...]:
        """The GPUs held now: per reservation (by gang), its nodes' GPUs taken for it."""
        return tuple((g, tuple((n, tuple(gpus)) for n, gpus in held.holding.items())) for g, held in self.held.items())

    def drop(self, gang: int) -> None:
        held = self.held.pop(gang, None)
        if held is not None:
            self.changes += 1
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
