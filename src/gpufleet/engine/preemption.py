"""Choosing victims: the eligible gangs, and among the sets that make a gang fit, the best one.

The search follows the spec's preference order. Criteria 1 and 2 (the victims' queues as far
above quota as possible, then the lowest priority) fix a *level*: the pool of candidates whose
queue share is at least s and priority at most p. Levels are tried best first; the first level
whose pool can make the gang fit decides criteria 1 and 2 for every set inside it. Within that
pool the search looks for the fewest victims, then the least capacity, the latest start, and the
names: singletons first (filtered by a vectorised capacity check, then verified), every subset
when the pool is small, and otherwise a greedy fill per node (or globally, for gangs) followed by
dropping every victim that is not needed. Each candidate set is verified by the real placement
and quota code on the live state, then rolled back.

The search reads its :class:`~gpufleet.engine.victims.VictimIndex` and calls the engine back only
through :class:`VictimHost` (gates, trial placements, unbind and rebind): it imports nothing of
the scheduler, and the engine's layers contract keeps it so.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Protocol

import numpy as np

from gpufleet.engine.cluster import BoolArray, IntArray
from gpufleet.engine.placement import GangPlacement
from gpufleet.engine.victims import VictimIndex
from gpufleet.engine.workload import Gang

__all__ = ["ElasticSearch", "VictimHost", "find_victims"]

EXHAUSTIVE_POOL = 12  # pools this small are searched subset by subset
MAX_TESTS = 1500  # placement checks one search may make
SINGLETON_TRIES = 16
GREEDY_NODES = 8
GREEDY_STEPS = 64
CHUNK = 1024  # most gangs checked at a time when looking for a single victim
FIRST_CHUNK = 32

SetKey = tuple[int, int, float, tuple[int, ...]]
Member = Callable[[IntArray], BoolArray]  # which gangs (of those given) a level's pool holds


class VictimHost(Protocol):
    """What the victim search calls back: the engine's queue gates and its trial changes of the
    live state. Every candidate set is checked by unbinding its pods, trying the gang with the
    real gates and placement, and putting everything back, so a verdict is the engine's own."""

    def quota_gate(self, gang: Gang, request: list[int]) -> str:
        """Empty when the queue rules admit ``request`` for ``gang`` now, else the reason."""

    def gang_request(self, members: list[int]) -> list[int]:
        """What ``members`` (pod indices) count against quota."""

    def try_place(self, gang: Gang, members: list[int], request: list[int]) -> GangPlacement:
        """Quota gates, then placement on what is free now (committed on success)."""

    def release_trial(self, placed: GangPlacement) -> None:
        """Take back a placement ``try_place`` committed (undo it exactly)."""

    def unbind(self, pod: int) -> None:
        """Take a bound pod off its node, and its usage off its queues."""

    def rebind(self, pod: int, node: int, gpus: tuple[int, ...], blocks: int | None) -> None:
        """Undo ``unbind``: the pod back where it was."""


