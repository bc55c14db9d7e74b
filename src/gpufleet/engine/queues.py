"""The queue forest: usage, guaranteed usage, quota tests, limits, lending and fair-order keys.

All amounts are int64 vectors over the *managed* resources (those some Queue sets a quota,
limit or lending limit for; see docs/semantics-notes.md). ``NONE`` marks an unset limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.domain import Queue, QueueName, WithinQueue
from gpufleet.engine.cluster import IntArray

NONE = -1


@dataclass
class QuotaVerdict:
    ok: bool
    reason: str = ""


def fmt_amount(resource: str, milli: int) -> str:
    """A quantity for people: GPUs and cpu as decimal units, memory in Gi."""
    if resource == "memory":
        gi = milli / 1000 / 2**30
        return f"{gi:g}Gi"
    value = milli / 1000
    return f"{value:g}"


def unit(resource: str, amount_milli: int) -> str:
    text = fmt_amount(resource, amount_milli)
    if resource == "nvidia.com/gpu":
        return f"{text} GPU" + ("" if amount_milli == 1000 else "s")
    return f"{text} {resource}"


class QueueForest:
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
        self.capacity = np.array([capacity.get(r, 0) for r in self.managed], dtype=np.int64)
        self.explicit_quota = np.full((n, m), NONE, dtype=np.int64)
        self.limit = np.full((n, m), NONE, dtype=np.int64)
        self.lending = np.full((n, m), NONE, dtype=np.int64)
        for i, q in enumerate(self.queues):
            for j, r in enumerate(self.managed):
                spec = q.resources.get(r)
                if spec is None:
                    continue
                if spec.quota is not None:
                    self.explicit_quota[i, j] = spec.quota
                if spec.limit is not None:
                    self.limit[i, j] = spec.limit
                if spec.lending_limit is not None:
                    self.lending[i, j] = spec.lending_limit
        self.order = self._post_order()
        self.quota = np.zeros((n, m), dtype=np.int64)
        for i in self.order:  # children before parents
            if (self.explicit_quota[i] != NONE).all():
                self.quota[i] = self.explicit_quota[i]
            else:
                summed = sum((self.quota[c] for c in self.children[i]), np.zeros(m, dtype=np.int64))
                self.quota[i] = np.where(self.explicit_quota[i] != NONE, self.explicit_quota[i], summed)
        self.usage = np.zeros((n, m), dtype=np.int64)
        self.guaranteed = np.zeros((n, m), dtype=np.int64)
        self.paths: list[list[int]] = [self._path(i) for i in range(n)]
        self.weights = np.array([max(q.weight, 1e-9) for q in self.queues])
        self.has_lending = bool((self.lending != NONE).any())
        self.has_limits = bool((self.limit != NONE).any())

    def _post_order(self) -> list[int]:
        out: list[int] = []

        def visit(i: int) -> None:
            for c in self.children[i]:
                visit(c)
            out.append(i)

        for r in self.roots:
            visit(r)
        return out

    def _path(self, i: int) -> list[int]:
        path = [i]
        while self.parent[path[-1]] != NONE:
            path.append(self.parent[path[-1]])
        return path

    def is_leaf(self, i: int) -> bool:
        return not self.children[i]

    def name(self, i: int) -> str:
        return str(self.queues[i].name)

    # -- usage ----------------------------------------------------------------------------

    def add(self, leaf: int, amount: IntArray, sign: int = 1) -> None:
        """Add (or, with sign -1, remove) a pod's quota request to its leaf and ancestors."""
        if leaf < 0 or not len(self.managed):
            return
        path = self.paths[leaf]
        for q in path:
            self.usage[q] += sign * amount
        self.guaranteed[leaf] = self.usage[leaf]
        for q in path[1:]:
            total = np.zeros(len(self.managed), dtype=np.int64)
            for c in self.children[q]:
                total += np.minimum(self.guaranteed[c], self.quota[c])
            self.guaranteed[q] = total

    # -- tests ------------------------------------------------------------------------------

    def in_quota(self, leaf: int, request: IntArray) -> bool:
        """Would a gang of ``request`` at ``leaf`` keep guaranteed usage within quota on the path?"""
        if leaf < 0 or not len(self.managed):
            return True
        asked = request > 0
        if not asked.any():
            return True
        path = self.paths[leaf]
        new = self.guaranteed[leaf] + request
        if (new[asked] > self.quota[leaf][asked]).any():
            return False
        child = leaf
        for q in path[1:]:
            new = (
                self.guaranteed[q]
                - np.minimum(self.guaranteed[child], self.quota[child])
                + np.minimum(new, self.quota[child])
            )
            if (new[asked] > self.quota[q][asked]).any():
                return False
            child = q
        return True

    def quota_left(self, leaf: int, j: int) -> tuple[int, int, str]:
        """(left, quota, queue name) at the tightest queue of the path for managed resource j."""
        best: tuple[int, int, str] | None = None
        for q in self.paths[leaf]:
            left = int(self.quota[q, j] - self.guaranteed[q, j])
            if best is None or left < best[0]:
                best = (left, int(self.quota[q, j]), self.name(q))
        assert best is not None
        return best

    def limit_verdict(self, leaf: int, request: IntArray) -> QuotaVerdict:
        if leaf < 0 or not self.has_limits:
            return QuotaVerdict(True)
        for q in self.paths[leaf]:
            for j, r in enumerate(self.managed):
                lim = self.limit[q, j]
                if lim != NONE and request[j] > 0 and self.usage[q, j] + request[j] > lim:
                    return QuotaVerdict(
                        False,
                        f"queue {self.name(q)} at its limit of {unit(r, int(lim))}: "
                        f"uses {fmt_amount(r, int(self.usage[q, j]))}, gang needs {fmt_amount(r, int(request[j]))}",
                    )
        return QuotaVerdict(True)

    def reserved_against(self, leaf: int) -> IntArray:
        """Capacity that queues whose subtree does not contain ``leaf`` hold back (lending limits)."""
        m = len(self.managed)
        held = np.zeros((len(self.queues), m), dtype=np.int64)
        for i in self.order:
            own = np.zeros(m, dtype=np.int64)
            lend = self.lending[i]
            has = lend != NONE
            if has.any():
                own = np.where(has, np.maximum(0, self.quota[i] - self.usage[i] - np.maximum(lend, 0)), 0)
            kids = sum((held[c] for c in self.children[i]), np.zeros(m, dtype=np.int64))
            held[i] = np.maximum(own, kids)
        total = np.zeros(m, dtype=np.int64)
        on_path = set(self.paths[leaf]) if leaf >= 0 else set()
        for q in self.paths[leaf] if leaf >= 0 else []:
            siblings = self.children[self.parent[q]] if self.parent[q] != NONE else self.roots
            for s in siblings:
                if s not in on_path:
                    total += held[s]
        if leaf < 0:
            for r in self.roots:
                total += held[r]
        return total

    # -- fair order keys --------------------------------------------------------------------

    def dominant_usage(self, q: int) -> float:
        quota = self.quota[q]
        pos = quota > 0
        if not pos.any():
            return 0.0
        return float((self.usage[q][pos] / quota[pos]).max())

    def borrowed_share(self, q: int) -> float:
        if not len(self.managed):
            return 0.0
        over = np.maximum(0, self.usage[q] - self.quota[q]).astype(np.float64)
        cap = np.where(self.capacity > 0, self.capacity, 1)
        return float((over / cap).max() / self.weights[q])

    def above_quota(self, q: int, asked: np.ndarray) -> bool:
        """Uses more than its quota of a resource the preemptor requests."""
        return bool((self.usage[q][asked] > self.quota[q][asked]).any())

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
