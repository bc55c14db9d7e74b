"""A backlog of identical pods on a full cluster: one placement and victim search, many reuses."""

from __future__ import annotations

from gpufleet.bench.shapes import make_shape
from gpufleet.engine.scheduler import Engine


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

    memo = Engine(snap)
    attempts = 0
    original = memo.attempt

    def counting(gang, request):  # type: ignore[no-untyped-def]
        nonlocal attempts
        attempts += 1
        return original(gang, request)

    memo.attempt = counting  # type: ignore[method-assign]
    with_memo = memo.run()
    plain = Engine(snap)
    plain.MEMO_FAILURES = False
    without = plain.run()
    assert with_memo == without
    assert len(with_memo.pending) == len(pending)
    assert attempts < len(pending)  # the first failure stands for the rest
