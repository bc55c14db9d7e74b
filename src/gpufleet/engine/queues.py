"""The queue forest: usage, guaranteed usage, quota tests, limits, lending and fair-order keys.

All amounts are int64 vectors over the *managed* resources (those some Queue sets a quota,
limit or lending limit for; see docs/semantics-notes.md). ``NONE`` marks an unset limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.domain import GPU, MEMORY, MILLI, Queue, QueueName, WithinQueue
from gpufleet.engine.cluster import BoolArray, IntArray

FloatArray = npt.NDArray[np.float64]

NONE = -1


@dataclass
class QuotaVerdict:
    ok: bool
    reason: str = ""


def fmt_amount(resource: str, milli: int) -> str:
    """A quantity for people: GPUs and cpu as decimal units, memory in Gi."""
    if resource == MEMORY:
        gi = milli / MILLI / 2**30
        return f"{gi:g}Gi"
    value = milli / MILLI
    return f"{value:g}"


def unit(resource: str, amount_milli: int) -> str:
    text = fmt_amount(resource, amount_milli)
    if resource == GPU:
        return f"{text} GPU" + ("" if amount_milli == MILLI else "s")
    return f"{text} {resource}"


class QueueForest:
    """Queue tree state. Per-queue vectors are short Python lists (one entry per managed
    resource, usually just GPUs): at this size plain ints are several times faster than NumPy."""

    def __init__(self, queues: Sequence[Queue], capacity: dict[str, int]) -> None:
        self.queues: list[Queue] = sorted(queues, key=lambda q: q.name)
        self.index: dict[QueueName, int] = {q.name: i for i, q in enumerate(self.queues)}
        n = len(self.queues)
        self.parent: list[int] = [self.index[q.parent] if q.parent else NONE for q in self.queues]
        self.children: list[list[int]] = [[] for _ in range(n)]
        for i, p in enumerate(self.parent):
            if p != NONE:
                self.children[p].append(i)
        self.roots = [i for i in range(n) if self.parent[i] == NONE]
        self.managed: list[str] = sorted(
            {r for q in self.queues for r, spec in q.resources.items()
             if spec.quota is not None or spec.limit is not None or spec.lending_limit is not None}
        )
        m = len(self.managed)
        self.m = m
        self.capacity: list[int] = [capacity.get(r, 0) for r in self.managed]
        self.explicit_quota = [[NONE] * m for _ in range(n)]
        self.limit = [[NONE] * m for _ in range(n)]
        self.lending = [[NONE] * m for _ in range(n)]
        for i, q in enumerate(self.queues):
            for j, r in enumerate(self.managed):
                spec = q.resources.get(r)
                if spec is None:
                    continue
                if spec.quota is not None:
                    self.explicit_quota[i][j] = spec.quota
                if spec.limit is not None:
                    self.limit[i][j] = spec.limit
                if spec.lending_limit is not None:
                    self.lending[i][j] = spec.lending_limit
        self.order = self._post_order()
        self.quota = [[0] * m for _ in range(n)]
        for i in self.order:  # children before parents
            for j in range(m):
                explicit = self.explicit_quota[i][j]
                self.quota[i][j] = explicit if explicit != NONE else sum(self.quota[c][j] for c in self.children[i])
        self.usage = [[0] * m for _ in range(n)]
        self.guaranteed = [[0] * m for _ in range(n)]
        self.paths: list[list[int]] = [self._path(i) for i in range(n)]
        self.weights = [max(q.weight, 1e-9) for q in self.queues]
        self.has_lending = any(v != NONE for row in self.lending for v in row)
        self.has_limits = any(v != NONE for row in self.limit for v in row)
        # Leaves whose usage ``add`` changed since the fair order last looked (admission.Turn).
        self.touched: set[int] = set()
        # Decayed usage per queue and managed resource (docs/semantics.md, "Fairness over time"), or
        # None: off, and the fair keys are the shared spec's. Set by :meth:`set_time`.
        self.history: list[list[float]] | None = None
        self.history_over: list[list[float]] | None = None  # max(0, history - quota), with history
        self.now: float | None = None  # the snapshot's time: the disruption guards need it

    def _post_order(self) -> list[int]:
        """Queues with children before parents (no recursive closure: it would be a reference
        cycle holding the whole forest until the cyclic collector runs)."""
        out: list[int] = []
        stack: list[tuple[int, bool]] = [(r, False) for r in reversed(self.roots)]
        while stack:
            i, done = stack.pop()
            if done:
                out.append(i)
                continue
            stack.append((i, True))
            stack.extend((c, False) for c in reversed(self.children[i]))
        return out

    def _path(self, i: int) -> list[int]:
        path = [i]
        while self.parent[path[-1]] != NONE:
            path.append(self.parent[path[-1]])
        return path

    def set_time(self, now: float | None, half_life: float) -> None:
        """The snapshot's time, and with a half-life the decayed usage of every queue as of ``now``:
        each leaf's status value decayed from its time with the usage bound now standing for the
        usage since (call once the snapshot's running pods are bound), parents the sum of children."""
        self.now = now
        if now is None or half_life <= 0 or not self.m:
            return
        history = [[0.0] * self.m for _ in self.queues]
        for i in self.order:  # children before parents
            if self.children[i]:
                history[i] = [sum(history[c][j] for c in self.children[i]) for j in range(self.m)]
                continue
            queue = self.queues[i]
            if not queue.decayed_usage:
                continue
            at = queue.decayed_at if queue.decayed_at is not None else now
            d = 2.0 ** (-max(0.0, now - at) / half_life)
            history[i] = [queue.decayed_usage.get(r, 0) * d + self.usage[i][j] * (1.0 - d)
                          for j, r in enumerate(self.managed)]
        if any(v for row in history for v in row):
            self.history = history
            # The past's borrowing, fixed for the call: the borrowing key reads it on every comparison.
            self.history_over = [[max(0.0, row[j] - self.quota[i][j]) for j in range(self.m)]
                                 for i, row in enumerate(history)]

    def young_gangs(self, g_queue: IntArray, p_gang: IntArray, bound: BoolArray,
                    start: FloatArray) -> tuple[BoolArray, BoolArray] | None:
        """Gangs their leaf's ``minRuntime`` protects from eviction (docs/semantics.md, "Disruption
        guards"): running ones with a pod started less than it ago, and the queues' pending ones
        (admitted now, so just started). None when no queue sets one, or the time is unknown."""
        if self.now is None or not any(q.min_runtime > 0 for q in self.queues):
            return None
        runtime = np.array([q.min_runtime for q in self.queues] + [0.0])  # gangs of no queue (-1): none
        latest = np.full(len(g_queue), -np.inf)
        np.maximum.at(latest, p_gang[bound], start[bound])
        guarded = runtime[g_queue] > 0
        young: BoolArray = guarded & (self.now - latest < runtime[g_queue])
        return young, guarded

    def preemption_held(self, leaf: int, waiting_since: float) -> str:
        """Why a gang of ``leaf`` that has waited since ``waiting_since`` may not evict yet (its
        queue's ``preemptionDelay``), or "" when it may."""
        if self.now is None or leaf < 0:
            return ""
        delay = self.queues[leaf].preemption_delay
        if delay <= 0 or self.now - waiting_since >= delay:
            return ""
        return f"; waiting out queue {self.name(leaf)}'s preemption delay of {delay:g}s before evicting"

    def is_leaf(self, i: int) -> bool:
        return not self.children[i]

    def name(self, i: int) -> str:
        return str(self.queues[i].name)

    # -- usage ----------------------------------------------------------------------------

    def add(self, leaf: int, amount: Sequence[int], sign: int = 1) -> None:
        """Add (or, with sign -1, remove) a pod's quota request to its leaf and ancestors.

        Guaranteed usage is carried up by the change of each child's ``min(guaranteed, quota)``
        (integers: the same sums as recomputing them), stopping where it no longer changes; rows
        of ``guaranteed`` are replaced, never changed in place."""
        if leaf < 0 or not self.m:
            return
        path = self.paths[leaf]
        self.touched.add(leaf)
        # Only the nonzero amounts move usage (a pod asks one or two of the managed resources).
        moves = [(j, sign * int(a)) for j, a in enumerate(amount) if a]
        usage = self.usage
        for q in path:
            row = usage[q]
            for j, d in moves:
                row[j] += d
        gu, quota = self.guaranteed, self.quota
        old = gu[leaf]
        new = gu[leaf] = list(usage[leaf])
        if len(path) == 1:
            return
        m = range(self.m)
        child = leaf
        for q in path[1:]:
            limit = quota[child]
            change = [min(new[j], limit[j]) - min(old[j], limit[j]) for j in m]
            if not any(change):
                break
            old = gu[q]
            new = [old[j] + change[j] for j in m]
            gu[q] = new
            child = q

    # -- tests ------------------------------------------------------------------------------

    def in_quota(self, leaf: int, request: Sequence[int]) -> bool:
        """Would a gang of ``request`` at ``leaf`` keep guaranteed usage within quota on the path?"""
        if leaf < 0 or not self.m:
            return True
        asked = [j for j in range(self.m) if request[j] > 0]
        if not asked:
            return True
        path = self.paths[leaf]
        gu, quota = self.guaranteed, self.quota
        new = {j: gu[leaf][j] + int(request[j]) for j in asked}
        if any(new[j] > quota[leaf][j] for j in asked):
            return False
        child = leaf
        for q in path[1:]:
            new = {
                j: gu[q][j] - min(gu[child][j], quota[child][j]) + min(new[j], quota[child][j]) for j in asked
            }
            if any(new[j] > quota[q][j] for j in asked):
                return False
            child = q
        return True

    def quota_left(self, leaf: int, j: int) -> tuple[int, int, str]:
        """(left, quota, queue name) at the tightest queue of the path for managed resource j."""
        best: tuple[int, int, str] | None = None
        for q in self.paths[leaf]:
            left = self.quota[q][j] - self.guaranteed[q][j]
            if best is None or left < best[0]:
                best = (left, self.quota[q][j], self.name(q))
        assert best is not None
        return best

    def limit_verdict(self, leaf: int, request: Sequence[int]) -> QuotaVerdict:
        if leaf < 0 or not self.has_limits:
            return QuotaVerdict(True)
        for q in self.paths[leaf]:
            for j, r in enumerate(self.managed):
                lim = self.limit[q][j]
                if lim != NONE and request[j] > 0 and self.usage[q][j] + request[j] > lim:
                    return QuotaVerdict(
                        False,
                        f"queue {self.name(q)} at its limit of {unit(r, lim)}: "
                        f"uses {fmt_amount(r, self.usage[q][j])}, gang needs {fmt_amount(r, int(request[j]))}",
                    )
        return QuotaVerdict(True)

    def reserved_against(self, leaf: int) -> list[int]:
        """Capacity that queues whose subtree does not contain ``leaf`` hold back (lending limits)."""
        m = range(self.m)
        held = [[0] * self.m for _ in self.queues]
        for i in self.order:
            own = [
                max(0, self.quota[i][j] - self.usage[i][j] - max(self.lending[i][j], 0))
                if self.lending[i][j] != NONE else 0
                for j in m
            ]
            kids = [sum(held[c][j] for c in self.children[i]) for j in m]
            held[i] = [max(own[j], kids[j]) for j in m]
        total = [0] * self.m
        path = self.paths[leaf] if leaf >= 0 else []
        on_path = set(path)
        for q in path:
            siblings = self.children[self.parent[q]] if self.parent[q] != NONE else self.roots
            for s in siblings:
                if s not in on_path:
                    total = [total[j] + held[s][j] for j in m]
        if leaf < 0:
            for r in self.roots:
                total = [total[j] + held[r][j] for j in m]
        return total

    # -- fair order keys --------------------------------------------------------------------

    def dominant_usage(self, q: int) -> float:
        if self.history is not None:
            return self._dominant_usage_over_time(q, self.history[q])
        best = 0.0
        for j in range(self.m):
            quota = self.quota[q][j]
            if quota > 0:
                best = max(best, self.usage[q][j] / quota)
        return best

    def _dominant_usage_over_time(self, q: int, past: list[float]) -> float:
        best = 0.0
        for j in range(self.m):
            quota = self.quota[q][j]
            if quota > 0:
                best = max(best, (self.usage[q][j] + past[j]) / quota)
        return best

    def _borrowed_share_over_time(self, q: int, past_over: list[float]) -> float:
        """``past_over``: ``max(0, H - quota)`` per resource (``history_over``). Comparisons inline, not
        ``max()``: the fair order calls this for every head it compares."""
        best = 0.0
        usage, quota = self.usage[q], self.quota[q]
        for j in range(self.m):
            now_over = usage[j] - quota[j]
            over = (now_over if now_over > 0 else 0) + past_over[j]
            if over > 0:
                share = over / (self.capacity[j] or 1)
                if share > best:
                    best = share
        return best / self.weights[q]

    def borrowed_share(self, q: int) -> float:
        if self.history_over is not None:
            return self._borrowed_share_over_time(q, self.history_over[q])
        best = 0.0
        for j in range(self.m):
            over = self.usage[q][j] - self.quota[q][j]
            if over > 0:
                best = max(best, over / (self.capacity[j] or 1))
        return best / self.weights[q]

    def above_quota(self, q: int, asked: Sequence[int], usage: list[list[int]] | None = None) -> bool:
        """Uses more than its quota of a resource the preemptor requests (``asked``: indices)."""
        row = (usage or self.usage)[q]
        return any(row[j] > self.quota[q][j] for j in asked)

    def lowest_common_ancestor(self, a: int, b: int) -> int:
        pa = set(self.paths[a])
        for q in self.paths[b]:
            if q in pa:
                return q
        return NONE

    def reclaim_path(self, victim_leaf: int, preemptor_leaf: int) -> list[int]:
        """Queues from the victim's leaf up to (not including) the lowest common ancestor."""
        lca = self.lowest_common_ancestor(victim_leaf, preemptor_leaf)
        out: list[int] = []
        for q in self.paths[victim_leaf]:
            if q == lca:
                break
            out.append(q)
        return out

    def within_queue_allowed(self, leaf: int) -> bool:
        return self.queues[leaf].within_queue != WithinQueue.NEVER

    def reclaim_allowed(self, leaf: int) -> bool:
        return self.queues[leaf].reclaim_borrowed
