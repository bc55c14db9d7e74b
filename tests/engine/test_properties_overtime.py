"""Properties of fairness over time and the disruption guards (docs/semantics.md).

With every new option on (a time, decayed usage, a minimum runtime and a preemption delay on random
queues) the old invariants still hold, the guards hold, and with the options off (or no time) the
decisions are byte-identical to those of the same snapshot without them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain import Decisions, EvictionReason, Snapshot
from gpufleet.engine import schedule

from .invariants import Violation, check_all
from .strategies import gang_snapshots, single_gang_snapshots, snapshots
from .test_properties import PROPERTY, assert_holds

Draw = st.DrawFn


@st.composite
def timed(draw: Draw, base: st.SearchStrategy[Snapshot]) -> Snapshot:
    """``base`` with a time, a usage half-life and, per queue, decayed usage, a minimum runtime and a
    preemption delay (each at random, zero included)."""
    snapshot = draw(base)
    times = [t for p in snapshot.pods for t in (p.creation_time, p.start_time) if t is not None]
    now = max(times, default=0.0) + draw(st.integers(0, 20))
    queues = tuple(
        replace(
            q,
            min_runtime=float(draw(st.sampled_from([0, 0, 2, 5, 30]))),
            preemption_delay=float(draw(st.sampled_from([0, 0, 3, 10, 100]))),
            decayed_usage={r: draw(st.integers(0, 8000)) for r in draw(st.sets(st.sampled_from(
                sorted(q.resources) or ["nvidia.com/gpu"])))},
            decayed_at=now - draw(st.integers(0, 50)),
        )
        for q in snapshot.queues
    )
    config = replace(snapshot.config, now=now, usage_half_life=float(draw(st.sampled_from([0, 10, 1000]))))
    return replace(snapshot, queues=queues, config=config)


def guard_violations(snapshot: Snapshot, decisions: Decisions) -> list[Violation]:
    """No evicted gang of a queue with a minimum runtime had a pod younger than it; no gang of a queue
    with a preemption delay evicted before it had waited that long."""
    now = snapshot.config.now
    assert now is not None
    queues = {q.name: q for q in snapshot.queues}
    pods = {p.key: p for p in snapshot.pods}
    out: list[Violation] = []

    def queue_of(key: str) -> str | None:
        pod = pods[key]
        if pod.queue_label:
            return pod.queue_label
        group = next((g for g in snapshot.pod_groups if pod.group_label and g.key == f"{pod.namespace}/{pod.group_label}"),
                     None)
        return group.queue if group is not None and group.queue else snapshot.config.default_queue

    for e in decisions.evictions:
        if e.reason not in (EvictionReason.RECLAIM, EvictionReason.PREEMPT) or e.pod not in pods:
            continue
        victim = pods[e.pod]
        q = queues.get(queue_of(e.pod))  # type: ignore[arg-type]
        if q is not None and q.min_runtime > 0 and victim.node_name:
            start = victim.start_time if victim.start_time is not None else victim.creation_time
            if now - start < q.min_runtime:
                out.append(Violation("minRuntime", f"{e.pod} evicted {now - start}s after its start"))
        by = queues.get(queue_of(e.by))  # type: ignore[arg-type]
        if by is not None and by.preemption_delay > 0:
            waited = now - pods[e.by].creation_time
            group = next((g for g in snapshot.pod_groups if g.key == f"{pods[e.by].namespace}/"
                          f"{pods[e.by].group_label}"), None)
            if group is not None and group.queued_at is not None:
                waited = max(waited, now - group.queued_at)
            if waited < by.preemption_delay:
                out.append(Violation("preemptionDelay", f"{e.by} evicted after waiting {waited}s"))
    return out


@PROPERTY
@given(st.one_of(timed(snapshots()), timed(gang_snapshots()), timed(single_gang_snapshots())))
def test_old_invariants_and_the_guards_hold_with_every_option_on(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    assert_holds(check_all(snapshot, decisions) + guard_violations(snapshot, decisions), decisions)


@PROPERTY
@given(st.one_of(timed(snapshots()), timed(gang_snapshots())))
def test_decisions_are_the_specs_with_the_options_off(snapshot: Snapshot) -> None:
    bare = replace(snapshot, config=replace(snapshot.config, now=None, usage_half_life=0.0),
                   queues=tuple(replace(q, min_runtime=0.0, preemption_delay=0.0, decayed_usage={}, decayed_at=None)
                                for q in snapshot.queues))
    expected = dataclasses.asdict(schedule(bare))
    # No time: every rule that needs one is off, whatever the queues and the config say.
    assert dataclasses.asdict(schedule(replace(snapshot, config=replace(snapshot.config, now=None)))) == expected
    # A time, but every option off: the same decisions too.
    assert dataclasses.asdict(schedule(replace(bare, config=replace(bare.config, now=snapshot.config.now)))) == expected
