"""The fair-order tournament (``admission.Turn``) against a brute-force pick on random forests.

The reference below is the pick as the spec words it, recomputed from scratch at every step:
every head's in-quota test, the pool (in-quota heads, or all of them when none is), and the walk
level by level from the roots. Random forests, quotas, weights, usage and heads; random
sequences of admissions, evictions and other usage changes between picks.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.domain import CPU, GPU, Queue, QueueName, QueueResource
from gpufleet.engine.admission import Turn
from gpufleet.engine.queues import QueueForest
from gpufleet.engine.workload import Gang

RESOURCES = (GPU, CPU)


def reference_pick(f: QueueForest, gangs: list[Gang], heads: dict[int, int], requests: dict[int, list[int]]) -> int:
    in_quota = {leaf: f.in_quota(leaf, requests[g]) for leaf, g in heads.items()}
    pool = {leaf: g for leaf, g in heads.items() if in_quota[leaf]} or heads
    borrowing = not any(in_quota.values())

    def key(q: int) -> float:
        return f.borrowed_share(q) if borrowing else f.dominant_usage(q)

    def tiebreak(g: int) -> tuple[int, float, str]:
        return (-gangs[g].priority, gangs[g].creation, gangs[g].key)

    def best(q: int) -> int | None:
        if f.is_leaf(q):
            return pool.get(q)
        options = [(c, b) for c in f.children[q] if (b := best(c)) is not None]
        return min(options, key=lambda cb: (key(cb[0]), tiebreak(cb[1])))[1] if options else None

    roots = [(r, b) for r in f.roots if (b := best(r)) is not None]
    return min(roots, key=lambda rb: (key(rb[0]), tiebreak(rb[1])))[1]


class Order:
    """What a Turn reads of the FairOrder: the gangs, and each gang's pending members."""

    def __init__(self, forest: QueueForest, gangs: list[Gang]) -> None:
        self.forest = forest
        self.gangs = gangs
        self.whole_requests: dict[int, list[int]] = {}
        self.ties: dict[int, tuple[int, float, str]] = {}

    def pending_members(self, gang: Gang) -> list[int]:
        return [gang.idx]

    def tie(self, g: int) -> tuple[int, float, str]:
        gang = self.gangs[g]
        return self.ties.setdefault(g, (-gang.priority, gang.creation, gang.key))


@st.composite
def forests(draw: Any) -> tuple[QueueForest, int]:
    m = draw(st.integers(1, 2))
    count = draw(st.integers(1, 12))
    queues: list[Queue] = []
    depth: dict[str, int] = {}
    for i in range(count):
        name = f"q{i:02d}"
        parents = [q.name for q in queues if depth[q.name] < 2]
        parent = draw(st.sampled_from(parents)) if parents and draw(st.booleans()) else None
        depth[name] = 0 if parent is None else depth[parent] + 1
        resources = {}
        for r in RESOURCES[:m]:
            if draw(st.integers(0, 3)):
                resources[r] = QueueResource(quota=draw(st.integers(0, 6)))
        weight = draw(st.sampled_from([0.5, 1.0, 2.0]))
        queues.append(Queue(name=QueueName(name), parent=QueueName(parent) if parent else None, weight=weight,
                            resources=resources))
    capacity = {r: draw(st.integers(0, 20)) for r in RESOURCES[:m]}
    return QueueForest(queues, capacity), m


def _turn(f: QueueForest, gangs: list[Gang], requests: dict[int, list[int]],
          per_leaf: dict[int, list[int]]) -> tuple[Turn, dict[int, int]]:
    """A cycle's turn over ``per_leaf`` (each leaf's gangs put in queue order), and each leaf's
    next gang's position (0)."""
    for lst in per_leaf.values():
        lst.sort(key=lambda g: (-gangs[g].priority, gangs[g].creation, gangs[g].key))
    order = Order(f, gangs)
    turn = Turn(order, per_leaf, lambda members: requests[members[0]])  # type: ignore[arg-type]
    return turn, dict.fromkeys(per_leaf, 0)


PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@PROPERTY
@given(forests(), st.data())
def test_tournament_picks_what_the_brute_force_order_picks(forest_m: tuple[QueueForest, int], data: Any) -> None:
    f, _ = forest_m
    m = f.m  # the managed resources: those some queue sets a quota for
    leaves = [q for q in range(len(f.queues)) if f.is_leaf(q)]
    amounts = st.lists(st.integers(0, 3), min_size=m, max_size=m)
    for _ in range(data.draw(st.integers(0, 6))):  # usage of running work
        f.add(data.draw(st.sampled_from(leaves)), data.draw(amounts))
    gangs: list[Gang] = []
    requests: dict[int, list[int]] = {}
    per_leaf: dict[int, list[int]] = {}
    for g in range(data.draw(st.integers(1, 25))):
        leaf = data.draw(st.sampled_from(leaves))
        # Few priorities, creation times and names: ties at every level of the tiebreak.
        gangs.append(Gang(g, f"ns/g{data.draw(st.integers(0, 3))}", [g], 1, leaf, data.draw(st.sampled_from([0, 5])),
                          True, True, float(data.draw(st.integers(0, 2)))))
        requests[g] = data.draw(amounts)
        per_leaf.setdefault(leaf, []).append(g)
    turn, pointer = _turn(f, gangs, requests, per_leaf)
    admitted: list[tuple[int, list[int]]] = []
    while True:
        heads = {leaf: lst[pointer[leaf]] for leaf, lst in per_leaf.items() if pointer[leaf] < len(lst)}
        chosen = turn.pick()
        if not heads:
            assert chosen == -1
            break
        assert chosen == reference_pick(f, gangs, heads, requests)
        for head_leaf, g in heads.items():  # the kept verdicts are the rule's, on the state now
            assert turn.inq[head_leaf] == f.in_quota(head_leaf, requests[g])
        leaf = gangs[chosen].queue
        assert turn.request(leaf) == requests[chosen]
        action = data.draw(st.integers(0, 4))
        if action <= 2:  # admitted
            f.add(leaf, requests[chosen])
            admitted.append((leaf, requests[chosen]))
        if action == 3 and admitted:  # an eviction (and maybe the admission it made room for)
            victim = admitted.pop(data.draw(st.integers(0, len(admitted) - 1)))
            f.add(victim[0], victim[1], -1)
            if data.draw(st.booleans()):
                f.add(leaf, requests[chosen])
        if action == 4:  # a trial: usage taken off and put back
            other = data.draw(st.sampled_from(leaves))
            f.add(other, [1] * m)
            f.add(other, [1] * m, -1)
        pointer[leaf] += 1
        turn.advance(leaf)


@PROPERTY
@given(forests(), st.data())
def test_answer_run_offers_the_picks_the_tournament_makes_one_by_one(forest_m: tuple[QueueForest, int],
                                                                     data: Any) -> None:
    """``Turn.answer_run`` (a stretch of picks answered with no change of state) offers the gangs
    the one-by-one picks would give, in that order, stops at the first one not answered, and leaves
    the turn where the one-by-one loop would: every later pick is the brute-force order's. Between
    stretches, picks not answered are admitted or not (usage changes), as in the loop."""
    f, _ = forest_m
    m = f.m
    leaves = [q for q in range(len(f.queues)) if f.is_leaf(q)]
    amounts = st.lists(st.integers(0, 3), min_size=m, max_size=m)
    for _ in range(data.draw(st.integers(0, 6))):
        f.add(data.draw(st.sampled_from(leaves)), data.draw(amounts))
    gangs: list[Gang] = []
    requests: dict[int, list[int]] = {}
    per_leaf: dict[int, list[int]] = {}
    answerable: set[int] = set()
    for g in range(data.draw(st.integers(1, 30))):
        leaf = data.draw(st.sampled_from(leaves))
        gangs.append(Gang(g, f"ns/g{g:02d}", [g], 1, leaf, data.draw(st.sampled_from([0, 5])),
                          True, True, float(data.draw(st.integers(0, 2)))))
        requests[g] = data.draw(st.sampled_from([[1] * m, [0] * m])) if data.draw(st.booleans()) \
            else data.draw(amounts)
        if data.draw(st.integers(0, 3)):
            answerable.add(g)
        per_leaf.setdefault(leaf, []).append(g)
    turn, pointer = _turn(f, gangs, requests, per_leaf)
    stretches = 0

    def heads() -> dict[int, int]:
        return {leaf: lst[pointer[leaf]] for leaf, lst in per_leaf.items() if pointer[leaf] < len(lst)}

    def answer(g: int, request: list[int]) -> bool:
        now = heads()
        assert now and g == reference_pick(f, gangs, now, requests)  # the next one-by-one pick
        assert request == requests[g]
        if g in answerable:
            pointer[gangs[g].queue] += 1
            return True
        return False

    while True:
        chosen = turn.pick()
        now = heads()
        if not now:
            assert chosen == -1
            break
        assert chosen == reference_pick(f, gangs, now, requests)
        leaf = gangs[chosen].queue
        pointer[leaf] += 1
        if chosen in answerable:
            stretches += 1
            turn.answer_run(leaf, answer)
            continue
        if data.draw(st.booleans()):  # admitted: usage changes before the next pick
            f.add(leaf, requests[chosen])
        turn.advance(leaf)
    assert all(pointer[leaf] == len(lst) for leaf, lst in per_leaf.items())


def test_schedule_on_a_queue_tree_leaves_no_cyclic_garbage() -> None:
    """``schedule()`` pauses the cyclic collector, so what it builds must die by reference
    counting: no closures over the forest, no structure kept per decision."""
    import gc

    from gpufleet.bench.shapes import make_shape
    from gpufleet.engine import schedule

    for shape in ("queues-2000", "stuck-gangs"):
        snapshot = make_shape(shape, 0.05)
        schedule(snapshot)  # first use: modules imported lazily leave their own import-time cycles
        gc.collect()
        enabled = gc.isenabled()
        gc.disable()
        try:
            decisions = schedule(snapshot)
            assert gc.collect() == 0, shape
        finally:
            if enabled:
                gc.enable()
        assert decisions.bindings