class Search:
    """One preemptor's search: candidate sets checked on the live state, and the best one kept."""

    def __init__(self, ix: VictimIndex, host: VictimHost, gang: Gang, members: list[int],
                 request: list[int]) -> None:
        self.ix = ix
        self.host = host
        self.gang = gang
        self.members = members
        self.request = request
        self.tests = 0
        self.asked = [j for j in range(len(request)) if request[j] > 0]
        self.last_size = -1
        # Verified placements per victim set: once those victims are evicted, the state is the
        # one the check saw, so the same placement is committed without searching again.
        self.placements: dict[tuple[int, ...], GangPlacement] = {}
        # When queue rules (a limit, or quota for non-preemptible work) block the gang, a victim
        # anywhere in the queue may help: the per-node capacity filters do not apply.
        self.quota_blocked = bool(host.quota_gate(gang, request))
        # Set once the exact search has spent MAX_TESTS: from then on every pool is filled greedily.
        self.fallback = False
        # The victims are units: here gangs (the spec's search); ElasticSearch makes them pods.
        self.u_queue, self.u_cap, self.u_start, self.u_rank = ix.g_queue, ix.g_cap, ix.g_start, ix.g_rank
        self.u_size, self.u_first_pod = ix.g_size, ix.g_first_pod
        self.order_small, self.order_large = ix.g_order_small, ix.g_order_large

    def unit_pods(self, v: int) -> list[int]:
        """The pods evicting unit ``v`` evicts (bound or not)."""
        return self.ix.gangs[v].members

    def unit_name(self, v: int) -> str:
        return self.ix.gangs[v].key

    def unit_quota(self, v: int) -> list[int]:
        """What unit ``v``'s running pods count against quota."""
        return self.ix.gang_quota(v, self.host.gang_request)

    # -- verification on the live state -------------------------------------------------------

    def takeable(self, victims: list[int]) -> bool:
        """Reclaim victims may only be taken while every queue on their path is above quota."""
        f, queue, cap = self.ix.forest, self.u_queue, self.u_cap
        leaf = self.gang.queue
        if all(int(queue[v]) == leaf for v in victims):
            return True  # within-queue preemption: no reclaim path to check
        usage = [list(row) for row in f.usage]
        for v in sorted(victims, key=lambda g: (cap[g], self.unit_name(g))):
            x = int(queue[v])
            if x != leaf:
                for q in f.reclaim_path(x, leaf):
                    if not f.above_quota(q, self.asked, usage):
                        return False
            vec = self.unit_quota(v)
            for q in f.paths[x]:
                usage[q] = [u - int(d) for u, d in zip(usage[q], vec, strict=True)]
        return True

    def fits(self, victims: list[int]) -> bool:
        """Whether evicting ``victims`` lets the gang in: their pods are unbound, the gang tried
        by the engine's own gates and placement, and everything put back as it was."""
        self.tests += 1
        if not self.takeable(victims):
            return False
        ix, host = self.ix, self.host
        saved: list[tuple[int, int, tuple[int, ...], int | None]] = []
        for v in victims:
            for m in self.unit_pods(v):
                info = ix.pods[m]
                if info.node is not None:
                    saved.append((m, info.node, info.gpus, info.bound_blocks))
                    host.unbind(m)
        placed = host.try_place(self.gang, self.members, self.request)
        if placed.ok:
            self.placements[tuple(sorted(victims))] = placed
            host.release_trial(placed)
        for m, node, gpus, blocks in reversed(saved):
            host.rebind(m, node, gpus, blocks)
        return placed.ok

    # -- keys ---------------------------------------------------------------------------------

    def key(self, victims: list[int]) -> SetKey:
        cap, start, rank = self.u_cap, self.u_start, self.u_rank
        return (
            len(victims),
            int(sum(int(cap[v]) for v in victims)),
            -min(float(start[v]) for v in victims),
            tuple(sorted(int(rank[v]) for v in victims)),
        )

    def preference(self, pool: IntArray, largest_first: bool = False) -> IntArray:
        """Pool gangs ordered for singletons (least capacity first) or greedy fills (largest first).

        The keys (capacity, start, name) are fixed per gang, so the index ranks every gang once
        and ordering a pool is a sort of small integers.
        """
        ranks = (self.order_large if largest_first else self.order_small)[pool]
        return pool[np.argsort(ranks, kind="stable")]

    # -- search ---------------------------------------------------------------------------------

    def single_pod(self) -> bool:
        return len(self.members) == 1 and not self.gang.topology_required and not self.gang.topology_preferred

    def could_fit_alone(self, gangs: IntArray) -> IntArray:
        """The gangs (in the given order) that pass a necessary capacity check for freeing room
        on their own: a single-pod gang must leave room for the pod on its node."""
        ix = self.ix
        if not self.single_pod() or not len(gangs) or self.quota_blocked:
            return gangs
        info = ix.pods[self.members[0]]
        c = ix.cluster
        single = self.u_size[gangs] == 1
        pods = self.u_first_pod[gangs]
        nodes = ix.node_of[pods]
        room = ix.feasibility.mask(info.pod)[nodes]
        nz = np.flatnonzero(info.res)
        room &= (c.free[nodes][:, nz] + ix.p_res[pods][:, nz] >= info.res[nz]).all(axis=1)
        if info.whole:
            room &= c.free_whole[nodes] + ix.p_gpus_freed[pods] >= info.whole
        out: IntArray = gangs[room | ~single]
        return out

    def best_singleton(self, member: Callable[[IntArray], BoolArray]) -> list[int] | None:
        """The best single victim: the first that fits among the gangs admitted by this call, and
        among the snapshot's gangs (walked in singleton preference order, a chunk at a time,
        verifying the pool members that pass the capacity check), whichever comes first by key."""
        fresh = self.ix.fresh()
        best: list[int] | None = None
        if len(fresh):
            fresh = fresh[member(fresh)]
        if len(fresh):
            for v in self.could_fit_alone(self.ix.in_singleton_order(fresh))[:SINGLETON_TRIES]:
                if self.fits([int(v)]):
                    best = [int(v)]
                    break
        ix = self.ix
        order = None
        if self.single_pod() and not self.quota_blocked and len(self.u_size) == len(ix.g_size):
            # Only gangs could_fit_alone may keep: one pass per static mask, not one per preemptor
            # past the gangs on nodes it cannot use (another flavor's, with GPU-model quotas).
            pod = ix.pods[self.members[0]].pod
            order = ix.walk_small_for(ix.feasibility.key(pod), ix.feasibility.mask(pod))
        if order is None:
            order = ix.g_sorted_small[ix.first_live_small():]
        tries = 0
        at, size = 0, FIRST_CHUNK
        while at < len(order):
            chunk = order[at:at + size]
            chunk = chunk[member(chunk) & ix.g_walk[chunk]]
            for v in self.could_fit_alone(chunk):
                if best is not None and self.key([int(v)]) > self.key(best):
                    return best
                if self.fits([int(v)]):
                    return [int(v)]
                tries += 1
                if tries >= SINGLETON_TRIES:
                    return best
            at += size
            size = min(size * 2, CHUNK)  # the best singleton is usually near the front
        return best

    def exhaustive(self, pool: IntArray) -> list[int] | None:
        items = [int(v) for v in pool]
        for size in range(2, len(items) + 1):
            found: list[list[int]] = []
            for combo in itertools.combinations(items, size):
                if self.tests >= MAX_TESTS:
                    break
                if self.fits(list(combo)):
                    found.append(list(combo))
            if found:
                return min(found, key=self.key)
        return None

    def minimise(self, victims: list[int], budget: bool = True) -> list[int]:
        """Drop every victim the gang does not need, least preferred victims first (within the
        budget, unless ``budget`` is False: the fallback's set must be minimal)."""
        keep = list(victims)
        cap, start, rank = self.u_cap, self.u_start, self.u_rank
        for v in sorted(victims, key=lambda g: (-cap[g], start[g], -rank[g])):
            trial = [g for g in keep if g != v]
            if trial and (not budget or self.tests < MAX_TESTS) and self.fits(trial):
                keep = trial
        return keep

    def greedy_fallback(self, pool: IntArray) -> list[int] | None:
        """Once the budget is spent: every eligible gang of ``pool`` added largest first while the
        set stays takeable, fit checked at doubling sizes (then the smallest fitting prefix found
        by bisection), and every victim not needed dropped. Eligible and minimal, maybe not the best."""
        chosen: list[int] = []
        for v in self.preference(pool, largest_first=True):
            if self.takeable([*chosen, int(v)]):
                chosen.append(int(v))
        if not chosen:
            return None
        lo, k = 0, 1
        while not self.fits(chosen[:k]):
            if k == len(chosen):
                return None
            lo, k = k, min(2 * k, len(chosen))
        hi = k
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.fits(chosen[:mid]):
                hi = mid
            else:
                lo = mid
        return self.minimise(chosen[:hi], budget=False)

    def greedy(self, ordered: IntArray) -> list[int] | None:
        chosen: list[int] = []
        for v in ordered[:GREEDY_STEPS]:
            chosen.append(int(v))
            if self.fits(chosen):
                return self.minimise(chosen, budget=False)  # at most GREEDY_STEPS checks: always minimal
            if self.tests >= MAX_TESTS:
                break
        return None

    def greedy_by_node(self, pool_mask: BoolArray) -> list[int] | None:
        ix = self.ix
        pool = np.flatnonzero(pool_mask)
        info = ix.pods[self.members[0]]
        c = ix.cluster
        pods = ix.live_pods_of(pool_mask)
        nodes = ix.node_of[pods]
        n_nodes = len(c.nodes)
        freed_whole = np.bincount(nodes, weights=ix.p_gpus_freed[pods], minlength=n_nodes)
        nz = np.flatnonzero(info.res)
        room = ix.feasibility.mask(info.pod).copy()
        for j in nz:
            freed = np.bincount(nodes, weights=ix.p_res[pods][:, j], minlength=n_nodes)
            room &= c.free[:, j] + freed >= info.res[j]
        if info.whole:
            room &= c.free_whole + freed_whole >= info.whole
        best: list[int] | None = None
        for node in np.flatnonzero(room)[:GREEDY_NODES]:
            on_node = np.unique(ix.p_gang[pods[nodes == node]])
            found = self.greedy(self.preference(np.intersect1d(pool, on_node), largest_first=True))
            if found and (best is None or self.key(found) < self.key(best)):
                best = found
        return best

    def in_pool(self, member: Callable[[IntArray], BoolArray]) -> tuple[list[int] | None, int]:
        """The best set inside the pool that ``member`` defines, and the pool's size."""
        single = self.best_singleton(member)
        if single is not None:
            return single, -1
        pool_mask = member(self.ix.g_all)
        pool = np.flatnonzero(pool_mask)
        size = len(pool)
        if size == self.last_size or size == 0:
            return None, size
        self.last_size = size
        return self._sets(pool, pool_mask), size

    def _sets(self, pool: IntArray, pool_mask: BoolArray) -> list[int] | None:
        size = len(pool)
        if self.fallback:
            return self.greedy_fallback(pool)
        if size <= EXHAUSTIVE_POOL:
            return self.exhaustive(pool)
        found = self.greedy_by_node(pool_mask) if self.single_pod() and not self.quota_blocked else None
        if found is None:
            found = self.greedy(self.preference(pool, largest_first=True))
        return found


