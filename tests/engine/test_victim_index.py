"""The victim index's bookkeeping: who may still be a victim, per gang and per queue."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gpufleet.bench.shapes import make_shape
from gpufleet.engine.scheduler import Engine


def test_retired_gangs_leave_the_live_set_the_queue_counts_and_the_walk() -> None:
    engine = Engine(make_shape("preemption", 0.02))
    ix = engine.victims
    ix.ready()
    live_at_start = np.flatnonzero(ix.g_live)
    assert len(live_at_start) > 10
    for g in live_at_start:  # only running, preemptible gangs are victims
        gang = engine.gangs[int(g)]
        assert gang.alive > 0 and gang.preemptible

    def check() -> None:
        counts = np.bincount(np.maximum(ix.g_queue[ix.g_live], 0), minlength=len(engine.forest.queues))
        assert ix.q_live_count.tolist() == counts.tolist()
        alive_in_order = np.flatnonzero(ix.g_live[ix.g_sorted_small])
        expected = int(alive_in_order[0]) if len(alive_in_order) else len(ix.g_sorted_small)
        assert ix.first_live_small() == expected

    check()
    # Retire the walk's front gangs and a few elsewhere, some twice: retiring is idempotent.
    front = [int(g) for g in ix.g_sorted_small[ix.first_live_small():][:5]]
    for g in [*front, int(live_at_start[-1]), front[0], int(live_at_start[len(live_at_start) // 2])]:
        ix.retire(engine.gangs[g])
        check()
    assert not ix.g_live[front].any()


def test_an_index_built_on_the_first_search_equals_one_built_at_the_start() -> None:
    """The arrays are built when a search first needs them: as of the call's start, with the
    gangs admitted since replayed, they equal those of an index built at the start."""
    full = make_shape("preemption", 0.02)
    # Every other running pod finished: room for some pending gangs without a search.
    running = [i for i, p in enumerate(full.pods) if p.bound]
    done = set(running[::2])
    snapshot = replace(full, pods=tuple(replace(p, phase="Succeeded") if i in done else p
                                        for i, p in enumerate(full.pods)))
    eager, lazy = Engine(snapshot), Engine(snapshot)
    eager.victims.ready()
    admitted = 0
    for engine in (eager, lazy):
        for gang in engine.gangs:
            if gang.alive or not gang.members or gang.queue < 0:
                continue
            members = engine.admission.pending_members(gang)
            placed = engine.try_place(gang, members, engine.gang_request(members))
            if placed.ok:
                engine.record(gang, placed)
                admitted += engine is eager
    assert admitted > 3
    lazy.victims.ready()
    for name, value in vars(eager.victims).items():
        if isinstance(value, np.ndarray) and name != "_fresh":
            assert np.array_equal(value, vars(lazy.victims)[name]), name
    assert eager.victims.fresh().tolist() == lazy.victims.fresh().tolist()
    assert eager.victims.priorities == lazy.victims.priorities
