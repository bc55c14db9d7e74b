"""The batch path: a run of lone pods admitted from one pick (``Engine.USE_BATCH``).

Backlogs are mostly many lone pods alike spread over a few leaf queues. One by one, each of
them costs a fair-order pick (re-keying the tournament after every admission), an attempt
through the gang machinery and the bookkeeping of a gang. When the queue forest is flat (every
queue a leaf: an admission changes no other queue's usage, guaranteed usage or verdicts), the
fair order's next pick among a handful of leaves is the least of one entry per leaf, and only
the winner's entry changes after an admission. :func:`admit_run` walks that order from the pick
the cycle just made and admits, one after the other, the pods the one-by-one loop would admit
there: each winner's head is a lone whole-GPU pod, passes the quota gates and has a node (the
same ``Placer.best_node``: the node index's order of nodes and GPUs). It stops at the first head
that is none of these, before touching it, and hands the fair order (``Turn.skip``) the leaves'
new heads, so the cycle's next pick is that head, as it would have been. A head of a queue with
flavors is admitted as its one-by-one attempt would admit it without preemption
(``FlavorBook.admit_lone``: its flavor passes in order, each flavor's gates and placement), with its
request on the flavor it takes. A gang that fails, and
everything the batch does not know (lending limits, Projects' user caps, claims and volumes,
queue trees, many leaves), stays on the one-by-one path. While reservations are held, a run admits
only pods every reservation yields to whatever they ask (``Reservations.yields_all``: their
one-by-one attempts release every hold), and drops the reservation of a reserved pod it admits.

The fair order's rules (admission.py): heads in quota first, by dominant usage; else all heads
by borrowed share; ties by the heads' priority, creation and name, then the queue's position.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from gpufleet.engine.admission import Tiebreak, Turn
from gpufleet.engine.decisions import DecisionLog
from gpufleet.engine.flavors import FlavorBook
from gpufleet.engine.placement import Assignment, Placer
from gpufleet.engine.queues import QueueForest
from gpufleet.engine.quota import QuotaGates
from gpufleet.engine.reservations import Reservations
from gpufleet.engine.tenancy import UserCaps
from gpufleet.engine.victims import VictimIndex
from gpufleet.engine.workload import Gang, PodInfo


class BatchHost(Protocol):
    """What the batch path reads and changes of the engine (``scheduler.Engine``): the parts an
    admission goes through, and its counters of changes."""

    forest: QueueForest
    caps: UserCaps | None
    flavors: FlavorBook | None
    placer: Placer
    pods: list[PodInfo]
    gangs: list[Gang]
    log: DecisionLog
    victims: VictimIndex
    quota: QuotaGates
    reserve: Reservations | None
    version: int
    committed: int
    lone_refused: tuple[int, int, int] | None


__all__ = ["MAX_LEAVES", "BatchHost", "admit_run", "batch_applies", "commit_lone", "lone_pod"]

# Leaves with a head beyond which the pick over one entry per leaf no longer pays.
MAX_LEAVES = 8

Key = tuple[float, Tiebreak, int, int]  # (fair key, head's tiebreak, position, leaf)
IN, ALL = 0, 1  # the fair order's modes: heads in quota (dominant usage); all heads (borrowed share)


def batch_applies(engine: BatchHost, turn: Turn) -> bool:
    """Whether this cycle's picks may be batched: no lending limits, no Projects' user caps, no
    claims or volumes, and few leaves with candidates."""
    f = engine.forest
    return (engine.caps is None and engine.placer.volumes is None and not f.has_lending
            and 0 < len(turn.per_leaf) <= MAX_LEAVES)


def commit_lone(engine: BatchHost, gang: Gang, m: int, a: Assignment, request: list[int]) -> None:
    """Commit ``a``, the placement of pod ``m``, the lone pod of ``gang``, with its quota
    ``request``: Engine.record for a gang of one pod."""
    engine.placer.commit(a)
    engine.victims.admit(gang)
    engine.version += 1
    if engine.reserve is not None:
        engine.reserve.drop(gang.idx)
    engine.committed += 1
    engine.log.bindings[m] = a
    gang.alive += 1
    engine.forest.add(gang.queue, request)


def lone_pod(engine: BatchHost, gang: Gang) -> int:
    """The pod of a gang the batch may admit (-1: none): a lone whole-GPU pod, wholly pending,
    waiting for no device claim."""
    if gang.group is not None or gang.alive or gang.evicted or len(gang.members) != 1:
        return -1
    m = gang.members[0]
    info = engine.pods[m]
    if info.node is not None or not info.whole or info.fractional or info.pod.device_wait \
            or m in engine.log.evictions:
        return -1
    return m


class Heads:
    """The fair order over the leaves' heads during a run, kept as ``Turn`` keeps it: per queue
    and mode (heads in quota; all heads), its entry in its parent's order. An admission changes
    usage on its leaf's path only, so only the entries on that path are recomputed, and the
    in-quota verdicts of the heads below the same root tested again (guaranteed usage grew on
    the path). Entries over all heads are brought up to date only when no head is in quota."""

    def __init__(self, engine: BatchHost, turn: Turn) -> None:
        self.engine = engine
        f = self.forest = engine.forest
        self.turn = turn
        self.head: dict[int, int] = {}
        self.pod: dict[int, int] = {}  # the head's lone pod (lone_pod; -1: none)
        self.req: dict[int, list[int]] = {}
        self.tie: dict[int, Tiebreak] = {}
        self.inq: dict[int, bool] = {}
        self.leaves: dict[int, list[int]] = {}  # root -> its leaves with a head
        for leaf in turn.per_leaf:
            g = turn.head[leaf]
            if g < 0:
                continue
            self.head[leaf], self.req[leaf], self.tie[leaf], self.inq[leaf] = (
                g, turn.req[leaf], turn.tie[leaf], turn.inq[leaf])
            self.pod[leaf] = lone_pod(engine, engine.gangs[g])
            self.leaves.setdefault(f.paths[leaf][-1], []).append(leaf)
        # (fair key, best head's tiebreak, position among siblings, leaf of that head); absent
        # or None: no head below the queue (in that mode).
        self.ent: tuple[dict[int, Key | None], dict[int, Key | None]] = ({}, {})
        for mode in (IN, ALL):
            for leaf in self.head:
                self._walk(mode, leaf)
        self.stale: set[int] = set()  # leaves whose path's entries over all heads are out of date
        # The last lone pod's requests, whole GPUs, leaf (read only with flavors: without, a pod's
        # request does not depend on it) and quota request (identical pods share it).
        self.last: tuple[Mapping[str, int], int, int, list[int]] = ({}, -1, -1, [])
        self.by_leaf = engine.flavors is not None

    def _walk(self, mode: int, leaf: int) -> None:
        """Recompute the entries on ``leaf``'s path, children before parents."""
        f, pos, ent = self.forest, self.turn.pos, self.ent[mode]
        key = f.dominant_usage if mode == IN else f.borrowed_share
        path = f.paths[leaf]
        ent[leaf] = ((key(leaf), self.tie[leaf], pos[leaf], leaf)
                     if leaf in self.head and (mode == ALL or self.inq[leaf]) else None)
        children = f.children
        for q in path[1:]:
            got = [e for c in children[q] if (e := ent.get(c)) is not None]
            if got:
                best = min(got)
                ent[q] = (key(q), best[1], pos[q], best[3])
            else:
                ent[q] = None

    def pick(self) -> int:
        """The leaf whose head the fair order picks now (-1: none)."""
        ent = self.ent[IN]
        got = [e for r in self.leaves if (e := ent[r]) is not None]
        if not got:
            if self.stale:
                for leaf in self.stale:
                    self._walk(ALL, leaf)
                self.stale.clear()
            ent = self.ent[ALL]
            got = [e for r in self.leaves if (e := ent[r]) is not None]
            if not got:
                return -1
        return min(got)[3]

    def admitted(self, leaf: int, g: int) -> None:
        """``leaf``'s head was admitted and ``g`` (-1: none) is its next head."""
        turn = self.turn
        if g < 0:
            del self.head[leaf], self.pod[leaf], self.req[leaf], self.tie[leaf], self.inq[leaf]
        else:
            engine = self.engine
            gang = engine.gangs[g]
            self.head[leaf] = g
            m = self.pod[leaf] = lone_pod(engine, gang)
            if m >= 0:  # what Turn.request_for gives a lone pod, kept for its turn as head
                info = engine.pods[m]
                last = self.last
                if info.pod.requests != last[0] or info.whole != last[1] or (self.by_leaf and leaf != last[2]):
                    # quota_vec of a whole-GPU pod: its GPUs and its requests (on its leaf's first
                    # flavor, where it takes one), nothing else
                    self.last = (info.pod.requests, info.whole, leaf, engine.quota.quota_vec(info))
                req = self.req[leaf] = turn.order.whole_requests[g] = self.last[3]
            else:
                req = self.req[leaf] = turn.request_for(g)
            self.tie[leaf] = (-gang.priority, gang.creation, gang.key)
            self.inq[leaf] = turn.in_quota(leaf, req)
        # Guaranteed usage grew along the path (it only grows during a run): the other heads in
        # quota below the root are tested again (those out of quota stay out).
        in_quota, req_of, inq = turn.in_quota, self.req, self.inq
        for x in self.leaves[self.forest.paths[leaf][-1]]:
            if x != leaf and inq.get(x) and not in_quota(x, req_of[x]):
                inq[x] = False
                self._walk(IN, x)
        self._walk(IN, leaf)
        self.stale.add(leaf)


