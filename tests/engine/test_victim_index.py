"""The victim index's bookkeeping: who may still be a victim, per gang and per queue."""

from __future__ import annotations

import numpy as np

from gpufleet.bench.shapes import make_shape
from gpufleet.engine.scheduler import Engine


def test_retired_gangs_leave_the_live_set_the_queue_counts_and_the_walk() -> None:
    engine = Engine(make_shape("preemption", 0.02))
    ix = engine.victims
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
