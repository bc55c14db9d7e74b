"""The victim search's budget fallback (docs/semantics-notes.md, Victim search).

The exact search for the best victim set is bounded; when it runs out, a greedy set, eligible and
minimal, is evicted and the call warns that it may not be the best. A preemptor is never left
pending for want of victims while evicting every eligible gang would make it fit.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.adapters.k8s_yaml import load_snapshot_file
from gpufleet.domain import GPU, MILLI, Pod, QueueName, Snapshot
from gpufleet.engine import schedule
from gpufleet.engine.preemption import MAX_TESTS

from .invariants import World, check_all, minimality_counterexamples, pending_gangs
from .strategies import single_gang_snapshots
from .test_properties import PROPERTY, _node, _queue, assert_holds

ISSUE_EXAMPLE = Path(__file__).parents[1] / "scenarios" / "victims" / "budget-fallback-greedy-minimal.yaml"


def test_issue_example_evicts_a_minimal_set_and_says_it_may_not_be_the_best() -> None:
    """A non-preemptible 1-GPU pod whose queue must evict 10 of 12 half-GPU notebooks to be in
    quota: before, it evicted nothing and waited ("no victim set found within 1500 checks")."""
    snapshot = load_snapshot_file(ISSUE_EXAMPLE)
    decisions = schedule(snapshot)
    assert [b.pod for b in decisions.bindings] == ["ml/serve-0"]
    assert len(decisions.evictions) == 10
    assert decisions.warnings == (
        f"victims for ml/serve-0: the exact search ran out of its {MAX_TESTS} checks; "
        "the set of 10 gangs evicted is eligible and minimal but may not be the best",
    )
    assert_holds(check_all(snapshot, decisions) + minimality_counterexamples(snapshot, decisions, schedule),
                 decisions)


def _within_queue_victims(snapshot: Snapshot) -> set[str] | None:
    """Pod keys of the gangs the one pending gang W may always evict together: preemptible
    running gangs of W's own queue with a strictly lower priority (no quota condition)."""
    gangs = pending_gangs(snapshot)
    if len(gangs) != 1:
        return None
    world = World(snapshot)
    ((gang, w_pods),) = gangs.items()
    queue = world.queue_of(w_pods[0])
    if not any(q.name == queue and q.within_queue.value == "Never" for q in snapshot.queues):
        prio = world.gang_priority(gang)
        return {
            p.key for p in snapshot.pods
            if p.bound and p.ours and world.queue_of(p) == queue
            and world.gang_preemptible(world.gang_of(p)) and world.gang_priority(world.gang_of(p)) < prio
        }
    return set()


def _not_left_pending(snapshot: Snapshot) -> None:
    """If W fits once every lower-priority gang of its queue is gone (and nothing else is
    preemptible), some eligible set exists, so W is not left pending; and any set is minimal."""
    decisions = schedule(snapshot)
    assert_holds(check_all(snapshot, decisions) + minimality_counterexamples(snapshot, decisions, schedule),
                 decisions)
    victims = _within_queue_victims(snapshot)
    if not victims:
        return
    w_keys = {p.key for pods in pending_gangs(snapshot).values() for p in pods}
    if any(b.pod in w_keys for b in decisions.bindings):
        return
    pods = tuple(replace(p, preemptible_label=False) if p.bound and p.ours else p
                 for p in snapshot.pods if p.key not in victims)
    again = schedule(replace(snapshot, pods=pods))
    placed = sorted(b.pod for b in again.bindings if b.pod in w_keys)
    assert not placed, (
        f"W fits once the {len(victims)} eligible lower-priority gangs are gone (binds {placed}), "
        f"but was left pending: {[p.reason for p in decisions.pending if p.pod in w_keys][:1]}"
    )


@st.composite
def notebook_clusters(draw: st.DrawFn) -> Snapshot:
    """Eviction-heavy: 1-3 nodes of 4 GPUs, 10-16 running fractional notebooks (25 or 50 blocks)
    of one queue at low priority, and one pending pod of that queue at a higher priority
    (non-preemptible or not), asking for 1-2 whole GPUs or a fraction, against a small quota."""
    n_nodes = draw(st.integers(1, 3))
    nodes = tuple(_node(f"n{i}", gpus=4) for i in range(n_nodes))
    free = {(i, g): 100 for i in range(n_nodes) for g in range(4)}
    pods: list[Pod] = []
    for k in range(draw(st.integers(10, 16))):
        blocks = draw(st.sampled_from([25, 50]))
        spots = [spot for spot, left in free.items() if left >= blocks]
        if not spots:
            break
        spot = draw(st.sampled_from(spots))
        free[spot] -= blocks
        pods.append(Pod("ml", f"nb-{k:02d}", queue_label=QueueName("q"), node_name=nodes[spot[0]].name,
                        phase="Running", gpu_index=(spot[1],), gpu_blocks=blocks, priority=10,
                        start_time=float(draw(st.integers(1, 50)))))
    if draw(st.booleans()):
        w = Pod("ml", "w", queue_label=QueueName("q"), requests={GPU: draw(st.integers(1, 2)) * MILLI},
                priority=draw(st.sampled_from([50, 200])), creation_time=100.0)
    else:
        w = Pod("ml", "w", queue_label=QueueName("q"), gpu_blocks=draw(st.sampled_from([50, 75, 100])),
                priority=draw(st.sampled_from([50, 200])), creation_time=100.0)
    return Snapshot(nodes=nodes, pods=(*pods, w), queues=(_queue("q", draw(st.integers(1, 4))),))


@settings(PROPERTY, max_examples=250)
@given(notebook_clusters())
def test_many_small_victims_past_the_budget_still_make_room(snapshot: Snapshot) -> None:
    """The issue's shape at random (it found 3 of 249 clusters where a pod the spec entitles to
    preempt waited; before the fallback this test fails within its first examples)."""
    _not_left_pending(snapshot)


@settings(PROPERTY, max_examples=250)
@given(single_gang_snapshots(max_nodes=3, max_running=20))
def test_a_gang_that_fits_after_evicting_every_eligible_gang_is_not_left_pending(snapshot: Snapshot) -> None:
    """The general random clusters with up to 20 running gangs (W's queue holds half of them)."""
    _not_left_pending(snapshot)
