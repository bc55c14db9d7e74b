"""Who may still be a victim: the per-gang and per-pod arrays the victim search filters with NumPy.

The index is made once per ``schedule()`` call, after the snapshot's running pods are bound, and
its arrays built on the call's first victim search (as of the call's start: most calls never search).
Gangs running in the snapshot are victims until evicted or grown by this call; a gang wholly
pending in the snapshot becomes one when this call admits it (:meth:`VictimIndex.admit`: the
"victims admitted in the same pass" of docs/semantics-notes.md), unless it was withdrawn once
already. The singleton walk over the snapshot's gangs resumes where it stopped
(:meth:`VictimIndex.first_live_small`); the few gangs admitted by the call are walked apart.

The search itself is in :mod:`gpufleet.engine.preemption`; the engine owns the index and keeps it
up to date through ``retire``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter

import numpy as np

from gpufleet.domain import MILLI, MILLI_PER_BLOCK
from gpufleet.engine.cluster import BoolArray, ClusterState, IntArray
from gpufleet.engine.feasibility import StaticFeasibility
from gpufleet.engine.queues import QueueForest
from gpufleet.engine.workload import Gang, PodInfo

__all__ = ["VictimIndex"]

WALK_WINDOW = 4096  # gangs looked at per step when skipping those no longer victims


def _column(items: Sequence[object], name: str, count: int) -> IntArray:
    """The int attribute ``name`` of every item, as an array (one C-level pass)."""
    out: IntArray = np.fromiter(map(attrgetter(name), items), dtype=np.int64, count=count)
    return out


@dataclass(frozen=True, slots=True)
class PodOrder:
    """Per-pod arrays of the elastic search (a pod is a victim unit there)."""

    rank: IntArray  # the pod's own index: pods are numbered in name order
    queue: IntArray  # its gang's leaf queue
    ones: IntArray
    sorted_small: IntArray  # pods in singleton preference order: least capacity, latest start, name
    at_small: IntArray  # each pod's position in that order
    at_large: IntArray  # and in the greedy one (largest first)


class VictimIndex:
    """The state victim search reads: the world it looks at (gangs, pods, queues, nodes, where
    pods are bound) and the arrays derived from it, keyed by gang (``g_*``) or pod (``p_*``).

    ``node_of`` is the placer's live array of each pod's node (-1: not bound); it is read, never
    written, here.
    """

    # The singleton walk per static mask (walk_small_for); False (tests): the whole walk always.
    WALK_BY_MASK = True

    def __init__(self, gangs: Sequence[Gang], pods: Sequence[PodInfo], requests: IntArray,
                 forest: QueueForest, cluster: ClusterState, feasibility: StaticFeasibility,
                 node_of: IntArray) -> None:
        self.gangs = gangs
        self.pods = pods
        self.forest = forest
        self.cluster = cluster
        self.feasibility = feasibility
        self.node_of = node_of
        self.requests = requests
        # Built on the first victim search (:meth:`ready`); most calls never search. Until then the
        # call only admits gangs (nothing is unbound or evicted without a search), so the state as
        # of now is kept -- who is bound, each gang's running count -- and the admissions replayed.
        self._alive0 = _column(gangs, "alive", len(gangs))
        self._bound0: BoolArray = node_of >= 0
        self._admitted: list[Gang] | None = []
        # Before the build: per queue (clipped at 0, as ``q_live_count``), whether a gang of it may be
        # live (``maybe_live``): running at the start and preemptible, or admitted since and preemptible.
        self._maybe0: list[bool] | None = None
        self._maybe_admitted: set[int] = set()
        self._guarded_queues: list[bool] | None = None  # _guarded, per queue (made on the first admission)
        self._queue_preemptible: tuple[IntArray, BoolArray] | None = None  # _columns

    @property
    def built(self) -> bool:
        """Whether the arrays are built (:meth:`ready`)."""
        return self._admitted is None

    def maybe_live(self) -> list[bool]:
        """Per queue, False where no gang of it is live now (``q_live_count`` is 0), True where one may
        be: once built, ``q_live_count > 0``; before, without the build (the victim search's first
        test, which most searches of a call whose queues hold no victim end at): a gang is live only
        while preemptible and running, since the start or admitted by this call (and then not
        protected by its queue's ``minRuntime``)."""
        if self._admitted is None:
            out: list[bool] = (self.q_live_count > 0).tolist()
            return out
        if self._maybe0 is None:
            queue, preemptible = self._columns()
            queues = np.maximum(queue, 0)[(self._alive0 > 0) & preemptible]
            self._maybe0 = (np.bincount(queues, minlength=len(self.forest.queues)) > 0).tolist()
        maybe = list(self._maybe0)
        for q in self._maybe_admitted:
            maybe[q] = True
        return maybe

    def _columns(self) -> tuple[IntArray, BoolArray]:
        """The gangs' queues and preemptibility (fixed for the call): made once, for maybe_live or the build."""
        if self._queue_preemptible is None:
            gangs = self.gangs
            n = len(gangs)
            self._queue_preemptible = (_column(gangs, "queue", n),
                                       np.fromiter(map(attrgetter("preemptible"), gangs), dtype=np.bool_, count=n))
        return self._queue_preemptible

    def _guarded(self, queue: int) -> bool:
        """Whether gangs of ``queue`` admitted by this call are never victims in it: its ``minRuntime``
        protects them (QueueForest.young_gangs: they have just started)."""
        if queue < 0:
            return False
        guarded = self._guarded_queues
        if guarded is None:
            f = self.forest
            guarded = self._guarded_queues = [f.now is not None and q.min_runtime > 0 for q in f.queues]
        return guarded[queue]

    def ready(self) -> None:
        """Build the arrays (once), as of the call's start, then replay this call's admissions."""
        admitted = self._admitted
        if admitted is None:
            return
        self._admitted = None
        self._build()
        for gang in admitted:
            self.admit(gang)

    def _build(self) -> None:
        gangs, pods, forest, requests = self.gangs, self.pods, self.forest, self.requests
        # Tens of thousands of gangs and pods: one C-level pass per field (fromiter over attrgetter).
        n_gangs, n_pods = len(gangs), len(pods)
        self.g_queue, g_preemptible = self._columns()
        self.g_prio = _column(gangs, "priority", n_gangs)
        self.g_rank = _column(gangs, "name_rank", n_gangs)
        g_alive = self._alive0
        self.g_live = (g_alive > 0) & g_preemptible
        self.p_gang = _column(pods, "gang", n_pods)
        self.p_res = requests
        self.p_whole = _column(pods, "whole", n_pods)
        # Fixed and bound blocks (0: none); a pod is fractional when it has fixed blocks or asks memory.
        p_blocks = np.fromiter((b or 0 for b in map(attrgetter("blocks"), pods)), dtype=np.int64, count=n_pods)
        p_fractional = np.fromiter(map(attrgetter("fractional"), pods), dtype=np.bool_, count=n_pods)
        p_bound_blocks = np.fromiter((b or 0 for b in map(attrgetter("bound_blocks"), pods)), dtype=np.int64,
                                     count=n_pods)
        p_bound = self._bound0  # info.node is not None, as of the call's start
        # GPUs a pod's eviction may turn back into whole free GPUs: a fractional pod may free one.
        self.p_gpus_freed = self.p_whole + p_fractional.astype(np.int64)
        self.p_gang_clipped = np.maximum(self.p_gang, 0)
        mine = self.p_gang >= 0
        bound = p_bound & mine
        milli = self.p_whole * MILLI + p_bound_blocks * MILLI_PER_BLOCK
        start = np.fromiter(map(attrgetter("start"), pods), dtype=np.float64, count=n_pods)
        self.g_cap = np.bincount(self.p_gang[bound], weights=milli[bound], minlength=len(gangs)).astype(np.int64)
        # Gangs wholly pending may be admitted, then be victims: the capacity they ask for stands
        # in (corrected on admission), and they are the most recently started work (start +inf).
        self.g_admissible = (g_alive == 0) & g_preemptible & (self.g_queue >= 0)
        asked = self.p_whole * MILLI + p_blocks * MILLI_PER_BLOCK
        asked_by_gang = np.bincount(self.p_gang[mine], weights=asked[mine], minlength=len(gangs)).astype(np.int64)
        self.g_cap[self.g_admissible] = asked_by_gang[self.g_admissible]
        self.g_start = np.full(len(gangs), np.inf)
        np.minimum.at(self.g_start, self.p_gang[bound], start[bound])
        self.g_start[np.isinf(self.g_start) & ~self.g_admissible] = 0.0
        guard = forest.young_gangs(self.g_queue, self.p_gang, bound, start)  # minRuntime (docs/semantics.md)
        if guard is not None:
            self.g_live &= ~guard[0]
            self.g_admissible &= ~guard[1]
        self.g_all = np.arange(len(gangs), dtype=np.int64)
        members = list(map(attrgetter("members"), gangs))
        self.g_size = np.fromiter(map(len, members), dtype=np.int64, count=n_gangs)
        self.g_first_pod = np.fromiter(map(itemgetter(0), members), dtype=np.int64, count=n_gangs)
        self.q_live_count = np.bincount(
            np.maximum(self.g_queue[self.g_live], 0), minlength=len(forest.queues)
        ).astype(np.int64)
        self._g_quota: dict[int, list[int]] = {}
        self.g_queue_clipped = np.maximum(self.g_queue, 0)
        self.priorities = sorted(set(self.g_prio[self.g_live].tolist()))
        self._rank()
        # Gangs admitted by this call and victims now: walked apart from the others (they are few,
        # and would otherwise stand at the front of the walk, the most recently started work).
        self.g_fresh = np.zeros(len(gangs), dtype=np.bool_)
        self.g_walk = self.g_live.copy()  # live and not fresh: the gangs the singleton walk visits
        self._fresh = np.empty(len(gangs), dtype=np.int64)  # in order of admission (each at most once)
        self._n_fresh = 0
        # Elastic members (docs/semantics-notes.md, "Elastic members are preempted first"): gangs of
        # the snapshot with a PodGroup running more than minMember pods. Counted, so that a call
        # with none pays one test per search.
        self.g_min = _column(gangs, "min_member", n_gangs)
        self.g_bound = g_alive.copy()  # bound pods of the gangs running in the snapshot, less evictions
        self.g_elastic = self.g_walk & (g_alive > self.g_min)
        for g in np.flatnonzero(self.g_elastic).tolist():  # few: a PodGroup's gang above its minMember
            self.g_elastic[g] = gangs[g].group is not None and not gangs[g].missing_group
        self.n_elastic = int(self.g_elastic.sum())
        self.p_milli = milli  # capacity a bound pod holds (what evicting it alone gives back)
        self.p_start = start
        self._p_order: PodOrder | None = None
        self._stale = False
        self.moved = False  # set by the engine when a consolidation move commits (walk_small_for)

    def _rank(self) -> None:
        """Victim preference keys are fixed per gang: rank all gangs once. A gang admitted by this
        call is ranked by the capacity it asked for (fractions asked as memory count 0 here):
        only the greedy fills' order reads that; keys and the walk of fresh gangs read ``g_cap``."""
        n = len(self.gangs)
        self.g_sorted_small = np.lexsort((self.g_rank, -self.g_start, self.g_cap))
        self.g_sorted_large = np.lexsort((self.g_rank, -self.g_start, -self.g_cap))
        self._small_cursor = 0
        # The walk in that order for one static mask (feasibility key), less the single-pod gangs
        # on a node outside it, and its cursor (:meth:`walk_small_for`); made again with the order.
        self._small_for: dict[object, tuple[IntArray, list[int]]] = {}
        self.g_order_small = np.empty(n, dtype=np.int64)
        self.g_order_small[self.g_sorted_small] = np.arange(n)
        self.g_order_large = np.empty(n, dtype=np.int64)
        self.g_order_large[self.g_sorted_large] = np.arange(n)

    # -- bookkeeping ---------------------------------------------------------------------------

    def retire(self, gang: Gang) -> None:
        """``gang`` can no longer be a victim: it was evicted or withdrawn, or gained pods in this
        call while running in the snapshot (or after being withdrawn once)."""
        self.ready()
        self.g_admissible[gang.idx] = False
        self.g_walk[gang.idx] = False
        if self.g_elastic[gang.idx]:
            self.g_elastic[gang.idx] = False
            self.n_elastic -= 1
        if self.g_live[gang.idx]:
            self.g_live[gang.idx] = False
            self.q_live_count[max(gang.queue, 0)] -= 1
        self.g_fresh[gang.idx] = False

    def admit(self, gang: Gang) -> None:
        """``gang`` gained pods in this call: a victim from now on if it was wholly pending in the
        snapshot and never withdrawn, else no longer one."""
        if self._admitted is not None:  # not built yet: replayed by ready()
            self._admitted.append(gang)
            if gang.preemptible and (q := max(gang.queue, 0)) not in self._maybe_admitted \
                    and not self._guarded(gang.queue):
                self._maybe_admitted.add(q)
            return
        g = gang.idx
        if not self.g_admissible[g]:
            self.retire(gang)
            return
        self._g_quota.pop(g, None)
        pods = self.pods
        self.g_cap[g] = sum(pods[m].whole * MILLI + (pods[m].bound_blocks or 0) * MILLI_PER_BLOCK
                            for m in gang.members if pods[m].node is not None)
        if not self.g_live[g]:
            self.g_live[g] = True
            self.g_fresh[g] = True
            self._fresh[self._n_fresh] = g
            self._n_fresh += 1
            self.q_live_count[max(gang.queue, 0)] += 1
            if gang.priority not in self.priorities:
                bisect.insort(self.priorities, gang.priority)

    def shrink(self, gang: Gang, pods: Sequence[int]) -> None:
        """``pods`` (bound members of ``gang``) were evicted as elastic victims: the gang runs on with
        the others, a victim like any other with what it holds now (its capacity, start and rank)."""
        g = gang.idx
        self.g_bound[g] -= len(pods)
        if self.g_elastic[g] and self.g_bound[g] <= self.g_min[g]:
            self.g_elastic[g] = False
            self.n_elastic -= 1
        self._g_quota.pop(g, None)
        left = [self.pods[m] for m in gang.members if self.pods[m].node is not None]
        self.g_cap[g] = sum(i.whole * MILLI + (i.bound_blocks or 0) * MILLI_PER_BLOCK for i in left)
        self.g_start[g] = min((i.start for i in left), default=0.0)
        self._stale = True  # ranked again before the next whole-gang search (rank_again)

    def rank_again(self) -> None:
        """Rank the gangs again if elastic evictions changed the keys of some (:meth:`shrink`)."""
        if self._stale:
            self._stale = False
            self._rank()

    def elastic(self, pods: IntArray) -> BoolArray:
        """Which of ``pods`` may be elastic victims now: bound pods of gangs that have elastic members."""
        out: BoolArray = self.g_elastic[self.p_gang_clipped[pods]] & (self.p_gang[pods] >= 0)
        out &= self.node_of[pods] >= 0
        return out

    def pod_order(self) -> PodOrder:
        """The per-pod arrays of the elastic search, made once per call on its first one: a pod's
        keys do not change while it may be an elastic victim."""
        if self._p_order is None:
            rank = np.arange(len(self.pods), dtype=np.int64)  # pods are numbered in name order
            small = np.lexsort((rank, -self.p_start, self.p_milli))
            large = np.lexsort((rank, -self.p_start, -self.p_milli))
            at_small = np.empty_like(rank)
            at_small[small] = rank
            at_large = np.empty_like(rank)
            at_large[large] = rank
            self._p_order = PodOrder(rank, self.g_queue[self.p_gang_clipped], np.ones_like(rank), small,
                                     at_small, at_large)
        return self._p_order

    def fresh(self) -> IntArray:
        """The victims admitted by this call (in order of admission)."""
        admitted = self._fresh[:self._n_fresh]
        out: IntArray = admitted[self.g_fresh[admitted]]
        return out

    def in_singleton_order(self, gangs: IntArray) -> IntArray:
        """``gangs`` in singleton preference order: least capacity, latest start, then name."""
        out: IntArray = gangs[np.lexsort((self.g_rank[gangs], -self.g_start[gangs], self.g_cap[gangs]))]
        return out

    # -- reads ---------------------------------------------------------------------------------

    def first_live_small(self) -> int:
        """Position in ``g_sorted_small`` of the first gang running in the snapshot that may still
        be a victim (those admitted by this call are walked apart: :meth:`fresh`).

        Such gangs only ever stop being victims in a call (evicted, or grown by it), so the walk
        resumes where the last one stopped instead of rescanning the dead prefix.
        """
        at = self._small_cursor = self._first_walkable(self.g_sorted_small, self._small_cursor)
        return at

    def _first_walkable(self, order: IntArray, at: int) -> int:
        """The first position from ``at`` in ``order`` whose gang may still be a victim (a window
        of ``g_walk`` at a time), or ``len(order)``."""
        walk = self.g_walk
        while at < len(order):
            window = walk[order[at:at + WALK_WINDOW]]
            hit = int(np.argmax(window))
            if window[hit]:
                return at + hit
            at += len(window)
        return at

    def walk_small_for(self, key: object, mask: BoolArray) -> IntArray | None:
        """``g_sorted_small`` from its first gang that may still be a victim (as
        :meth:`first_live_small`), less the gangs of one pod whose node is outside ``mask`` (the
        static mask of feasibility key ``key``): those a single-pod preemptor of that mask can never
        free room with on their own (``Search.could_fit_alone`` drops them). A superset of what that
        check keeps, in the same order. None once a consolidation move changed a running gang's
        node (the cached nodes would be stale)."""
        if self.moved or not self.WALK_BY_MASK:
            return None
        got = self._small_for.get(key)
        if got is None:
            order = self.g_sorted_small
            keep = (self.g_size[order] != 1) | mask[self.node_of[self.g_first_pod[order]]]
            got = self._small_for[key] = (order[keep], [0])
        order, cursor = got
        at = cursor[0] = self._first_walkable(order, cursor[0])
        out: IntArray = order[at:]
        return out

    def gang_quota(self, g: int, quota_of: Callable[[list[int]], list[int]]) -> list[int]:
        """What gang ``g``'s running members count against quota (what evicting it gives back),
        by ``quota_of`` (what a set of pods counts). Asked once per gang, the first time the
        search needs it: a victim's running members do not change while it is one."""
        got = self._g_quota.get(g)
        if got is None:
            got = quota_of([m for m in self.gangs[g].members if self.pods[m].node is not None])
            self._g_quota[g] = got
        return got

    def live_pods_of(self, pool: BoolArray) -> IntArray:
        """Indices of bound pods belonging to the gangs of ``pool`` (a mask over gangs)."""
        return np.flatnonzero(pool[self.p_gang_clipped] & (self.p_gang >= 0) & (self.node_of >= 0))
