"""Properties of reservation and backfill (docs/semantics.md, "Reservation and backfill").

Random snapshots of ``strategies.py`` with the option on (``after`` small, so that waiting gangs
reserve), random declared runtimes (some malformed) on pods and observed runtimes on queues:

- a reservation never over-commits: reservations never share a node, and each one's nodes have at
  least the healthy GPUs it reserves;
- nothing this decision binds on a reserved node may not be there: the reserved gang, a preemptible
  gang, or one whose every pod declared a runtime that ends by the reservation's start;
- an eviction for a reservation takes only a gang that started after the reserved gang began to
  wait, and that is preemptible or runs past its declared runtime;
- every old invariant (``invariants.check_all``) holds, the reservation's evictions aside (a rule of
  their own, checked above).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain import (
    ANNOTATION_EXPECTED_RUNTIME,
    GPU,
    MILLI,
    Decisions,
    EvictionReason,
    Pod,
    ReservationConfig,
    Snapshot,
)
from gpufleet.domain.units import duration_seconds
from gpufleet.engine import schedule

from .invariants import World, check_all
from .strategies import gang_snapshots, snapshots
from .test_properties import PROPERTY, assert_holds


def _declared(pod: Pod) -> float | None:
    text = pod.annotations.get(ANNOTATION_EXPECTED_RUNTIME)
    if text is None:
        return None
    try:
        return duration_seconds(text)
    except ValueError:
        return None


@st.composite
def reserved_snapshots(draw: Any) -> Snapshot:
    base: Snapshot = draw(st.one_of(snapshots(), gang_snapshots()))
    latest = max([p.creation_time for p in base.pods] + [p.start_time or 0.0 for p in base.pods] + [0.0])
    now = latest + draw(st.integers(0, 120))
    pods = []
    for pod in base.pods:
        choice = draw(st.integers(0, 4))
        if choice <= 1:
            pods.append(pod)
            continue
        text = "soon" if choice == 2 and draw(st.booleans()) else f"{draw(st.integers(0, 200))}s"
        pods.append(replace(pod, annotations={**pod.annotations, ANNOTATION_EXPECTED_RUNTIME: text}))
    observed = {q.name: float(draw(st.integers(0, 300))) for q in base.queues if draw(st.booleans())}
    config = replace(base.config, now=now, reservation=ReservationConfig(
        after=float(draw(st.integers(0, 60))), max=draw(st.integers(1, 3)), observed_runtime=observed))
    return replace(base, pods=tuple(pods), config=config)


def _gang_started(world: World, gang: str, now: float) -> float:
    starts = [p.start_time if p.start_time is not None else p.creation_time
              for p in world.members.get(gang, []) if p.bound]
    return min(starts) if starts else now


def _check(snapshot: Snapshot, decisions: Decisions) -> list[str]:
    world = World(snapshot)
    now = snapshot.config.now
    assert now is not None
    out: list[str] = []
    nodes = {n.name: n for n in snapshot.nodes}
    seen: dict[str, str] = {}
    gang_pods = world.members
    for r in decisions.reservations:
        healthy = sum(nodes[n].allocatable.get(GPU, 0) // MILLI - len(nodes[n].unhealthy_gpus) for n in r.nodes)
        if healthy < r.gpus:
            out.append(f"{r.gang}: {r.gpus} GPUs reserved on nodes with {healthy}")
        for n in r.nodes:
            if n in seen:
                out.append(f"node {n} reserved for {seen[n]} and {r.gang}")
            seen[n] = r.gang
    reserved = {n: r for r in decisions.reservations for n in r.nodes}
    for b in decisions.bindings:
        r = reserved.get(b.node)
        pod = world.pods[b.pod]
        if r is None or not b.gpus or world.gang_of(pod) == r.gang:
            continue
        gang = world.gang_of(pod)
        if world.gang_preemptible(gang):
            continue
        declared = [_declared(p) for p in gang_pods[gang] if not p.bound]
        if not all(d is not None and now + d <= r.start for d in declared):
            out.append(f"{b.pod} bound on {b.node}, reserved for {r.gang} from {r.start}: not a backfill")
    for e in decisions.evictions:
        if e.reason is not EvictionReason.RESERVATION:
            continue
        pod = world.pods[e.pod]
        gang, by = world.gang_of(pod), world.gang_of(world.pods[e.by])
        waited = min(p.creation_time for p in gang_pods[by])
        group = world.groups.get(by)
        if group is not None and group.queued_at is not None:
            waited = min(waited, group.queued_at)
        if _gang_started(world, gang, now) < waited:
            out.append(f"{e.pod} evicted for {by}, but it ran before {by} began to wait")
        overran = any(p.bound and (d := _declared(p)) is not None
                      and (p.start_time if p.start_time is not None else p.creation_time) + d < now
                      for p in gang_pods[gang])
        if not (world.gang_preemptible(gang) or overran):
            out.append(f"{e.pod} evicted for {by}: neither preemptible nor past its declared runtime")
    return out


@PROPERTY
@given(reserved_snapshots())
def test_reservations_never_overcommit_and_only_backfill_uses_them(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    problems = _check(snapshot, decisions)
    assert not problems, "\n".join([*problems, f"reservations: {decisions.reservations}"])


@PROPERTY
@given(reserved_snapshots())
def test_old_invariants_hold_with_reservations_on(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    by_reservation = {e.pod for e in decisions.evictions if e.reason is EvictionReason.RESERVATION}
    by_reservation |= {e.by for e in decisions.evictions if e.reason is EvictionReason.RESERVATION}
    violations = [v for v in check_all(snapshot, decisions)
                  if not any(p in v.message for p in by_reservation)]
    assert_holds(violations, decisions)


def test_some_examples_reserve() -> None:
    """The strategy reaches the rule: a few drawn snapshots do hold reservations (not vacuous)."""
    found: list[int] = []

    @PROPERTY
    @given(reserved_snapshots())
    def probe(snapshot: Snapshot) -> None:
        if schedule(snapshot).reservations:
            found.append(1)

    probe()
    assert len(found) >= 5


@PROPERTY
@given(reserved_snapshots())
def test_the_failure_memo_and_the_batch_do_not_change_decisions_with_reservations_on(snapshot: Snapshot) -> None:
    """Held GPUs differ by gang: the memo keys failures by which reservations a gang may use."""
    from gpufleet.engine.scheduler import Engine

    plain = Engine(snapshot)
    plain.MEMO_FAILURES = False
    plain.USE_BATCH = False
    assert schedule(snapshot) == plain.run()