def admit_run(engine: BatchHost, turn: Turn, first: int) -> int:
    """Admit the run of pods that starts with leaf ``first``'s head (the gang ``Turn.pick`` just
    returned); how many were admitted (0: the head is left to the one-by-one path)."""
    if lone_pod(engine, engine.gangs[turn.head[first]]) < 0:
        return 0
    # Reservations held (docs/semantics.md): a run admits only gangs every one of them yields to,
    # whose one-by-one attempts hold nothing (Reservations.hold_for releases every hold for them).
    reserve = engine.reserve if engine.reserve is not None and engine.reserve.held else None
    if reserve is not None:
        if not reserve.yields_all(engine.gangs[turn.head[first]]):
            return 0
        reserve.release_all()
    f = engine.forest
    gangs, pods, placer = engine.gangs, engine.pods, engine.placer
    per_leaf, ptr = turn.per_leaf, turn.ptr
    heads = Heads(engine, turn)
    limits = f.has_limits
    book = engine.flavors
    flavored = book.leaf_flavors if book is not None else {}
    limit_ok = (lambda leaf, req: f.limit_verdict(leaf, req).ok) if limits else None
    done: dict[int, int] = {}
    n = 0
    while (leaf := heads.pick()) >= 0:
        if not n and leaf != first:
            break  # not the pick the fair order made: leave it to the one-by-one path
        m = heads.pod[leaf]
        if m < 0:
            break
        gang = gangs[heads.head[leaf]]
        if reserve is not None and reserve.held and not reserve.yields_all(gang):
            break
        if flavored and leaf in flavored and book is not None and book.takes(pods[m]):
            got = book.admit_lone(pods[m], gang, placer, f.in_quota, limit_ok, engine.quota.quota_vec,
                                  (heads.req[leaf], heads.inq[leaf]))  # its request on its first flavor
            if got is None:
                if not n:  # the pick's own attempt follows at once, in this state (Engine.attempt)
                    engine.lone_refused = (gang.idx, engine.version, engine.committed)
                break
            a, request = got  # its request on the flavor it takes
        else:
            request = heads.req[leaf]
            if limits and not f.limit_verdict(leaf, request).ok:
                break
            if not gang.preemptible and not f.in_quota(leaf, request):
                break
            placed = placer.best_node(pods[m])
            if placed is None:
                break
            a = placed
        commit_lone(engine, gang, m, a, request)
        gang.pending_reason = ""
        n += 1
        done[leaf] = k = done.get(leaf, 0) + 1
        gangs_of = per_leaf[leaf]
        at = ptr[leaf] + k
        heads.admitted(leaf, gangs_of[at] if at < len(gangs_of) else -1)
    for leaf, k in done.items():
        turn.skip(leaf, k)
    return n
