"""A DoNotSchedule spread constraint whose eligible nodes (its pod's node selection honoured, nodes
carrying its keys) are not every labelled node counts its pods per domain over those nodes only; the
engine keeps those counts up to date as pods are bound and released (``InterPod._eligible_counts``,
updated by ``add``) instead of counting them again for every pod. Decisions are those of counting
them again, and the kept counts are always the counts of the pods bound now.

A lone pod placed on one flavor without a flavored copy (``Placer.narrowed_node``: its static mask
and its spread constraints' eligible nodes narrowed to the flavor's nodes) goes where the copy goes,
and the batch path placing flavored pods with inter-pod rules so decides as the flavor attempt."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain import GPU, MILLI, LabelSelector, Node, NodeName, Pod, Snapshot, SpreadConstraint
from gpufleet.engine.cluster import BoolArray, IntArray
from gpufleet.engine.flavors import with_flavor
from gpufleet.engine.interpod import InterPod
from gpufleet.engine.scheduler import Engine

from .strategies import APPS, GPU_TYPE, HOST, INTER_POD_RULES, Draw, _chance, _with_rule, inter_pod_snapshots
from .test_batch import flavored_batch_snapshots, run

ZONE = "topology.kubernetes.io/zone"


def _counted_again(self: InterPod, s: int, key: str, eligible: BoolArray) -> IntArray:
    """The counts as before: the bound members on eligible nodes, per domain, counted now."""
    codes, d = self.codes(key)
    out: IntArray = np.bincount(codes[eligible], weights=self.node_counts(s)[eligible],
                                minlength=d + 1).astype(np.int64)
    return out


def _kept_counts_are_current(engine: Engine) -> int:
    """Every kept count equals the count of the pods bound now; returns how many are kept."""
    ip = engine.placer.interpod
    if ip is None:
        return 0
    n = 0
    for s, kept in enumerate(ip._eligible_doms):
        for (key, _), (eligible, counts) in kept.items():
            assert np.array_equal(counts, _counted_again(ip, s, key, eligible)), (s, key)
            n += 1
    return n


def _decide(snapshot: Snapshot) -> tuple[object, ...]:
    engine = Engine(snapshot)
    decisions = engine.run()
    _kept_counts_are_current(engine)
    return decisions, list(engine.log.bindings.items()), list(engine.log.evictions.items())


@st.composite
def narrowed_inter_pod_snapshots(draw: Draw) -> Snapshot:
    """:func:`inter_pod_snapshots` whose spread constraints honour their pods' node selection
    (nodeAffinityPolicy Honor, the default; nodeTaintsPolicy Honor now and then), with some pods
    pinned to a GPU type, so that the eligible nodes of their constraints are not every labelled
    node."""
    snapshot: Snapshot = draw(inter_pod_snapshots())
    taints = draw(st.sampled_from(["Ignore", "Honor"]))
    pods = []
    for p in snapshot.pods:
        if p.spread_constraints:
            p = replace(p, spread_constraints=tuple(replace(c, node_affinity_policy="Honor", node_taints_policy=taints)
                                                    for c in p.spread_constraints))
            if p.node_name is None and _chance(draw, 2):
                p = replace(p, node_selector={**p.node_selector, GPU_TYPE: draw(st.sampled_from("ab"))})
        pods.append(p)
    return replace(snapshot, pods=tuple(pods))


@settings(max_examples=120, deadline=None)
@given(narrowed_inter_pod_snapshots())
def test_kept_eligible_counts_decide_as_counting_again(snapshot: Snapshot) -> None:
    kept = _decide(snapshot)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(InterPod, "_eligible_counts", _counted_again)
        again = _decide(snapshot)
    assert kept == again


def _zoned_snapshot() -> Snapshot:
    """8 nodes in 2 zones, half of type a (n0-n3: zone z0 and z1 alike); running pods of app w on
    n4 (type b) and n0; 12 pending pods of app w pinned to type a, spread (maxSkew 1) over zones:
    only the type-a nodes are eligible, so the pod on n4 is not counted."""
    nodes = tuple(Node(NodeName(f"n{i}"), labels={HOST: f"n{i}", ZONE: f"z{i % 2}", GPU_TYPE: "ab"[i // 4]},
                       allocatable={GPU: 8 * MILLI, "cpu": 64 * MILLI, "pods": 110 * MILLI}) for i in range(8))
    spread = SpreadConstraint(1, ZONE, "DoNotSchedule", LabelSelector((("app", "w"),)))
    running = tuple(Pod("t", f"r{i}", labels={"app": "w"}, requests={GPU: MILLI}, node_name=NodeName(f"n{i}"),
                        phase="Running", gpu_index=(0,), start_time=0.0) for i in (4, 0))
    pending = tuple(Pod("t", f"p{i:02d}", labels={"app": "w"}, requests={GPU: MILLI}, creation_time=float(i),
                        node_selector={GPU_TYPE: "a"}, spread_constraints=(spread,)) for i in range(12))
    return Snapshot(nodes=nodes, pods=running + pending)


def test_a_narrowed_spread_keeps_its_counts_over_its_eligible_nodes() -> None:
    snapshot = _zoned_snapshot()
    engine = Engine(snapshot)
    decisions = engine.run()
    assert _kept_counts_are_current(engine) >= 1  # the kept counts were used and are current
    zones = {b.node: int(b.node[1:]) % 2 for b in decisions.bindings}
    # Eligible: n0-n3 only. r0 on n0 (z0) counts, r4 does not: zone z1 takes the first pod, then
    # they alternate, the counts never more than one apart.
    per_zone = [1, 0]
    for b in decisions.bindings:
        per_zone[zones[b.node]] += 1
        assert abs(per_zone[0] - per_zone[1]) <= 1
    assert len(decisions.bindings) == 12 and zones[decisions.bindings[0].node] == 1
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(InterPod, "_eligible_counts", _counted_again)
        assert Engine(snapshot).run() == decisions


def _narrowed_equals_copy(engine: Engine) -> int:
    """For every pending pod and GPU type: ``Placer.narrowed_node`` on that type's nodes places the
    pod where ``best_node`` places its copy whose node selector adds the type (flavors.with_flavor);
    returns how many were answered."""
    placer = engine.placer
    values = np.array([n.labels.get(GPU_TYPE) for n in engine.cluster.nodes], dtype=object)
    answered = 0
    for info in engine.pods:
        if info.node is not None or info.pod.node_name is not None:
            continue
        for t in "ab":
            ok, got = placer.narrowed_node(info, ("type", t), values == t)
            if not ok:
                continue
            answered += 1
            copy = with_flavor(info.pod, {GPU_TYPE: t})
            original = info.pod
            if copy is None:
                assert got is None
                continue
            info.pod = copy
            try:
                assert got == placer.best_node(info), (info.key, t)
            finally:
                info.pod = original
    return answered


@settings(max_examples=120, deadline=None)
@given(narrowed_inter_pod_snapshots())
def test_a_pod_narrowed_to_a_flavor_is_placed_as_its_flavored_copy(snapshot: Snapshot) -> None:
    """Before and after the call (other pods bound): static mask, spread eligibility (Honor), anti-
    affinity, soft scores, host ports, whatever the placement strategy."""
    engine = Engine(snapshot)
    _narrowed_equals_copy(engine)
    engine.run()
    _narrowed_equals_copy(engine)


@st.composite
def flavored_inter_pod_snapshots(draw: Draw) -> Snapshot:
    """The batch tests' flavored snapshots (leaves giving their GPU quota per flavor, GPU type a or
    b) whose pods carry inter-pod rules (spread constraints honouring the node selection)."""
    snapshot: Snapshot = draw(flavored_batch_snapshots())
    rules = {app: draw(st.sampled_from(INTER_POD_RULES)) for app in APPS}
    pods = []
    for p in snapshot.pods:
        app = draw(st.sampled_from((*APPS, None)))
        if app is not None:
            p = _with_rule(p, app, rules[app])
            p = replace(p, spread_constraints=tuple(replace(c, node_affinity_policy="Honor")
                                                    for c in p.spread_constraints))
        pods.append(p)
    return replace(snapshot, pods=tuple(pods))


@settings(max_examples=120, deadline=None)
@given(flavored_inter_pod_snapshots())
def test_flavored_pods_with_inter_pod_rules_decide_as_the_flavor_attempt(snapshot: Snapshot) -> None:
    """The batch path (and each lone flavored pod's admission), placing pods with inter-pod rules
    narrowed to a flavor without copies, decides as the flavor attempt with its copies."""
    *batched, _ = run(snapshot, True)
    *single, none = run(snapshot, False)
    assert none == 0
    assert batched == single
