"""The victim search's first test before the index is built (``VictimIndex.maybe_live``): it may say a
queue has a live gang where it has none, never the reverse, so a search it ends finds nothing anyway."""

from __future__ import annotations

from dataclasses import replace

from gpufleet.bench.shapes import make_shape
from gpufleet.domain import LABEL_QUEUE, Pod, Queue, QueueName, Snapshot
from gpufleet.engine.scheduler import Engine


def _half_done() -> Snapshot:
    """``preemption`` with every other running pod finished (room for pending gangs to be admitted),
    its pending pods in a queue of their own: a queue nothing runs in at the start."""
    full = make_shape("preemption", 0.02)
    running = [i for i, p in enumerate(full.pods) if p.bound]
    done = set(running[::2])
    fresh = QueueName("fresh")

    def pod(i: int, p: Pod) -> Pod:
        if i in done:
            return replace(p, phase="Succeeded")
        if p.bound:
            return p
        return replace(p, queue_label=fresh, labels={**p.labels, LABEL_QUEUE: fresh})

    return replace(full, pods=tuple(pod(i, p) for i, p in enumerate(full.pods)),
                   queues=(*full.queues, Queue(name=fresh)))


def _admit_some(engine: Engine) -> int:
    """Admit the pending gangs that fit, one by one; how many."""
    admitted = 0
    for gang in engine.gangs:
        if gang.alive or not gang.members or gang.queue < 0:
            continue
        members = engine.admission.pending_members(gang)
        placed = engine.try_place(gang, members, engine.gang_request(members))
        if placed.ok:
            engine.record(gang, placed)
            admitted += 1
    return admitted


def test_maybe_live_before_the_build_covers_every_live_queue_after_it() -> None:
    snapshot = _half_done()
    lazy, eager = Engine(snapshot), Engine(snapshot)
    eager.victims.ready()
    # Before any admission: the running preemptible gangs' queues.
    assert lazy.victims._admitted is not None
    before = lazy.victims.maybe_live()
    assert all(m or c == 0 for m, c in zip(before, eager.victims.q_live_count.tolist(), strict=True))
    assert _admit_some(lazy) == _admit_some(eager) > 3
    maybe = lazy.victims.maybe_live()
    assert lazy.victims._admitted is not None, "maybe_live builds nothing"
    live = (eager.victims.q_live_count > 0).tolist()
    assert all(m or not x for m, x in zip(maybe, live, strict=True))
    # Admitted gangs make their queue live: a queue with none running at the start shows it.
    fresh = [q for q, x in enumerate(live) if x and not before[q]]
    assert fresh, "some queue is live only by this call's admissions"
    assert all(maybe[q] for q in fresh)
    lazy.victims.ready()  # once built, the exact counts
    assert lazy.victims.maybe_live() == live


def test_min_runtime_keeps_admitted_gangs_out_of_maybe_live() -> None:
    """A queue whose ``minRuntime`` protects what the call admits: its admissions make it no more
    live before the build than after it (where young_gangs leaves them out)."""
    base = _half_done()
    snapshot = replace(base, queues=tuple(replace(q, min_runtime=600.0) for q in base.queues),
                       config=replace(base.config, now=max(p.creation_time for p in base.pods) + 3600.0))
    lazy, eager = Engine(snapshot), Engine(snapshot)
    eager.victims.ready()
    before = lazy.victims.maybe_live()
    assert _admit_some(lazy) == _admit_some(eager) > 3
    assert lazy.victims.maybe_live() == before  # nothing admitted counts
    live = (eager.victims.q_live_count > 0).tolist()
    assert all(m or not x for m, x in zip(before, live, strict=True))
