"""Unit tests of the independent invariant checker (``invariants.py``) on hand-built decisions,
and of the snapshot strategies: the checker must accept good decisions and catch bad ones, or the
property tests prove nothing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings

from gpufleet.domain import (
    CPU,
    GPU,
    MEMORY,
    MILLI,
    PODS,
    Binding,
    Decisions,
    Eviction,
    EvictionReason,
    Node,
    NodeName,
    PendingPod,
    Pod,
    PodGroup,
    PodKey,
    Queue,
    QueueName,
    QueueResource,
    Snapshot,
    Taint,
    TaintEffect,
    WithinQueue,
)

from .invariants import (
    Violation,
    World,
    check_all,
    check_evictions,
    check_gangs,
    check_lending,
    check_limits,
    check_nodes,
    check_report,
    check_single_gang,
    minimality_counterexamples,
    overcommits,
    state_before,
)
from .strategies import leaves, lending_snapshots, shuffled_snapshot, single_gang_snapshots, snapshots

RACK = "rack"


def node(name: str, gpus: int = 4, rack: str = "r0", **kw: Any) -> Node:
    allocatable = {CPU: 8 * MILLI, MEMORY: 64 * MILLI, PODS: 10 * MILLI, GPU: gpus * MILLI}
    return Node(NodeName(name), labels={RACK: rack}, allocatable=allocatable, **kw)


def pod(name: str, gpus: int = 1, queue: str = "a", requests: dict[str, int] | None = None, **kw: Any) -> Pod:
    asked = {GPU: gpus * MILLI} if gpus else {}
    asked.update(requests or {})
    return Pod("ml", name, requests=asked, queue_label=QueueName(queue), **kw)


def running(name: str, gpu_index: tuple[int, ...], node_name: str = "n1", **kw: Any) -> Pod:
    kw.setdefault("gpus", len(gpu_index))
    return pod(name, node_name=NodeName(node_name), phase="Running", gpu_index=gpu_index, **kw)


def quota(q: int, limit: int | None = None, lending: int | None = None) -> dict[str, QueueResource]:
    return {
        GPU: QueueResource(
            q * MILLI,
            None if limit is None else limit * MILLI,
            None if lending is None else lending * MILLI,
        )
    }


QUEUES = (Queue(QueueName("a"), resources=quota(2)), Queue(QueueName("b"), resources=quota(2)))


def bind(key: str, node_name: str = "n1", gpus: tuple[int, ...] = (0,), blocks: int | None = None) -> Binding:
    return Binding(PodKey(f"ml/{key}"), NodeName(node_name), gpus, blocks)


def evict(key: str, by: str, reason: EvictionReason = EvictionReason.RECLAIM) -> Eviction:
    return Eviction(PodKey(f"ml/{key}"), reason, PodKey(f"ml/{by}"))


def names(violations: list[Violation]) -> set[str]:
    return {v.invariant for v in violations}


# --- a good decision set passes every check ----------------------------------------------------


def reclaim_snapshot() -> Snapshot:
    """team b borrows 4 GPUs (quota 2); a-1 asks 2 within quota: one 2-GPU victim is enough."""
    return Snapshot(
        nodes=(node("n1"),),
        pods=(
            running("b-1", (0, 1), queue="b", priority=10, start_time=1.0),
            running("b-2", (2, 3), queue="b", priority=10, start_time=2.0),
            pod("a-1", gpus=2, priority=10),
        ),
        queues=QUEUES,
    )


def test_good_reclaim_passes_every_check() -> None:
    decisions = Decisions(
        bindings=(bind("a-1", gpus=(2, 3)),),
        evictions=(evict("b-2", "a-1"),),
    )
    assert check_all(reclaim_snapshot(), decisions) == []


def test_minimal_reclaim_has_no_counterexample() -> None:
    def cannot_place(snapshot: Snapshot) -> Decisions:
        return Decisions(pending=(PendingPod(PodKey("ml/a-1"), "no room"),))

    decisions = Decisions(bindings=(bind("a-1", gpus=(2, 3)),), evictions=(evict("b-2", "a-1"),))
    assert minimality_counterexamples(reclaim_snapshot(), decisions, cannot_place) == []


def test_non_minimal_victim_set_is_caught() -> None:
    seen: list[Snapshot] = []

    def places_it(snapshot: Snapshot) -> Decisions:
        seen.append(snapshot)
        return Decisions(bindings=(bind("a-1", gpus=(2, 3)),))

    decisions = Decisions(
        bindings=(bind("a-1", gpus=(2, 3)),),
        evictions=(evict("b-1", "a-1"), evict("b-2", "a-1")),
    )
    found = minimality_counterexamples(reclaim_snapshot(), decisions, places_it)
    assert names(found) == {"minimal"} and len(found) == 2
    # the re-runs keep exactly one victim, and nothing in them is preemptible any more
    kept = [{p.name for p in s.pods if p.bound} for s in seen]
    assert kept == [{"b-1"}, {"b-2"}]
    assert all(p.preemptible_label is False for s in seen for p in s.pods if p.bound)


# --- invariant 1: nodes ------------------------------------------------------------------------


def test_gpu_given_twice_is_caught() -> None:
    snap = Snapshot(nodes=(node("n1"),), pods=(running("r", (0,)), pod("p")), queues=QUEUES)
    found = check_nodes(snap, Decisions(bindings=(bind("p", gpus=(0,)),)))
    assert any("several pods" in v.message for v in found)


def test_blocks_over_100_and_mixed_gpu_are_caught() -> None:
    snap = Snapshot(
        nodes=(node("n1"),),
        pods=(
            running("f", (0,), gpus=0, gpu_blocks=60),
            running("w", (1,)),
            pod("p", gpus=0, gpu_blocks=50),
            pod("q", gpus=0, gpu_blocks=10),
        ),
        queues=QUEUES,
    )
    decisions = Decisions(bindings=(bind("p", gpus=(0,), blocks=50), bind("q", gpus=(1,), blocks=10)))
    messages = [v.message for v in check_nodes(snap, decisions)]
    assert any("110 > 100 blocks" in m for m in messages)
    assert any("held whole by" in m for m in messages)


def test_bad_gpu_lists_are_caught() -> None:
    snap = Snapshot(
        nodes=(node("n1", unhealthy_gpus=frozenset({3})),),
        pods=(pod("two", gpus=2), pod("one"), pod("sick"), pod("frac", gpus=0, gpu_blocks=20)),
        queues=QUEUES,
    )
    decisions = Decisions(
        bindings=(
            bind("frac", gpus=(0, 1), blocks=20),
            bind("one", gpus=(9,)),
            bind("sick", gpus=(3,)),
            bind("two", gpus=(2, 2)),
        )
    )
    messages = " | ".join(v.message for v in check_nodes(snap, decisions))
    assert "expected exactly one" in messages
    assert "outside 0..3" in messages
    assert "unhealthy GPUs [3]" in messages
    assert "repeated GPUs" in messages


def test_wrong_gpu_count_and_blocks_are_caught() -> None:
    snap = Snapshot(nodes=(node("n1"),), pods=(pod("two", gpus=2), pod("frac", gpus=0, gpu_blocks=20)))
    decisions = Decisions(bindings=(bind("frac", gpus=(0,), blocks=30), bind("two", gpus=(1,))))
    messages = " | ".join(v.message for v in check_nodes(snap, decisions))
    assert "asks for 2 GPUs, given 1" in messages
    assert "asks for 20 blocks, bound with 30" in messages


def test_cpu_and_pod_count_overcommit_are_caught() -> None:
    n1 = replace(node("n1"), allocatable={CPU: 1000, MEMORY: MILLI, PODS: 1 * MILLI, GPU: 4 * MILLI})
    snap = Snapshot(
        nodes=(n1,),
        pods=(running("r", (0,), requests={CPU: 600}), pod("p", gpus=0, requests={CPU: 600})),
    )
    messages = " | ".join(v.message for v in check_nodes(snap, Decisions(bindings=(bind("p", gpus=()),))))
    assert "over-committed on cpu: 1200 > 1000" in messages
    assert "holds 2 pods" in messages


def test_infeasible_nodes_are_caught() -> None:
    tainted = node("t", taints=(Taint("k", "v", TaintEffect.NO_SCHEDULE),))
    cordoned = node("c", unschedulable=True)
    labelled = node("s")
    snap = Snapshot(
        nodes=(tainted, cordoned, labelled),
        pods=(pod("p1"), pod("p2"), pod("p3", node_selector={"x": "y"})),
    )
    decisions = Decisions(bindings=(bind("p1", "t"), bind("p2", "c"), bind("p3", "s")))
    messages = " | ".join(v.message for v in check_nodes(snap, decisions))
    assert "not tolerated" in messages
    assert "unschedulable" in messages
    assert "nodeSelector x=y" in messages


def test_feasible_tolerated_binding_passes() -> None:
    from .strategies import DEDICATED, TOLERATE_DEDICATED

    snap = Snapshot(nodes=(node("t", taints=(DEDICATED,)),), pods=(pod("p", tolerations=(TOLERATE_DEDICATED,)),))
    assert check_nodes(snap, Decisions(bindings=(bind("p", "t"),))) == []


# --- invariant 2: limits -----------------------------------------------------------------------


def test_limit_exceeded_is_caught_and_old_excess_is_tolerated() -> None:
    parent = Queue(QueueName("top"), resources=quota(4, limit=2))
    leaf = Queue(QueueName("a"), parent=QueueName("top"), resources=quota(4))
    snap = Snapshot(nodes=(node("n1"),), pods=(running("r", (0, 1)), pod("p")), queues=(parent, leaf))
    found = check_limits(snap, Decisions(bindings=(bind("p", gpus=(2,)),)))
    assert [v.invariant for v in found] == ["limit"] and "queue top uses 3000" in found[0].message
    # already above the limit in the snapshot: evicting and re-binding the same amount is fine
    over = replace(snap, queues=(replace(parent, resources=quota(4, limit=1)), leaf))
    ok = Decisions(bindings=(bind("p", gpus=(2,)),), evictions=(evict("r", "p", EvictionReason.PREEMPT),))
    assert check_limits(over, ok) == []


# --- invariant 3: lending ----------------------------------------------------------------------


def test_lending_reserve_is_enforced() -> None:
    lender = Queue(QueueName("lender"), resources=quota(3, lending=1))  # reserves 2 of 4 GPUs
    borrower = Queue(QueueName("a"), resources=quota(0))
    snap = Snapshot(nodes=(node("n1"),), pods=(pod("p", gpus=3),), queues=(lender, borrower))
    found = check_lending(snap, Decisions(bindings=(bind("p", gpus=(0, 1, 2)),)))
    assert names(found) == {"lending"}
    small = replace(snap, pods=(pod("p", gpus=2),))
    assert check_lending(small, Decisions(bindings=(bind("p", gpus=(0, 1)),))) == []


# --- invariant 4: gangs ------------------------------------------------------------------------


def gang_snapshot(required: str | None = None) -> Snapshot:
    group = PodGroup("ml", "g", min_member=3, queue=QueueName("a"), topology_required=required)
    members = tuple(pod(f"g-{i}", group_label="g") for i in range(3))
    return Snapshot(
        nodes=(node("n1", rack="r0"), node("n2", rack="r1")), pods=members, pod_groups=(group,), queues=QUEUES
    )


def test_partly_bound_gang_is_caught() -> None:
    found = check_gangs(gang_snapshot(), Decisions(bindings=(bind("g-0"), bind("g-1", gpus=(1,)))))
    assert names(found) == {"gang"} and "2 new + 0 running < minMember 3" in found[0].message


def test_gang_split_across_required_domains_is_caught() -> None:
    split = Decisions(bindings=(bind("g-0"), bind("g-1", gpus=(1,)), bind("g-2", "n2")))
    assert names(check_gangs(gang_snapshot(RACK), split)) == {"topology"}
    together = Decisions(bindings=(bind("g-0"), bind("g-1", gpus=(1,)), bind("g-2", gpus=(2,))))
    assert check_gangs(gang_snapshot(RACK), together) == []


def test_elastic_scale_up_counts_running_members() -> None:
    snap = gang_snapshot()
    pods = (
        replace(snap.pods[0], node_name=NodeName("n1"), phase="Running", gpu_index=(0,)),
        replace(snap.pods[1], node_name=NodeName("n1"), phase="Running", gpu_index=(1,)),
        snap.pods[2],
    )
    assert check_gangs(replace(snap, pods=pods), Decisions(bindings=(bind("g-2", gpus=(2,)),))) == []


# --- invariants 5 and 6: evictions -------------------------------------------------------------


def eviction_snapshot(**victim: Any) -> Snapshot:
    kw: dict[str, Any] = {"queue": "b", "priority": 10, "start_time": 1.0}
    kw.update(victim)
    return Snapshot(
        nodes=(node("n1"),),
        pods=(running("v", (0, 1, 2, 3), **kw), pod("w", gpus=4, priority=50)),
        queues=QUEUES,
    )


def eviction_messages(snapshot: Snapshot, *evictions: Eviction) -> str:
    decisions = Decisions(bindings=(bind("w", gpus=(0, 1, 2, 3)),), evictions=evictions)
    return " | ".join(str(v) for v in check_evictions(snapshot, decisions))


def test_non_preemptible_victims_are_caught() -> None:
    assert "[non-preemptible]" in eviction_messages(eviction_snapshot(priority=100), evict("v", "w"))
    labelled = eviction_snapshot(preemptible_label=False)
    assert "[non-preemptible]" in eviction_messages(labelled, evict("v", "w"))
    # high priority but labelled preemptible: fine
    assert eviction_messages(eviction_snapshot(priority=500, preemptible_label=True), evict("v", "w")) == ""


def test_ineligible_reasons_are_caught() -> None:
    assert "own queue" in eviction_messages(eviction_snapshot(queue="a"), evict("v", "w"))
    no_reclaim = replace(eviction_snapshot(), queues=(replace(QUEUES[0], reclaim_borrowed=False), QUEUES[1]))
    assert "reclaimBorrowed off" in eviction_messages(no_reclaim, evict("v", "w"))
    preempt = EvictionReason.PREEMPT
    assert "queue b preempted by" in eviction_messages(eviction_snapshot(), evict("v", "w", preempt))
    same = eviction_snapshot(queue="a", priority=50)
    assert "not lower" in eviction_messages(same, evict("v", "w", preempt))
    never = replace(
        eviction_snapshot(queue="a"), queues=(replace(QUEUES[0], within_queue=WithinQueue.NEVER), QUEUES[1])
    )
    assert "withinQueue is Never" in eviction_messages(never, evict("v", "w", preempt))
    assert eviction_messages(eviction_snapshot(queue="a"), evict("v", "w", preempt)) == ""


def test_by_must_be_bound_by_the_same_decisions() -> None:
    snap = eviction_snapshot()
    found = check_evictions(snap, Decisions(evictions=(evict("v", "w"),)))
    assert names(found) == {"by"}


def test_partly_evicted_gang_is_caught() -> None:
    group = PodGroup("ml", "vg", min_member=2, queue=QueueName("b"))
    snap = Snapshot(
        nodes=(node("n1"),),
        pods=(
            running("v-0", (0, 1), queue="b", group_label="vg", priority=10),
            running("v-1", (2, 3), queue="b", group_label="vg", priority=10),
            pod("w", gpus=2, priority=50),
        ),
        queues=QUEUES,
        pod_groups=(group,),
    )
    half = Decisions(bindings=(bind("w", gpus=(0, 1)),), evictions=(evict("v-0", "w"),))
    assert names(check_evictions(snap, half)) == {"whole-gang"}
    whole = Decisions(bindings=(bind("w", gpus=(0, 1)),), evictions=(evict("v-0", "w"), evict("v-1", "w")))
    assert check_evictions(snap, whole) == []


def test_other_schedulers_pods_and_pending_pods_are_not_victims() -> None:
    snap = replace(
        eviction_snapshot(),
        pods=(*eviction_snapshot().pods, replace(running("x", (0,)), scheduler_name="other"), pod("idle")),
    )
    messages = eviction_messages(snap, evict("idle", "w"), evict("x", "w"))
    assert "belongs to scheduler other" in messages and "not running in the snapshot" in messages


# --- invariant 9: the report -------------------------------------------------------------------


def test_report_catches_missing_duplicate_unsorted_and_foreign_pods() -> None:
    snap = Snapshot(
        nodes=(node("n1"),),
        pods=(pod("a"), pod("b"), pod("c"), running("r", (3,)), replace(pod("x"), scheduler_name="other")),
    )
    decisions = Decisions(
        bindings=(bind("b"), bind("a", gpus=(1,))),
        pending=(
            PendingPod(PodKey("ml/a"), "dup"),
            PendingPod(PodKey("ml/r"), "?"),
            PendingPod(PodKey("ml/x"), "?"),
        ),
    )
    messages = " | ".join(v.message for v in check_report(snap, decisions))
    assert "ml/a listed 2 times" in messages
    assert "ml/c listed 0 times" in messages
    assert "ml/r (already bound)" in messages
    assert "ml/x (not ours)" in messages
    assert "bindings not sorted" in messages
    good = Decisions(bindings=(bind("a"), bind("b", gpus=(1,))), pending=(PendingPod(PodKey("ml/c"), "?"),))
    assert check_report(snap, good) == []


# --- single pending gang -----------------------------------------------------------------------


def test_pending_gang_that_evicts_is_caught() -> None:
    found = check_single_gang(reclaim_snapshot(), Decisions(evictions=(evict("b-2", "a-1"),)))
    assert names(found) == {"victims"}


def test_non_preemptible_gang_out_of_quota_is_caught() -> None:
    snap = replace(reclaim_snapshot(), pods=(pod("a-1", gpus=3, priority=1000),))
    found = check_single_gang(snap, Decisions(bindings=(bind("a-1", gpus=(0, 1, 2)),)))
    assert names(found) == {"non-preemptible"}
    in_quota = replace(reclaim_snapshot(), pods=(pod("a-1", gpus=2, priority=1000),))
    assert check_single_gang(in_quota, Decisions(bindings=(bind("a-1", gpus=(0, 1)),))) == []


def test_reclaim_while_borrowing_or_from_a_queue_within_quota_is_caught() -> None:
    borrowing = replace(
        reclaim_snapshot(),
        pods=(*reclaim_snapshot().pods[:2], pod("a-1", gpus=3, priority=10)),
    )
    decisions = Decisions(bindings=(bind("a-1", gpus=(1, 2, 3)),), evictions=(evict("b-2", "a-1"),))
    assert any("while borrowing" in v.message for v in check_single_gang(borrowing, decisions))
    # b within quota after taking the first of two victims: the second is not eligible
    two = Decisions(bindings=(bind("a-1", gpus=(0, 1)),), evictions=(evict("b-1", "a-1"), evict("b-2", "a-1")))
    assert any(
        "not above quota before its last victim" in v.message for v in check_single_gang(reclaim_snapshot(), two)
    )


# --- the strategies ----------------------------------------------------------------------------


def assert_consistent(snapshot: Snapshot) -> None:
    world = World(snapshot)
    problems = overcommits(world, state_before(world), world.nodes, new_only=False)
    assert problems == [], problems
    leaf_names = set(leaves(snapshot.queues)) | {snapshot.config.default_queue}
    for p in snapshot.pods:
        if p.ours and not p.finished:
            assert world.queue_of(p) in leaf_names, p
        if p.group_label is not None:
            assert f"{p.namespace}/{p.group_label}" in world.groups, p
        if p.bound:
            node_of = world.nodes[str(p.node_name)]
            assert not set(p.gpu_index) & node_of.unhealthy_gpus, p
            assert len(p.gpu_index) == (1 if p.is_fractional else p.whole_gpus), p
    for q in snapshot.queues:
        depth = len(world.path(q.name))
        assert depth <= 3 and (q.parent is None or q.parent in world.queues)
    keys = [p.key for p in snapshot.pods]
    assert len(keys) == len(set(keys))


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(snapshots())
def test_random_snapshots_are_consistent(snapshot: Snapshot) -> None:
    assert_consistent(snapshot)
    assert_consistent(shuffled_snapshot(snapshot, 7))


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(single_gang_snapshots())
def test_single_gang_snapshots_have_one_pending_gang(snapshot: Snapshot) -> None:
    from .invariants import pending_gangs

    assert_consistent(snapshot)
    ((_, members),) = pending_gangs(snapshot).items()
    group = World(snapshot).group(members[0])
    assert group is None or group.min_member == len(members)


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(lending_snapshots())
def test_lending_snapshots_fit_the_simple_case(snapshot: Snapshot) -> None:
    from .invariants import lending_applicable

    assert_consistent(snapshot)
    assert lending_applicable(snapshot)
    assert not any(World(snapshot).queue_of(p) == "lender" for p in snapshot.pods)


def test_by_must_be_the_first_pod_of_a_gang_bound_at_once() -> None:
    group = PodGroup("ml", "wg", min_member=2, queue=QueueName("a"))
    snap = Snapshot(
        nodes=(node("n1"),),
        pods=(
            running("v", (0, 1, 2, 3), queue="b", priority=10),
            pod("w-0", gpus=2, priority=50, group_label="wg"),
            pod("w-1", gpus=2, priority=50, group_label="wg"),
        ),
        queues=QUEUES,
        pod_groups=(group,),
    )
    bindings = (bind("w-0", gpus=(0, 1)), bind("w-1", gpus=(2, 3)))
    late = Decisions(bindings=bindings, evictions=(evict("v", "w-1"),))
    assert names(check_evictions(snap, late)) == {"by"}
    assert check_evictions(snap, replace(late, evictions=(evict("v", "w-0"),))) == []
    # with minMember 1, w-1 may have scaled up on its own in a later cycle and evicted then
    elastic = replace(snap, pod_groups=(replace(group, min_member=1),))
    assert check_evictions(elastic, late) == []
