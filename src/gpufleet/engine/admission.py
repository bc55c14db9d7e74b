"""Who is tried next: candidate gangs per leaf queue, and the fair-order pick between queue heads.

Each leaf queue offers its gangs in its own order (priority, creation, name). Between the queue
heads, gangs whose request fits their queue's quota go first; among those (or among all, when
none fits) the pick descends the queue tree level by level, taking the child with the lowest
dominant usage (in quota) or borrowed share (borrowing), ties by the gangs' own order.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from heapq import heapify, heappop, heappush

from gpufleet.engine.queues import NONE, QueueForest
from gpufleet.engine.tenancy import PendingLimits
from gpufleet.engine.workload import Gang, PodInfo

__all__ = ["FairOrder", "Turn", "gated_reason"]

GATED_REASON = "waiting for scheduling gates: "


def gated_reason(gates: Sequence[str]) -> str:
    """The pending reason of a gang whose pods carry ``spec.schedulingGates``."""
    return GATED_REASON + ", ".join(gates)


class FairOrder:
    """Candidates and picks over the live gangs. ``evicted`` is the engine's set (or mapping) of
    evicted pods, read live; ``open_gangs`` the gangs with a member not running, the only ones
    that can be candidates (a gang running whole only becomes pending again by eviction, and is
    then done)."""

    def __init__(self, forest: QueueForest, gangs: Sequence[Gang], pods: Sequence[PodInfo],
                 evicted: Container[int], open_gangs: list[int], limits: PendingLimits | None = None) -> None:
        self.forest = forest
        self.limits = limits  # maxPendingGangsPerUser of Projects (None: no Project sets one)
        self.gangs = gangs
        self.pods = pods
        self.evicted = evicted
        self.open_gangs = open_gangs
        # Quota requests of gangs with no member bound and none evicted: all their members are
        # pending, and an unbound pod counts the same against quota whenever it is asked.
        self.whole_requests: dict[int, list[int]] = {}
        self.ties: dict[int, Tiebreak] = {}  # tie(): gang -> (-priority, creation, key)

    def pending_members(self, gang: Gang) -> list[int]:
        """Members not bound and not evicted, largest first."""
        return [m for m in gang.members_by_size if self.pods[m].node is None and m not in self.evicted]

    def candidates(self) -> dict[int, list[int]]:
        """Candidate gangs per leaf queue, in the queue's own order."""
        per_leaf: dict[int, list[int]] = {}
        limits = self.limits
        capped: list[int] = []  # gangs of users with a cap on pending gangs: chosen after the loop
        pods, evicted = self.pods, self.evicted
        for g in self.open_gangs:
            gang = self.gangs[g]
            if gang.evicted or gang.queue < 0:
                continue
            for m in gang.members_by_size:  # a pending member (pending_members not empty)?
                if pods[m].node is None and m not in evicted:
                    break
            else:
                continue
            if gang.missing_group:  # api.md: it waits until its PodGroup exists
                gang.pending_reason = f"pod group {gang.key} does not exist"
                continue
            if gang.policy_reason:  # a Project rule (engine/tenancy.py)
                gang.pending_reason = gang.policy_reason
                continue
            if gang.gates:
                gang.pending_reason = gated_reason(gang.gates)
                continue
            total = len(gang.members)
            if gang.alive == 0 and total < gang.min_member:
                gang.pending_reason = (f"gang {gang.key} has {total} of minMember {gang.min_member} pods")
                continue
            if limits is not None and g in limits.slot_of:
                capped.append(g)
                continue
            per_leaf.setdefault(gang.queue, []).append(gang.idx)
        if capped:
            assert limits is not None
            for g in limits.select(capped, self.gangs):
                per_leaf.setdefault(self.gangs[g].queue, []).append(g)
        ties, gangs = self.ties, self.gangs
        for lst in per_leaf.values():
            for g in lst:  # every tiebreak made (as tie() makes it), then sorted by a C-level lookup
                if g not in ties:
                    gang = gangs[g]
                    ties[g] = (-gang.priority, gang.creation, gang.key)
            lst.sort(key=ties.__getitem__)
        return per_leaf

    def tie(self, g: int) -> Tiebreak:
        """Gang ``g``'s place in its queue's order and its tiebreak in the fair order: (-priority,
        creation, key), fields that do not change during the call (worked out once per gang)."""
        got = self.ties.get(g)
        if got is None:
            gang = self.gangs[g]
            got = self.ties[g] = (-gang.priority, gang.creation, gang.key)
        return got

    def turn(self, per_leaf: dict[int, list[int]], request_of: Callable[[list[int]], list[int]]) -> Turn:
        """One cycle's fair order over ``per_leaf`` (from :meth:`candidates`); ``request_of`` gives
        what a gang's pending members count against quota (taken when the gang becomes a head)."""
        return Turn(self, per_leaf, request_of)


