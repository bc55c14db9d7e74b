"""Who is tried next: candidate gangs per leaf queue, and the fair-order pick between queue heads.

Each leaf queue offers its gangs in its own order (priority, creation, name). Between the queue
heads, gangs whose request fits their queue's quota go first; among those (or among all, when
none fits) the pick descends the queue tree level by level, taking the child with the lowest
dominant usage (in quota) or borrowed share (borrowing), ties by the gangs' own order.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

from gpufleet.engine.queues import QueueForest
from gpufleet.engine.tenancy import PendingLimits
from gpufleet.engine.workload import Gang, PodInfo

__all__ = ["FairOrder", "gated_reason"]

GATED_REASON = "waiting for scheduling gates: "


def gated_reason(gates: Sequence[str]) -> str:
    """The pending reason of a gang whose pods carry ``spec.schedulingGates``."""
    return GATED_REASON + ", ".join(gates)

Epoch = tuple[int, int]


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
        self._epoch: Epoch = (-1, -1)
        self._in_quota: dict[int, bool] = {}
        self._share_keys: dict[tuple[int, bool], float] = {}

    def pending_members(self, gang: Gang) -> list[int]:
        """Members not bound and not evicted, largest first."""
        return [m for m in gang.members_by_size if self.pods[m].node is None and m not in self.evicted]

    def candidates(self) -> dict[int, list[int]]:
        """Candidate gangs per leaf queue, in the queue's own order."""
        per_leaf: dict[int, list[int]] = {}
        limits = self.limits
        capped: list[int] = []  # gangs of users with a cap on pending gangs: chosen after the loop
        for g in self.open_gangs:
            gang = self.gangs[g]
            if gang.evicted or gang.queue < 0:
                continue
            pending = self.pending_members(gang)
            if not pending:
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
        for lst in per_leaf.values():
            lst.sort(key=lambda g: (-self.gangs[g].priority, self.gangs[g].creation, self.gangs[g].key))
        return per_leaf

    def pick(self, heads: dict[int, int], requests: dict[int, list[int]], epoch: Epoch) -> int:
        """The next gang to try: in-quota heads first, then fair order level by level.

        ``epoch`` changes whenever queue usage may have (an admission or eviction, a new cycle):
        until then the in-quota tests and fair-order keys of earlier picks still hold.
        """
        f = self.forest
        if self._epoch != epoch:
            self._epoch = epoch
            self._in_quota.clear()
            self._share_keys.clear()
        in_quota_of = self._in_quota
        in_quota: dict[int, bool] = {}
        for leaf, g in heads.items():
            got = in_quota_of.get(g)
            if got is None:
                got = in_quota_of[g] = f.in_quota(leaf, requests[g])
            in_quota[leaf] = got
        pool = {leaf: g for leaf, g in heads.items() if in_quota[leaf]} or heads
        borrowing = not any(in_quota.values())
        contains: dict[int, int] = {}  # queue -> best head below it

        def tiebreak(g: int) -> tuple[int, float, str]:
            gang = self.gangs[g]
            return (-gang.priority, gang.creation, gang.key)

        keys = self._share_keys

        def key(q: int) -> float:
            got = keys.get((q, borrowing))
            if got is None:
                got = keys[(q, borrowing)] = f.borrowed_share(q) if borrowing else f.dominant_usage(q)
            return got

        def best(q: int) -> int | None:
            if q in contains:
                return contains[q]
            if f.is_leaf(q):
                rep = pool.get(q)
            else:
                options = [(c, b) for c in f.children[q] if (b := best(c)) is not None]
                rep = min(options, key=lambda cb: (key(cb[0]), tiebreak(cb[1])))[1] if options else None
            if rep is not None:
                contains[q] = rep
            return rep

        roots = [(r, b) for r in f.roots if (b := best(r)) is not None]
        return min(roots, key=lambda rb: (key(rb[0]), tiebreak(rb[1])))[1]