class ElasticSearch(Search):
    """The search over elastic victims (docs/semantics-notes.md, "Elastic members are preempted
    first"): its units are pods (by pod index), the bound pods of the gangs running more than
    minMember pods, at most ``bound - minMember`` of one gang in a set; each pod keeps its gang's
    eligibility. The per-pod arrays are the index's, made once per call."""

    def __init__(self, ix: VictimIndex, host: VictimHost, gang: Gang, members: list[int],
                 request: list[int]) -> None:
        super().__init__(ix, host, gang, members, request)
        order = ix.pod_order()
        self.u_gang = ix.p_gang_clipped
        self.u_queue, self.u_cap, self.u_start = order.queue, ix.p_milli, ix.p_start
        self.u_rank = self.u_first_pod = order.rank
        self.u_size = order.ones
        self.sorted_small, self.order_small, self.order_large = order.sorted_small, order.at_small, order.at_large
        self._quota: dict[int, list[int]] = {}
        self.failed: set[int] = set()  # singletons checked (at a smaller level) that did not fit

    def unit_pods(self, v: int) -> list[int]:
        return [v]

    def unit_name(self, v: int) -> str:
        return self.ix.pods[v].key

    def unit_quota(self, v: int) -> list[int]:
        got = self._quota.get(v)
        if got is None:
            got = self._quota[v] = self.host.gang_request([v])
        return got

    def room(self, g: int) -> int:
        """How many pods gang ``g`` may lose: its elastic members."""
        return int(self.ix.g_bound[g] - self.ix.g_min[g])

    def takeable(self, victims: list[int]) -> bool:
        """At most ``bound - minMember`` pods of a gang, then the reclaim rule pod by pod."""
        taken: dict[int, int] = {}
        for v in victims:
            g = int(self.u_gang[v])
            taken[g] = taken.get(g, 0) + 1
            if taken[g] > self.room(g):
                return False
        return super().takeable(victims)

    def capped(self, ordered: IntArray) -> IntArray:
        """The first GREEDY_STEPS pods of ``ordered``, skipping those of a gang beyond its elastic members."""
        taken: dict[int, int] = {}
        keep: list[int] = []
        for v in ordered.tolist():
            g = int(self.u_gang[v])
            taken[g] = taken.get(g, 0) + 1
            if taken[g] <= self.room(g):
                keep.append(v)
                if len(keep) >= GREEDY_STEPS:
                    break
        return np.array(keep, dtype=np.int64)

    def best_single(self, member: Member) -> list[int] | None:
        """The first pod that fits on its own, walking the pods in singleton preference order a
        chunk at a time (those of the pool that pass the capacity check), SINGLETON_TRIES at most."""
        ix, order, failed = self.ix, self.sorted_small, self.failed
        tries, at, size = 0, 0, FIRST_CHUNK
        while at < len(order):
            chunk = order[at:at + size]
            chunk = chunk[ix.elastic(chunk) & member(ix.p_gang_clipped[chunk])]
            for v in self.could_fit_alone(chunk).tolist():
                if v in failed:
                    continue  # checked at a smaller level: the state is the same, it fails again
                if self.fits([v]):
                    return [v]
                failed.add(v)
                tries += 1
                if tries >= SINGLETON_TRIES:
                    return None
            at += size
            size = min(size * 2, CHUNK)
        return None

    def in_pool(self, member: Member) -> tuple[list[int] | None, int]:
        single = self.best_single(member)
        if single is not None:
            return single, -1
        ix = self.ix
        every = np.arange(len(ix.pods), dtype=np.int64)
        pool = np.flatnonzero(ix.elastic(every) & member(ix.p_gang_clipped))
        size = len(pool)
        if size == self.last_size or size == 0:
            return None, size
        self.last_size = size
        if self.fallback:
            return self.greedy_fallback(pool), size
        if size <= EXHAUSTIVE_POOL:
            return self.exhaustive(pool), size
        return self.greedy(self.capped(self.preference(pool, largest_first=True))), size


