"""The static part of the node penalty (preferred node affinity, PreferNoSchedule taints):
docs/semantics-notes.md, "Soft scores"."""

from __future__ import annotations

import numpy as np

from gpufleet.domain import (
    Node,
    NodeName,
    Pod,
    SelectorRequirement,
    SelectorTerm,
    Snapshot,
    Taint,
    TaintEffect,
    Toleration,
)
from gpufleet.engine.feasibility import PREFER_NO_SCHEDULE_PENALTY, StaticFeasibility
from gpufleet.engine.scheduler import Engine

ZONE_A = SelectorTerm(expressions=(SelectorRequirement("zone", "In", ("a",)),))
SPOT = Taint("spot", "true", TaintEffect.PREFER_NO_SCHEDULE)


def nodes(taint_first: bool) -> list[Node]:
    return [
        Node(NodeName("n1"), labels={"zone": "a"}, taints=(SPOT,) if taint_first else ()),
        Node(NodeName("n2"), labels={"zone": "b"}),
        Node(NodeName("n3"), labels={"zone": "a"}, taints=(SPOT, Taint("gpu", "", TaintEffect.PREFER_NO_SCHEDULE))),
    ]


def feasibility(taint_first: bool = True) -> StaticFeasibility:
    listed = nodes(taint_first)
    return StaticFeasibility(listed, np.ones(len(listed), dtype=np.bool_))


def test_weights_of_unmatched_terms_plus_100_per_untolerated_taint() -> None:
    pod = Pod("ml", "p", preferred_affinity=((30, ZONE_A),))
    got = feasibility().preference(pod)
    assert got is not None
    # n1: taint 100; n2: term 30; n3: two taints 200; less the minimum (30).
    assert got.tolist() == [100 - 30, 0, 2 * PREFER_NO_SCHEDULE_PENALTY - 30]


def test_tolerated_taints_cost_nothing_and_uniform_penalties_order_nothing() -> None:
    f = feasibility(taint_first=False)
    tolerant = Pod("ml", "p", tolerations=(Toleration(None, "Exists", "", None),))
    assert f.preference(tolerant) is None  # no taint counts, no term: the same on every node
    one = Pod("ml", "q", tolerations=(Toleration("gpu", "Exists", "", TaintEffect.PREFER_NO_SCHEDULE),))
    got = f.preference(one)
    assert got is not None and got.tolist() == [0, 0, 100]


def test_cached_per_distinct_terms_and_tolerations() -> None:
    f = feasibility()
    a = f.preference(Pod("ml", "a", preferred_affinity=((30, ZONE_A),)))
    b = f.preference(Pod("ml", "b", labels={"x": "y"}, preferred_affinity=((30, ZONE_A),)))
    assert a is b


def test_a_cluster_without_preferences_pays_nothing() -> None:
    plain = Snapshot(nodes=(Node(NodeName("n1")),), pods=(Pod("ml", "p"),))
    assert not Engine(plain).placer.soft
    tainted = Snapshot(nodes=(Node(NodeName("n1"), taints=(SPOT,)),), pods=(Pod("ml", "p"),))
    assert Engine(tainted).placer.soft