Tiebreak = tuple[int, float, str]
# A queue's entry in its parent's heap: (fair key, tiebreak of the best head below it, position
# among its siblings, stamp, queue, that head). Entries whose stamp is not the queue's current
# one are stale and skipped; the position settles ties the way a scan of the siblings would.
Entry = tuple[float, Tiebreak, int, int, int, int]
IN_QUOTA, BORROWING = 0, 1
MAX_RUN_LEAVES = 8  # leaves with a head beyond which Turn.answer_run leaves the picks to the tournament


class Turn:
    """One cycle's heads and the fair-order pick between them: a tournament over the queue forest.

    Each queue keeps, per mode (in-quota heads with dominant-usage keys; all heads with
    borrowed-share keys), a heap of its children's entries: a child's fair key and its best
    head's tiebreak. The best head of a queue is that of its top entry, so the pick is the top
    of the roots' heap. An admission, eviction or new head re-keys only the queues on the
    changed leaf's path (O(depth x log fan-out)); borrowing mode is brought up to date only
    when no head is in quota.

    In-quota tests are exact but rarely repeated: a head of leaf X with request r is in quota
    iff r <= quota(A) - guaranteed(A) on every queue A of X's path (once a test passes at a
    queue, the whole request carries to the next). Guaranteed usage changes only on the paths of
    leaves whose usage changed (``QueueForest.touched``); where it grew, only in-quota heads
    asking more than the queue's slack can fall out (``ub``: an upper bound of what in-quota
    heads below a queue ask), and where it shrank only heads out of quota below it can come in
    (``outside``: how many there are). Only those heads are tested again (``_in_quota``: the
    rule of ``QueueForest.in_quota`` in that form; tests/engine/test_fair_order.py holds them equal).
    A queue's bound is never below its children's (bounds grow along the whole path, and shrink
    only at a leaf or to the largest of a queue's children).
    No closures, no reference cycles: a cycle's structure dies by reference counting.
    """

    def __init__(self, order: FairOrder, per_leaf: dict[int, list[int]],
                 request_of: Callable[[list[int]], list[int]]) -> None:
        f = order.forest
        n = len(f.queues)
        self.forest = f
        self.order = order
        self.per_leaf = per_leaf
        self.request_of = request_of
        self.top = n  # the virtual parent of the roots
        self.up = [p if p != NONE else n for p in f.parent]
        self.kids: list[list[int]] = [*f.children, f.roots]
        self.pos = [0] * n
        for kids in self.kids:
            for i, c in enumerate(kids):
                self.pos[c] = i
        m = f.m
        self.zero = [0] * m
        self.ptr = dict.fromkeys(per_leaf, 0)
        self.head = [-1] * n
        self.req: list[list[int]] = [self.zero] * n
        self.tie: list[Tiebreak] = [(0, 0.0, "")] * n
        self.inq = [False] * n
        self.ub: list[list[int]] = [self.zero] * n  # rows replaced, never changed in place
        self.outside = [0] * n
        self.n_in = 0  # heads in quota: none, and the in-quota tournament is not looked at
        self.mode = IN_QUOTA  # the tournament of the last pick
        self.seen: list[list[int]] = list(f.guaranteed)
        f.touched.clear()
        self.dirty: tuple[set[int], set[int]] = (set(), set())
        self.heaps: tuple[list[list[Entry]], list[list[Entry]]] = ([[] for _ in range(n + 1)],
                                                                 [[] for _ in range(n + 1)])
        self.stamp = ([0] * n, [0] * n)
        self.entry: tuple[list[tuple[float, int] | None], list[tuple[float, int] | None]] = ([None] * n,
                                                                                            [None] * n)
        for leaf, gangs in per_leaf.items():
            if not f.is_leaf(leaf):
                raise ValueError(f"queue {f.name(leaf)} has pods but is not a leaf queue")
            self._set_head(leaf, gangs[0])  # and marks the leaf for both tournaments

    # -- heads -----------------------------------------------------------------------------

    def request(self, leaf: int) -> list[int]:
        """The request of ``leaf``'s head, as taken when it became the head."""
        return self.req[leaf]

    def advance(self, leaf: int) -> None:
        """The head of ``leaf`` was tried: the next candidate of the leaf becomes its head."""
        if self.head[leaf] >= 0:
            if self.inq[leaf]:
                self.n_in -= 1
            else:
                for q in self.forest.paths[leaf]:
                    self.outside[q] -= 1
        at = self.ptr[leaf] = self.ptr[leaf] + 1
        gangs = self.per_leaf[leaf]
        if at < len(gangs):
            self._set_head(leaf, gangs[at])  # marks the leaf dirty for both tournaments
            return
        self.head[leaf] = -1
        self.inq[leaf] = False  # its bound in ``ub`` stays: still an upper bound
        self.dirty[IN_QUOTA].add(leaf)
        self.dirty[BORROWING].add(leaf)

    def skip(self, leaf: int, count: int) -> None:
        """``count`` heads of ``leaf`` were tried one after the other (the batch path,
        engine/batch.py): as many :meth:`advance` calls, the heads between never set."""
        self.ptr[leaf] += count - 1
        self.advance(leaf)

    def request_for(self, g: int) -> list[int]:
        """What gang ``g``'s pending members count against quota, as its turn as head takes it."""
        order = self.order
        gang = order.gangs[g]
        known = None if gang.alive or gang.evicted else order.whole_requests.get(g)
        if known is not None:
            return known
        req = self.request_of(order.pending_members(gang))
        if not (gang.alive or gang.evicted):
            order.whole_requests[g] = req
        return req

    def _set_head(self, leaf: int, g: int) -> None:
        f = self.forest
        req = self.request_for(g)
        self.head[leaf] = g
        self.req[leaf] = req
        self.tie[leaf] = self.order.tie(g)
        self.dirty[IN_QUOTA].add(leaf)
        self.dirty[BORROWING].add(leaf)
        if self._in_quota(leaf, req):
            self._mark_in(leaf)
        else:
            self.inq[leaf] = False
            for q in f.paths[leaf]:
                self.outside[q] += 1

    def _mark_in(self, leaf: int) -> None:
        self.inq[leaf] = True
        self.n_in += 1
        req, ub = self.req[leaf], self.ub
        # ``ub`` never shrinks going up a path: the first queue whose bound already covers the
        # request ends the walk (usually the leaf itself, whose bound outlives its old heads).
        for q in self.forest.paths[leaf]:
            row = ub[q]
            for r, u in zip(req, row, strict=True):
                if r > u:
                    break
            else:
                return
            ub[q] = [max(r, u) for r, u in zip(req, row, strict=True)]

    def _flip(self, leaf: int, inside: bool) -> None:
        self.dirty[IN_QUOTA].add(leaf)
        step = -1 if inside else 1
        for q in self.forest.paths[leaf]:
            self.outside[q] += step
        if inside:
            self._mark_in(leaf)
        else:
            self.inq[leaf] = False
            self.n_in -= 1
            self.ub[leaf] = self.zero

    # -- keeping in-quota tests exact --------------------------------------------------------

    def in_quota(self, leaf: int, req: list[int]) -> bool:
        """Whether a head of ``leaf`` asking ``req`` is in quota now."""
        return self._in_quota(leaf, req)

    def _in_quota(self, leaf: int, req: list[int]) -> bool:
        """``QueueForest.in_quota``, as the headroom rule above: every asked amount within
        ``quota - guaranteed`` on every queue of the path."""
        f = self.forest
        quota, gu = f.quota, f.guaranteed
        for q in f.paths[leaf]:
            limit, used = quota[q], gu[q]
            for j, r in enumerate(req):
                if r > 0 and used[j] + r > limit[j]:
                    return False
        return True

    def _sync(self) -> None:
        """Catch up with usage changed since the last pick: re-key the changed paths, and test
        again the heads whose in-quota verdict may have changed."""
        f = self.forest
        touched = f.touched
        if not touched:
            return
        seen, gu, paths = self.seen, f.guaranteed, f.paths
        changed: list[tuple[int, list[int]]] = []
        dirty_in, dirty_borrowing = self.dirty
        for leaf in touched:
            dirty_in.add(leaf)
            dirty_borrowing.add(leaf)
            for q in paths[leaf]:
                now, was = gu[q], seen[q]
                if now is not was and now != was:
                    changed.append((q, was))
                    seen[q] = now
        touched.clear()
        if not changed:
            return
        grown: list[int] = []
        for q, was in changed:  # less guaranteed usage: heads out of quota may come in
            now = gu[q]
            less = more = False
            for a, b in zip(now, was, strict=True):
                if a < b:
                    less = True
                elif a > b:
                    more = True
            if less:
                self._let_in(q)
            if more:
                grown.append(q)
        ub, quota = self.ub, f.quota
        for q in grown:  # more: heads in quota asking more than the slack may fall out
            for bound, limit, used in zip(ub[q], quota[q], gu[q], strict=True):
                if bound > 0 and bound > limit - used:
                    self._let_out(q, [max(lim - u, 0) for lim, u in zip(quota[q], gu[q], strict=True)])
                    break

    def _let_in(self, q: int) -> None:
        if not self.outside[q]:
            return
        if self.forest.is_leaf(q):
            if self.head[q] >= 0 and not self.inq[q] and self._in_quota(q, self.req[q]):
                self._flip(q, True)
            return
        for c in self.kids[q]:
            self._let_in(c)

    def _let_out(self, q: int, slack: list[int]) -> None:
        ub = self.ub
        if self.forest.is_leaf(q):
            if self.head[q] < 0 or not self.inq[q]:
                ub[q] = self.zero  # a bound left by earlier heads: tightened
            elif self._in_quota(q, self.req[q]):
                ub[q] = self.req[q]
            else:
                self._flip(q, False)
            return
        kids = self.kids[q]
        for c in kids:
            if any(u > s for u, s in zip(ub[c], slack, strict=True)):
                self._let_out(c, slack)
        ub[q] = [max(col) for col in zip(*(ub[c] for c in kids), strict=True)] if self.zero else self.zero

    # -- the tournament ---------------------------------------------------------------------

    def _top(self, mode: int, q: int) -> Entry | None:
        heap, stamp = self.heaps[mode][q], self.stamp[mode]
        while heap and heap[0][3] != stamp[heap[0][4]]:
            heappop(heap)
        return heap[0] if heap else None

    def _refresh(self, mode: int) -> None:
        """Bring the entries of every queue on the paths of the leaves changed since the last
        refresh of ``mode`` up to date, children before parents (one loop: this is the hot path)."""
        dirty = self.dirty[mode]
        if not dirty:
            return
        f = self.forest
        paths, kids, head, tie, up, pos = f.paths, self.kids, self.head, self.tie, self.up, self.pos
        heaps, stamp, entries = self.heaps[mode], self.stamp[mode], self.entry[mode]
        inq = self.inq if mode == IN_QUOTA else None
        fair_key = f.dominant_usage if mode == IN_QUOTA else f.borrowed_share
        for leaf in dirty:
            for q in paths[leaf]:
                if kids[q]:  # the best head below q: its heap's top entry
                    heap = heaps[q]
                    while heap and heap[0][3] != stamp[heap[0][4]]:
                        heappop(heap)
                    if heap:
                        top = heap[0]
                        g, t = top[5], top[1]
                    else:
                        g = -1
                else:
                    g = head[q]
                    if inq is not None and not inq[q]:
                        g = -1
                    t = tie[q]
                old = entries[q]
                if g < 0:
                    if old is not None:
                        stamp[q] += 1
                        entries[q] = None
                    continue
                key = fair_key(q)
                if old is not None and old[0] == key and old[1] == g:
                    continue
                stamp[q] += 1
                entries[q] = (key, g)
                parent = up[q]
                heap = heaps[parent]
                heappush(heap, (key, t, pos[q], stamp[q], q, g))
                if len(heap) > 2 * len(kids[parent]) + 8:  # drop stale entries: memory stays flat
                    heap[:] = [e for e in heap if e[3] == stamp[e[4]]]
                    heapify(heap)
        dirty.clear()

    def pick(self) -> int:
        """The next gang to try (-1: no head left): in-quota heads first, then fair order level by
        level (the lowest key, ties by the heads' priority, age and name)."""
        self._sync()
        top = None
        if self.n_in:
            self._refresh(IN_QUOTA)
            top = self._top(IN_QUOTA, self.top)
            self.mode = IN_QUOTA
        if top is None:
            self._refresh(BORROWING)
            top = self._top(BORROWING, self.top)
            self.mode = BORROWING
            if top is None:
                return -1
        return top[5]

    # -- a stretch of picks answered without a change ---------------------------------------

    def answer_run(self, leaf: int, answer: Callable[[int, list[int]], bool]) -> None:
        """The head of ``leaf``, which :meth:`pick` just returned, was answered without a change
        of state (a remembered failure): it and the picks that follow while nothing changes go.
        While no usage changes the fair keys stay, so the next picks are worked out over the heads
        alone (as engine/batch.py's ``Heads``, one entry per queue with a head below it in the
        pick's mode): each next pick's gang is offered to ``answer`` (its gang, its request), which
        answers it without a change of state (True) or not (False: it stays the head, the next
        pick). The stretch also ends, that head left for the next pick, where a leaf's next head
        would change the mode (in quota when the pick took heads out of quota, or the reverse), and
        with more than ``MAX_RUN_LEAVES`` leaves (then only this head goes, as :meth:`advance`)."""
        mode = self.mode
        head, inq, per_leaf, ptr = self.head, self.inq, self.per_leaf, self.ptr
        inside = mode == IN_QUOTA
        leaves = [x for x in per_leaf if head[x] >= 0 and (not inside or inq[x])]
        if len(leaves) > MAX_RUN_LEAVES or (not inside and self.n_in) or leaf not in leaves:
            self.advance(leaf)
            return
        f = self.forest
        fair_key = f.dominant_usage if inside else f.borrowed_share
        paths, order_tie = f.paths, self.order.tie
        keys: dict[int, float] = {}
        ent: dict[int, tuple[float, Tiebreak, int, int] | None] = {}
        tie = {x: self.tie[x] for x in leaves}
        req = {x: self.req[x] for x in leaves}
        roots: set[int] = set()
        for x in leaves:
            for q in paths[x]:
                if q not in keys:
                    keys[q] = fair_key(q)
            roots.add(paths[x][-1])
        # A queue's entry: (fair key, its best head's tiebreak, its position, that head's leaf).
        # Per leaf, the queues above it on its path: (queue, its children, fair key, position).
        pos, children = self.pos, f.children
        above = {x: [(q, children[q], keys[q], pos[q]) for q in paths[x][1:]] for x in leaves}
        for x in leaves:
            self._walk_run(x, keys[x], pos[x], tie.get(x), above[x], ent)
        order = self.order
        whole, gangs, ties = order.whole_requests, order.gangs, order.ties
        top = sorted(roots)
        used = dict.fromkeys(leaves, 0)  # gangs of each leaf gone (answered)
        # Per leaf that won a pick: whether its fair keys alone make it win again while it has a head
        # (on every queue of its path, a key below those of the siblings with a head below them: a
        # sibling's entry can only go, never come, in a stretch). Its next head is then the pick, with
        # no walk; the entries on its path are made again once it stops winning so.
        wins: dict[int, bool] = {}
        parent, up = f.parent, self.up
        x = leaf
        while True:
            used[x] += 1
            at = ptr[x] + used[x]
            lst = per_leaf[x]
            if at < len(lst):
                g = lst[at]
                gang = gangs[g]
                r = None if gang.alive or gang.evicted else whole.get(g)  # request_for, known
                if r is None:
                    r = self.request_for(g)
                # The same request as the head before: the same verdict (no usage changed).
                if r != req[x] and self._in_quota(x, r) != inside:
                    break  # it would change the mode: it is left for the next pick
                t = tie[x] = ties.get(g) or order_tie(g)
                req[x] = r
                won = wins.get(x)
                if won is None:
                    won = wins[x] = all(
                        (e := ent.get(c)) is None or keys[q] < e[0]
                        for q in paths[x] for c in (top if parent[q] == NONE else children[up[q]]) if c != q)
                if won:
                    if not answer(g, r):
                        break
                    continue
            else:
                del tie[x], req[x]
                t = None
            self._walk_run(x, keys[x], pos[x], t, above[x], ent)
            best = None
            for q in top:
                e = ent[q]
                if e is not None and (best is None or e < best):
                    best = e
            if best is None:
                break
            x = best[3]
            if not answer(per_leaf[x][ptr[x] + used[x]], req[x]):
                break
        for y, n in used.items():
            if n:
                self.skip(y, n)

    @staticmethod
    def _walk_run(x: int, key: float, at: int, tie: Tiebreak | None,
                  above: list[tuple[int, list[int], float, int]],
                  ent: dict[int, tuple[float, Tiebreak, int, int] | None]) -> None:
        """:meth:`answer_run`'s entries on leaf ``x``'s path, children before parents: the leaf's
        (fair key ``key``, position ``at``, its head's ``tie``; None: no head), then ``above``'s."""
        ent[x] = None if tie is None else (key, tie, at, x)
        get = ent.get
        for q, kids, kq, pq in above:
            best = None
            for c in kids:
                e = get(c)
                if e is not None and (best is None or e < best):
                    best = e
            ent[q] = None if best is None else (kq, best[1], pq, best[3])