def _best(search: Search, levels: list[tuple[bool, Member]]) -> tuple[list[int] | None, int]:
    """The best set of the first level (criteria 1 and 2, best first) that has one, and the size
    of the largest pool looked at."""
    n_eligible = 0
    for first, member in levels:
        if first:
            search.last_size = -1
        found, size = search.in_pool(member)
        n_eligible = max(n_eligible, size)
        if found is None and search.tests >= MAX_TESTS and not search.fallback:
            search.fallback = True  # the exact search is spent: this pool again, greedily
            search.last_size = -1
            found, size = search.in_pool(member)
        if found is not None:
            return sorted(found), n_eligible
    return None, n_eligible


def find_victims(
    ix: VictimIndex, host: VictimHost, gang: Gang, members: list[int], request: list[int]
) -> tuple[list[int] | None, str, GangPlacement | None, bool]:
    """The best victim set for ``gang`` and the placement it allows, or None with a reason; the
    last item says whether the set is of elastic victims (pod indices) or of gangs (gang indices).

    With a set, the text is empty, or says that the exact search ran out of its budget and the set,
    eligible and minimal all the same, may not be the best.

    The state is as before when it returns: every check is rolled back, and nothing is evicted.
    """
    f = ix.forest
    leaf = gang.queue
    asked = [j for j in range(len(request)) if request[j] > 0]
    within = f.within_queue_allowed(leaf)
    reclaim = f.reclaim_allowed(leaf) and f.in_quota(leaf, request)
    queue_ok = np.zeros(len(f.queues), dtype=np.bool_)
    if reclaim and asked:
        for x in range(len(f.queues)):
            if x != leaf and f.is_leaf(x):
                queue_ok[x] = all(f.above_quota(q, asked) for q in f.reclaim_path(x, leaf))
    q_eligible = queue_ok.copy()
    if within:
        q_eligible[leaf] = True
    # No eligible queue with a live gang: said before building the index (maybe_live: a queue may have one).
    if not ix.built and not (q_eligible & np.array(ix.maybe_live(), dtype=np.bool_)).any():
        return None, "no eligible victims", None, False
    ix.ready()
    live = ix.g_live
    q_eligible &= ix.q_live_count > 0
    if not q_eligible.any():
        return None, "no eligible victims", None, False
    share_of_queue = np.array([f.borrowed_share(q) for q in range(len(f.queues))])
    levels: list[tuple[bool, Member]] = []
    for s in sorted({float(share_of_queue[q]) for q in np.flatnonzero(q_eligible)}, reverse=True):
        q_level = q_eligible & (share_of_queue >= s)
        for k, p in enumerate(ix.priorities):

            def member(g: IntArray, q_level: BoolArray = q_level, p: int = p) -> BoolArray:
                queue = ix.g_queue_clipped[g]
                prio = ix.g_prio[g]
                own = queue == leaf
                ok = live[g] & q_level[queue] & (prio <= p)
                result: BoolArray = ok & (~own | (prio < gang.priority) & within) & (own | queue_ok[queue])
                return result

            levels.append((k == 0, member))
    tests = 0
    if ix.n_elastic:  # elastic victims first; the gangs only when they cannot make room
        elastic = ElasticSearch(ix, host, gang, members, request)
        pods, _ = _best(elastic, levels)
        if pods is not None:
            return pods, _note(elastic, len(pods), "pods"), elastic.placements.get(tuple(pods)), True
        tests = elastic.tests
    ix.rank_again()
    search = Search(ix, host, gang, members, request)
    search.tests = tests
    victims, n_eligible = _best(search, levels)
    if victims is not None:
        return victims, _note(search, len(victims), "gangs"), search.placements.get(tuple(victims)), False
    if n_eligible <= 0:
        return None, "no eligible victims", None, False
    return None, f"does not fit even after evicting every eligible gang ({n_eligible} eligible)", None, False


def _note(search: Search, count: int, what: str) -> str:
    if search.tests < MAX_TESTS:
        return ""
    return (f"the exact search ran out of its {MAX_TESTS} checks; the set of "
            f"{count} {what} evicted is eligible and minimal but may not be the best")
