"""The Queues page: the queue tree with quota, usage, borrowed, lent and limit per managed resource,
each leaf's pending gangs in admission order, and each queue's place in its parent's fair order.

The figures are the engine's queue forest (:class:`gpufleet.engine.queues.QueueForest`) with the
running pods bound: its quotas (a parent without one: the sum of its children's), usage, limits,
lending limits and fair keys (``dominant_usage``, the in-quota key; ``borrowed_share``, the key of
the borrowing round). The pending gangs are ``gpufleet.engine.admission_order``. Borrowed and lent are
read off those figures (docs/dashboard.md, "Queues"): borrowed is usage above quota; what siblings
borrow is lent by the siblings under their quota, in proportion to what each leaves unused (capped
by its lending limit).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.engine.queues import NONE, fmt_amount
from gpufleet.web.access import Visibility
from gpufleet.web.fleet import Fleet

__all__ = ["PENDING_SHOWN", "QueueRow", "QueuesView", "ResourceBar", "queues_view"]

PENDING_SHOWN = 20  # pending gangs listed per queue (the count says how many more)


@dataclass(frozen=True, slots=True)
class ResourceBar:
    resource: str
    quota: int  # milli-units
    usage: int
    borrowed: int
    lent: int
    limit: int | None
    scale: int  # the bar's full width, in milli-units: the largest of the figures

    def text(self, milli: int) -> str:
        return fmt_amount(self.resource, milli)

    def pct(self, milli: int) -> float:
        return 0.0 if self.scale <= 0 else round(100.0 * min(milli, self.scale) / self.scale, 2)


@dataclass(frozen=True, slots=True)
class QueueRow:
    name: str
    depth: int
    parent: str | None
    leaf: bool
    weight: float
    masked: bool  # an ancestor shown for the tree's sake: its figures are not the caller's to see
    bars: tuple[ResourceBar, ...]
    fair_rank: int  # 1 = first in its parent's fair order
    fair_of: int
    dominant: float  # the in-quota fair key: the largest usage/quota share
    borrowed_share: float  # the borrowing round's key
    pending: tuple[str, ...]  # gang keys, first tried first (at most PENDING_SHOWN)
    pending_count: int


@dataclass(frozen=True, slots=True)
class QueuesView:
    rows: tuple[QueueRow, ...]
    resources: tuple[str, ...]


def _lent(fleet: Fleet, siblings: list[int]) -> dict[int, list[int]]:
    """What each of ``siblings`` lends, per managed resource (see the module text)."""
    f = fleet.forest
    out: dict[int, list[int]] = {s: [0] * f.m for s in siblings}
    for j in range(f.m):
        borrowed = sum(max(0, f.usage[s][j] - f.quota[s][j]) for s in siblings)
        unused = {s: max(0, f.quota[s][j] - f.usage[s][j]) for s in siblings}
        for s in siblings:
            if f.lending[s][j] != NONE:
                unused[s] = min(unused[s], f.lending[s][j])
        total = sum(unused.values())
        if borrowed <= 0 or total <= 0:
            continue
        share = min(1.0, borrowed / total)
        for s in siblings:
            out[s][j] = round(unused[s] * share)
    return out


def queues_view(fleet: Fleet, vis: Visibility) -> QueuesView:
    f = fleet.forest
    n = len(f.queues)
    seen = [vis.sees_queue(f.name(i)) or any(vis.sees_queue(f.name(i), p) for p in fleet.queue_projects(f.name(i)))
            for i in range(n)]
    shown = list(seen)
    for i in range(n):  # the ancestors of a visible queue are shown (masked) to keep the tree
        if seen[i]:
            for a in f.paths[i][1:]:
                shown[a] = True
    lent: dict[int, list[int]] = {}
    rank: dict[int, tuple[int, int]] = {}
    for parent in [NONE, *range(n)]:
        kids = f.roots if parent == NONE else f.children[parent]
        if not kids:
            continue
        lent.update(_lent(fleet, kids))
        order = sorted(kids, key=lambda q: (f.dominant_usage(q), f.name(q)))
        for pos, q in enumerate(order, 1):
            rank[q] = (pos, len(order))
    rows: list[QueueRow] = []
    stack = [(r, 0) for r in reversed(sorted(f.roots, key=f.name))]
    while stack:
        i, depth = stack.pop()
        if not shown[i]:
            continue
        stack.extend((c, depth + 1) for c in reversed(sorted(f.children[i], key=f.name)))
        name = f.name(i)
        bars = []
        if seen[i]:
            for j, r in enumerate(f.managed):
                quota, usage = f.quota[i][j], f.usage[i][j]
                limit = f.limit[i][j] if f.limit[i][j] != NONE else None
                borrowed = max(0, usage - quota)
                scale = max(quota, usage, limit or 0, 1)
                bars.append(ResourceBar(r, quota, usage, borrowed, lent.get(i, [0] * f.m)[j], limit, scale))
        gangs = fleet.order.get(name, ()) if seen[i] else ()
        parent = f.parent[i]
        pos, of = rank.get(i, (1, 1))
        rows.append(QueueRow(
            name=name, depth=depth, parent=f.name(parent) if parent != NONE else None, leaf=f.is_leaf(i),
            weight=f.queues[i].weight, masked=not seen[i], bars=tuple(bars), fair_rank=pos, fair_of=of,
            dominant=f.dominant_usage(i) if seen[i] else 0.0,
            borrowed_share=f.borrowed_share(i) if seen[i] else 0.0,
            pending=tuple(gangs[:PENDING_SHOWN]), pending_count=len(gangs),
        ))
    return QueuesView(tuple(rows), tuple(f.managed))
