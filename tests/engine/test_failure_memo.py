"""A backlog of identical pods on a full cluster: one placement and victim search, many reuses."""

from __future__ import annotations

from gpufleet.bench.shapes import make_shape
from gpufleet.engine.scheduler import Engine


def _count_calls(engine: Engine, method: str) -> list[int]:
    """Wrap ``engine``'s method (of a gang, its request and whatever else it takes) to count its
    calls in the list's item."""
    calls = [0]
    original = getattr(engine, method)

    def counting(gang, request, *rest):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return original(gang, request, *rest)

    setattr(engine, method, counting)
    return calls


def _counting_run(snap, memo: bool = True):  # type: ignore[no-untyped-def]
    engine = Engine(snap)
    engine.MEMO_FAILURES = memo
    attempts = _count_calls(engine, "attempt")
    return engine.run(), attempts[0]


def test_identical_backlog_reuses_one_failure_and_decides_the_same() -> None:
    # The preemption shape with its preemptors made low priority: nothing can be evicted, so
    # every pending pod fails the same way on the same state.
    snap = make_shape("preemption", 0.02)
    pending = [p for p in snap.pods if p.node_name is None]
    assert len(pending) >= 10
    low = {p.key for p in pending}
    pods = tuple(
        p if p.key not in low else type(p)(**{**{f: getattr(p, f) for f in p.__dataclass_fields__},
                                               "priority_class_name": None, "priority": 0})
        for p in snap.pods
    )
    snap = type(snap)(**{**{f: getattr(snap, f) for f in snap.__dataclass_fields__}, "pods": pods})

    with_memo, attempts = _counting_run(snap)
    without, _ = _counting_run(snap, memo=False)
    assert with_memo == without
    assert len(with_memo.pending) == len(pending)
    assert attempts < len(pending)  # the first failure stands for the rest


def test_stuck_gangs_alike_reuse_one_failure_and_decide_the_same() -> None:
    # Gangs of 4 x 8 GPUs that must share a rack, none of which has 4 whole nodes free.
    snap = make_shape("stuck-gangs", 0.02)
    groups = len(snap.pod_groups)
    assert groups >= 100
    with_memo, attempts = _counting_run(snap)
    without, plain_attempts = _counting_run(snap, memo=False)
    assert with_memo == without
    stuck = [p for p in with_memo.pending if p.pod.split("/")[1].startswith("stuck-")]
    assert len(stuck) == 4 * groups
    assert all("needs one rack with 32 free GPUs" in p.reason for p in stuck)
    assert plain_attempts - attempts >= groups  # every gang but the first reused a failure, each cycle


def test_a_reason_naming_the_gang_is_not_reused_for_another() -> None:
    # Gangs alike whose member asks for a node label no node has: the reason names that member,
    # so each gang gets its own words (and the same decisions as without the memo).
    from dataclasses import replace

    from gpufleet.domain import PodGroup

    snap = make_shape("gang-small", 0.01)
    groups = tuple(replace(g, min_member=3) for g in snap.pod_groups)
    pods = tuple(replace(p, node_selector={"pool": "none"}) if p.name.endswith("-2") else p for p in snap.pods)
    snap = replace(snap, pods=pods, pod_groups=groups)
    assert all(isinstance(g, PodGroup) for g in snap.pod_groups)
    with_memo, _ = _counting_run(snap)
    without, _ = _counting_run(snap, memo=False)
    assert with_memo == without
    by_pod = {p.pod: p.reason for p in with_memo.pending}
    named = [(key, reason) for key, reason in by_pod.items() if str(key).endswith("-2")]
    assert named and all(reason.count(str(key)) == 1 for key, reason in named)


def test_signatures_are_computed_only_where_a_memo_can_answer() -> None:
    # Every pod of `basic` fits: no failure is remembered, so no attempt needs its signature
    # (issue 13: the signature is taken before an attempt only while a failure of the current
    # state is remembered, else after a failed attempt, to remember it).
    snap = make_shape("basic", 0.01)
    engine = Engine(snap)
    calls = _count_calls(engine, "failure_signature")
    decisions = engine.run()
    assert decisions.bindings and not decisions.pending
    assert calls == [0]
    assert decisions == Engine(snap).run()
