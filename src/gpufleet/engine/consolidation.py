"""Consolidation: moves of running gangs that make room for a gang fragmentation blocks.

docs/semantics.md, "Consolidation". When a head gang W passes its queue gates but does not fit the
free capacity, while the nodes it may use hold enough free whole GPUs in total, :class:`Consolidator`
looks for a set of movable gangs (preemptible, every pod checkpointed, under its move limit) whose
pods, taken off their nodes, let W place and then every one of them place again elsewhere, whole and
by the ordinary placement (topology rules included). A plan commits all or nothing: on any failure
the state is put back exactly as it was.

The search is bounded: candidate nodes are W's *short* nodes (where free GPUs plus movable GPUs reach
W's largest pod); single movers first, then a greedy fill of the short nodes, pruned. Every candidate
is checked on the live state by the real placement. Moves never change queue usage (the same pods
keep running), so only the placement state is touched: ``Placer.release`` and ``Placer.commit``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from itertools import chain
from operator import attrgetter

import numpy as np

from gpufleet.domain import ANNOTATION_CHECKPOINTED, ANNOTATION_MOVED_AT, Consolidation
from gpufleet.engine.cluster import BoolArray
from gpufleet.engine.placement import Assignment, GangPlacement, Placer
from gpufleet.engine.workload import Gang, PodInfo

__all__ = ["Consolidator", "PlannedMove", "moves_within_hour"]

MAX_TESTS = 32  # plans checked per gang W
MAX_PLANS = 64  # gangs W one call looks for a plan for
SINGLES = 12  # single movers tried
GREEDY_NODES = 6  # short nodes a greedy fill may visit beyond those it must fill
MAX_GREEDY_NODES = 32
HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class PlannedMove:
    pod: int
    src: Assignment  # where it was
    dst: Assignment  # where it goes
    for_gang: str


def _moment(text: str) -> float | None:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def moves_within_hour(annotation: str | None, now: float) -> int:
    """Entries of a ``gpufleet.dev/moved-at`` history that count against the hourly limit: those in
    ``(now - 3600, now]``, and every unreadable or future one (a forged history only lowers moves)."""
    if not annotation:
        return 0
    count = 0
    for part in annotation.split(","):
        if not part.strip():
            continue
        at = _moment(part)
        if at is None or at > now or at > now - HOUR:
            count += 1
    return count


class Consolidator:
    """One ``schedule`` call's consolidation: the movable gangs, the moves made, the budget left."""

    # Remember failed searches (set False on an instance to search every time: the same decisions).
    MEMO = True

    def __init__(self, config: Consolidation, now: float, gangs: Sequence[Gang], pods: Sequence[PodInfo],
                 placer: Placer,
                 on_flavor: Callable[[Sequence[int], int], AbstractContextManager[None]] | None = None) -> None:
        self.config = config
        # Members as placed on a flavor (engine/flavors.py FlavorBook.applied): a mover that took
        # a flavor is re-placed on that flavor's nodes only (docs/semantics.md, "Consolidation").
        self.on_flavor = on_flavor
        self.now = now
        self.gangs = gangs
        self.pods = pods
        self.placer = placer
        self.budget = config.max_moves_per_cycle
        self.plans_left = MAX_PLANS
        self.moves: dict[int, PlannedMove] = {}  # by pod
        self.moved_gangs: set[int] = set()
        # The gang and pod tables are built on the first plan that gets past the cheap tests (most
        # calls never need them: a full cluster, no gang short of GPUs), from the pods placed when
        # the consolidation began, as if built then: gangs evicted since are forgotten.
        self._placed_at_start = placer.node_of >= 0
        self._failed: set[tuple[object, ...]] = set()  # _shape of the searches that failed
        self._forgotten: list[int] = []
        self._built = False

    def _build(self) -> None:
        gangs, pods = self.gangs, self.pods
        self._built = True
        self.p_gang = np.fromiter(map(attrgetter("gang"), pods), np.int64, len(pods))
        self.g_movable: BoolArray = self._movable(self.now)
        self.g_movable[self._forgotten] = False
        self.g_gpus = np.zeros(len(gangs), dtype=np.int64)
        self.g_big = np.zeros(len(gangs), dtype=np.int64)  # whole GPUs of the gang's largest pod
        self.g_pods = np.fromiter((len(g.members) for g in gangs), np.int64, len(gangs))
        self.p_gang_clipped = np.maximum(self.p_gang, 0)
        self.p_ours = self.p_gang >= 0
        self.p_whole = np.fromiter(map(attrgetter("whole"), pods), np.int64, len(pods))
        movable = np.flatnonzero(self.g_movable)
        if len(movable):  # per movable gang, over its members: GPUs in all and of its largest pod
            member_gang = np.repeat(movable, self.g_pods[movable])
            member_whole = self.p_whole[np.fromiter(chain.from_iterable(gangs[g].members for g in movable.tolist()),
                                                    np.int64, len(member_gang))]
            np.add.at(self.g_gpus, member_gang, member_whole)
            np.maximum.at(self.g_big, member_gang, member_whole)

    def _movable(self, now: float) -> BoolArray:
        """By gang: ours, of a queue, preemptible, every member running (bound in the snapshot and on
        a node now) and checkpointed, and under its hourly move limit. One pass over the pods; the
        move histories are read only where a pod or a PodGroup has one."""
        limit = self.config.max_moves_per_pod_per_hour
        gangs, pods = self.gangs, self.pods
        n_gangs = len(gangs)
        out = np.zeros(n_gangs, dtype=np.bool_)
        if limit <= 0 or self.config.max_moves_per_cycle <= 0 or not n_gangs:
            return out
        out[:] = np.fromiter((g.ours and g.queue >= 0 and g.preemptible and bool(g.members) for g in gangs),
                             np.bool_, n_gangs)
        p_gang = self.p_gang
        ready = np.fromiter((i.pod.bound and i.pod.annotations.get(ANNOTATION_CHECKPOINTED) == "true" for i in pods),
                            np.bool_, len(pods)) & self._placed_at_start
        mine = p_gang >= 0
        out &= np.bincount(p_gang[mine & ~ready], minlength=n_gangs) == 0  # no member that is not ready
        history = np.zeros(n_gangs, dtype=np.int64)
        for i in pods:
            moved_at = i.pod.annotations.get(ANNOTATION_MOVED_AT)
            if moved_at and i.gang >= 0 and out[i.gang]:
                history[i.gang] = max(int(history[i.gang]), moves_within_hour(moved_at, now))
        for g in np.flatnonzero(out).tolist():
            group = gangs[g].group
            if group is not None:  # the PodGroup outlives its moved pods (docs/semantics.md)
                history[g] = max(int(history[g]), moves_within_hour(group.moved_at, now))
        out &= history < limit
        return out

    def forget(self, gang: Gang) -> None:
        """``gang`` was evicted (or changed) later in the call: its pods' moves are void."""
        if not self._built:
            self._forgotten.append(gang.idx)
            return
        self.g_movable[gang.idx] = False
        for m in gang.members:
            self.moves.pop(m, None)

    # -- the search ----------------------------------------------------------------------------

    def _live_movable(self, g: int, w: int, want: int, room: int) -> bool:
        """Whether gang ``g`` may move for W now and could help: its largest pod is smaller than W's
        (a pod as large needs the room W lacks) and fits the most free GPUs of a node (``room``)."""
        if g == w or not self.g_movable[g] or g in self.moved_gangs:
            return False
        if self.g_big[g] >= want or self.g_big[g] > room:
            return False
        gang = self.gangs[g]
        return not gang.evicted and all(self.pods[m].node is not None for m in gang.members)

    def hopeless(self, members: list[int], required: int) -> bool:
        """Whether no plan can be found now, by tests that change nothing and cost little: the
        budget is spent, or the whole cluster has fewer free GPUs than the gang needs (then
        :meth:`plan` gives None whatever the queue gates say)."""
        if self.budget <= 0 or self.plans_left <= 0:
            return True
        return int(self.placer.cluster.free_whole.sum()) < self.placer.gang_need(members[:required])

    def plan(self, gang: Gang, members: list[int], required: int,
             state: object = None) -> GangPlacement | None:
        """A committed placement of ``gang`` (``members`` pending, ``required`` of them at least)
        with the moves that make room for it, or None (nothing changed). One plan moves at most
        ``max(1, need // gpusPerMove)`` pods (docs/semantics.md, "Limits": moves per GPU).

        ``state``: what names the placement state now (the caller's: it changes with every change of
        bindings, moves and GPUs held; None: not known). A search that failed is not run again for a
        gang alike (:meth:`_shape`) in the same state: a failed search changes nothing but
        ``plans_left`` (taken once more, as the search would)."""
        shape = self._shape(gang, members, required, state) if self.MEMO and state is not None else None
        if shape is not None and shape in self._failed:
            if self.plans_left > 0:
                self.plans_left -= 1  # every failure remembered got past the cheap tests
            return None
        left = self.plans_left
        placed = self._budgeted(gang, members, required)
        if placed is None and shape is not None and self.plans_left < left:
            self._failed.add(shape)  # a failed search leaves the state as it was
        return placed

    def _shape(self, gang: Gang, members: list[int], required: int, state: object) -> tuple[object, ...] | None:
        """What a search for ``gang`` reads of it, with ``state`` (the placement state's name) and the
        budget: the movable gangs and moves change only with the placement state. None where it is not
        worked out (members running, claims)."""
        if gang.alive:
            return None
        pods, placer = self.pods, self.placer
        key = placer.feasibility.key
        parts: list[object] = [required, gang.topology_required, gang.topology_preferred,
                               gang.group.placement if gang.group is not None else None,
                               self.now - gang.creation < self.config.min_wait_s, self.budget]
        for m in members:
            info = pods[m]
            pod = info.pod
            if pod.claims or pod.device_wait:
                return None
            parts.append((key(pod), info.res.tobytes(), info.whole, info.blocks, info.gpu_mem_bytes, info.flavor,
                          placer.rule_signature(info), pod.host_ports, pod.preferred_affinity, pod.tolerations))
        parts.append(state)
        return tuple(parts)

    def _budgeted(self, gang: Gang, members: list[int], required: int) -> GangPlacement | None:
        """:meth:`plan`'s search, within the moves one plan may make."""
        per = self.config.gpus_per_move
        if per <= 0:
            return self._plan(gang, members, required)
        before = self.budget
        cap = min(before, max(1, sum(self.pods[m].whole for m in members[:required]) // per))
        self.budget = cap
        try:
            return self._plan(gang, members, required)
        finally:
            self.budget = before - (cap - self.budget)

    def _plan(self, gang: Gang, members: list[int], required: int) -> GangPlacement | None:
        if self.budget <= 0 or self.plans_left <= 0:
            return None
        if self.now - gang.creation < self.config.min_wait_s:
            return None  # it has not waited long enough
        placer, pods = self.placer, self.pods
        cluster = placer.cluster
        first = pods[members[0]]
        want = first.whole
        if want <= 0:
            return None
        free = cluster.free_whole
        need = placer.gang_need(members[:required])
        if int(free.sum()) < need:
            return None  # not fragmentation: the GPUs are not there in total (a full cluster: at once)
        mask = placer.feasibility.mask(first.pod)
        if int(free[mask].sum()) < need:
            return None  # not fragmentation: the GPUs are not there in total
        if not self._built:
            self._build()
        if not self.g_movable.any():
            return None
        node_of = placer.node_of
        room = int(free.max())
        # Pods of the gangs that may move for W and could help (vectorised over all pods).
        g_ok = self.g_movable & (self.g_big < want) & (self.g_big <= room) & (self.g_gpus < need)
        g_ok[gang.idx] = False
        helpful = g_ok[self.p_gang_clipped] & self.p_ours & (node_of >= 0)
        if not helpful.any():
            return None
        idx = np.flatnonzero(helpful)
        nodes_of = node_of[idx]
        whole = self.p_whole[idx]
        mov = np.bincount(nodes_of, weights=whole, minlength=len(free)).astype(np.int64)
        short_mask = mask & (free < want) & (free + mov >= want)
        if not short_mask.any():
            return None
        self.plans_left -= 1
        # The helpful pods on short nodes, by node: ``at[n]`` .. ``at[n + 1]`` in ``by_node``.
        on = short_mask[nodes_of]
        idx, nodes_of, whole = idx[on], nodes_of[on], whole[on]
        order = np.argsort(nodes_of, kind="stable")
        idx, nodes_of, whole = idx[order], nodes_of[order], whole[order]
        short = np.flatnonzero(short_mask)
        deficit = want - free[short]
        short = short[np.argsort(deficit, kind="stable")]
        w = gang.idx
        tests = 0
        # Single movers: a gang with GPUs on a short node that its leaving would fill.
        gangs_of = self.p_gang[idx]
        pair = gangs_of * len(free) + nodes_of
        pairs, inverse = np.unique(pair, return_inverse=True)
        sums = np.bincount(inverse, weights=whole).astype(np.int64)
        fills = free[pairs % len(free)] + sums >= want
        singles = np.unique(pairs[fills] // len(free)).tolist()
        ranked = sorted(singles, key=lambda g: (int(self.g_pods[g]), int(self.g_gpus[g]), self.gangs[g].key))
        for g in ranked[:SINGLES]:
            if self.g_pods[g] > self.budget or not self._live_movable(g, w, want, room):
                continue
            tests += 1
            placed = self._check(gang, members, required, [g], keep=True)
            if placed is not None:
                return placed
        # Greedy: fill the short nodes one after the other with the smallest movers there, until as
        # many more copies of W's largest pod fit as its pods of that size lack room for now.
        big = sum(1 for m in members[:required] if pods[m].whole >= want)
        lacking = max(1, big - int((free[mask] // want).sum()))
        chosen: list[int] = []
        filled = 0
        for n in short[:min(lacking + GREEDY_NODES, MAX_GREEDY_NODES)].tolist():
            if tests >= MAX_TESTS:
                break
            lo, hi = np.searchsorted(nodes_of, [n, n + 1])
            here = sorted(set(gangs_of[lo:hi].tolist()) - set(chosen),
                          key=lambda g: (int(self.g_pods[g]), -int(self.g_gpus[g]), self.gangs[g].key))
            gap = want - int(free[n])
            took: list[int] = []
            for g in here:
                if gap <= 0:
                    break
                if not self._live_movable(g, w, want, room):
                    continue
                took.append(g)
                gap -= sum(pods[m].whole for m in self.gangs[g].members if pods[m].node == n)
            if gap > 0 or not took:
                continue  # this node cannot be filled by movers alone
            if (sum(int(self.g_pods[g]) for g in chosen + took) > self.budget
                    or sum(int(self.g_gpus[g]) for g in chosen + took) >= need):
                break
            chosen += took
            filled += 1
            if filled < lacking:
                continue
            tests += 1
            if self._check(gang, members, required, chosen, keep=False) is None:
                continue
            # Drop every mover found unneeded: the largest first.
            for g in sorted(chosen, key=lambda g: (-int(self.g_pods[g]), -int(self.g_gpus[g]), self.gangs[g].key)):
                if len(chosen) == 1 or tests >= MAX_TESTS:
                    break
                rest = [c for c in chosen if c != g]
                tests += 1
                if self._check(gang, members, required, rest, keep=False) is not None:
                    chosen = rest
            return self._check(gang, members, required, chosen, keep=True)
        return None

    def _check(self, gang: Gang, members: list[int], required: int, movers: list[int],
               keep: bool) -> GangPlacement | None:
        """Take ``movers`` off their nodes, place ``gang``, then every mover whole (largest first).
        All placed: kept when ``keep`` (the moves recorded), else rolled back; a placement of
        ``gang`` is returned. Anything not placed: everything as it was, None."""
        placer, pods, gangs = self.placer, self.pods, self.gangs
        saved: list[Assignment] = []
        for g in movers:
            for m in gangs[g].members:
                info = pods[m]
                assert info.node is not None
                saved.append(Assignment(m, info.node, info.gpus, info.bound_blocks))
                placer.release(m)
        done: list[Assignment] = []
        placed = placer.place_gang(gang, members, required)
        ok = placed.ok
        if ok:
            done += placed.assignments
            for g in sorted(movers, key=lambda g: (-int(self.g_gpus[g]), -int(self.g_pods[g]), gangs[g].key)):
                got = self._place_mover(gangs[g])
                if not got.ok:
                    ok = False
                    break
                done += got.assignments
        if not ok or not keep:
            for a in reversed(done):
                placer.release(a.pod)
            for a in saved:
                placer.commit(a)
            return placed if ok else None
        dst = {a.pod: a for a in done}
        for a in saved:
            self.moves[a.pod] = PlannedMove(a.pod, a, dst[a.pod], gang.key)
        self.moved_gangs.update(movers)
        self.g_movable[movers] = False
        self.budget -= len(saved)
        return GangPlacement(True, placed.assignments)

    def _place_mover(self, mover: Gang) -> GangPlacement:
        """``mover`` placed whole by the ordinary placement, on its flavor's nodes when it took one
        (its usage stays on that flavor's quota dimensions)."""
        f = self.pods[mover.members[0]].flavor
        pinned = self.on_flavor(mover.members, f) if self.on_flavor is not None and f >= 0 else nullcontext()
        with pinned:
            return self.placer.place_gang(mover, mover.members_by_size, len(mover.members))
