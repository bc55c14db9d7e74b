"""Failed consolidation searches remembered (``Consolidator.MEMO``): a gang alike in the same placement
state is answered without a search, and the decisions are those of searching every time."""

from __future__ import annotations

import pytest
from tests.scripts.load import load_script

from gpufleet.bench.shapes import make_shape
from gpufleet.domain import Snapshot
from gpufleet.engine import consolidation
from gpufleet.engine.scheduler import Engine


def _snapshot(scale: float) -> Snapshot:
    options, flavors = load_script("bench_options"), load_script("bench_flavors")
    snapshot: Snapshot = options.every_option(flavors.flavored(flavors.two_models(make_shape("stuck-gangs", scale))))
    return snapshot


@pytest.mark.parametrize(("scale", "max_plans"), [(0.05, 64), (0.2, 64), (0.2, 10)])
def test_remembered_failed_searches_decide_as_searching_every_time(scale: float, max_plans: int,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Also with few searches allowed per call: a remembered failure takes one, as its search would."""
    snapshot = _snapshot(scale)
    monkeypatch.setattr(consolidation, "MAX_PLANS", max_plans)
    searches = [0]
    original = consolidation.Consolidator._budgeted

    def counting(self, gang, members, required):  # type: ignore[no-untyped-def]
        searches[0] += 1
        return original(self, gang, members, required)

    monkeypatch.setattr(consolidation.Consolidator, "_budgeted", counting)
    first, second = Engine(snapshot), Engine(snapshot)
    remembered = first.run()
    with_memo = searches[0]
    searches[0] = 0
    monkeypatch.setattr(consolidation.Consolidator, "MEMO", False)
    every_time = second.run()
    assert remembered == every_time
    assert first._consolidator is not None and second._consolidator is not None
    assert first._consolidator.plans_left == second._consolidator.plans_left  # each answer took one
    assert remembered.moves, "consolidation moved pods"
    assert with_memo < searches[0], "some searches were answered by a remembered failure"
