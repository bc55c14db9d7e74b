"""The drain rule (gpufleet.policy.drain_plan): which gangs are evicted whole, why, and which nodes close."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain import EvictionReason, GpuFailurePolicy, PodKey, SchedulerConfig
from gpufleet.policy import DrainNode, RunningPod, drain_node, drain_plan

ITN = "aws-node-termination-handler/spot-itn"
EVICT = SchedulerConfig()
KEEP = SchedulerConfig(on_gpu_failure=GpuFailurePolicy.KEEP)


def running(name: str, gang: str, node: str, gpus: tuple[int, ...] = ()) -> RunningPod:
    return RunningPod(PodKey(f"ml/{name}"), gang, node, gpus)


def test_a_spot_notice_drains_every_gang_on_the_node_whole_on_every_node() -> None:
    nodes = [drain_node("a", [ITN], {}, spot=True), drain_node("b", [], {}), drain_node("c", [], {})]
    pods = [running("w-0", "ml/g", "a"), running("w-1", "ml/g", "b"), running("x", "ml/x", "c")]
    plan = drain_plan(nodes, pods, EVICT)
    assert [(d.gang, d.reason, d.pods) for d in plan.drains] == [
        ("ml/g", EvictionReason.SPOT, (PodKey("ml/w-0"), PodKey("ml/w-1")))]
    assert plan.closed == {"a"}
    assert "spot interruption notice (aws-node-termination-handler/spot-itn)" in plan.drains[0].message


def test_the_same_notice_on_an_on_demand_node_is_maintenance_and_a_label_counts_too() -> None:
    plan = drain_plan([drain_node("a", [], {"cloud.google.com/impending-node-termination": "true"})],
                      [running("p", "ml/p", "a")], EVICT)
    assert plan.drains[0].reason is EvictionReason.MAINTENANCE


def test_a_plain_cordon_closes_nothing_and_drains_nothing() -> None:
    cordoned = drain_node("a", [], {}, unschedulable=True)
    assert drain_plan([cordoned], [running("p", "ml/p", "a")], EVICT).drains == ()
    marked = drain_node("a", [], {}, unschedulable=True, drain_marked=True)
    assert drain_plan([marked], [running("p", "ml/p", "a")], EVICT).drains[0].reason is EvictionReason.MAINTENANCE
    every = SchedulerConfig(drain_cordoned=True)
    assert drain_plan([cordoned], [running("p", "ml/p", "a")], every).closed == {"a"}
    # the marker without a cordon means nothing: the operator cordons what it drains
    assert drain_plan([drain_node("a", [], {}, drain_marked=True)], [running("p", "ml/p", "a")], EVICT).drains == ()


def test_keys_are_configurable() -> None:
    config = SchedulerConfig(interruption_keys=("example.com/going",))
    assert drain_plan([drain_node("a", [ITN], {})], [running("p", "ml/p", "a")], config).drains == ()
    assert drain_plan([drain_node("a", ["example.com/going"], {})], [running("p", "ml/p", "a")], config).drains


def test_a_failed_gpu_evicts_the_gang_holding_it_or_only_reports_it() -> None:
    node = DrainNode("a", unhealthy_gpus=frozenset({3}))
    pods = [running("w-0", "ml/g", "a", (2, 3)), running("w-1", "ml/g", "b", (0,)), running("n", "ml/n", "a", (4,))]
    plan = drain_plan([node, DrainNode("b")], pods, EVICT)
    assert [(d.gang, d.reason) for d in plan.drains] == [("ml/g", EvictionReason.GPU_FAILURE)]
    assert plan.closed == frozenset()  # the node's healthy GPUs are still given out
    assert [(f.pod, f.gpus) for f in plan.failed] == [(PodKey("ml/w-0"), (3,))]
    assert "GPU 3 of node a listed unhealthy" in plan.failed[0].message
    kept = drain_plan([node, DrainNode("b")], pods, KEEP)
    assert kept.drains == () and [f.pod for f in kept.failed] == [PodKey("ml/w-0")]
    assert "keeps running" in kept.failed[0].message


def test_the_most_urgent_reason_wins() -> None:
    nodes = [DrainNode("a", unhealthy_gpus=frozenset({0})), drain_node("b", [ITN], {}, spot=True)]
    pods = [running("w-0", "ml/g", "a", (0,)), running("w-1", "ml/g", "b", (0,))]
    (drain,) = drain_plan(nodes, pods, EVICT).drains
    assert (drain.reason, drain.node) == (EvictionReason.SPOT, "b")


# --- invariants over random clusters -------------------------------------------------------------

NODES = ["n0", "n1", "n2", "n3"]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[DrainNode], list[RunningPod], SchedulerConfig]:
    nodes = [
        DrainNode(name, frozenset(draw(st.sets(st.sampled_from([ITN, "other/key"]), max_size=1))),
                  draw(st.booleans()), draw(st.booleans()), draw(st.booleans()),
                  frozenset(draw(st.sets(st.integers(0, 3), max_size=2))))
        for name in NODES
    ]
    pods = [
        running(f"p{i}", f"ml/g{draw(st.integers(0, 5))}", draw(st.sampled_from(NODES)),
                tuple(sorted(draw(st.sets(st.integers(0, 3), max_size=2)))))
        for i in range(draw(st.integers(0, 12)))
    ]
    config = SchedulerConfig(on_gpu_failure=draw(st.sampled_from(list(GpuFailurePolicy))),
                             drain_cordoned=draw(st.booleans()))
    return nodes, pods, config


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_gangs_go_whole_and_only_for_a_signal(case: tuple[list[DrainNode], list[RunningPod], SchedulerConfig]) -> None:
    nodes, pods, config = case
    plan = drain_plan(nodes, pods, config)
    gangs: dict[str, set[PodKey]] = {}
    for p in pods:
        gangs.setdefault(p.gang, set()).add(p.pod)
    evicted = plan.evictions()
    for drain in plan.drains:  # no gang partially evicted
        assert set(drain.pods) == gangs[drain.gang]
    for p in pods:  # every pod on a draining node is in an eviction
        if p.node in plan.closed:
            assert p.pod in evicted
    by_name = {n.name: n for n in nodes}
    for drain in plan.drains:  # nothing evicted without a signal on one of its pods
        assert any(p.node in plan.closed or set(p.gpus) & by_name[p.node].unhealthy_gpus
                   for p in pods if p.gang == drain.gang)
        if drain.reason is EvictionReason.GPU_FAILURE:
            assert config.on_gpu_failure is GpuFailurePolicy.EVICT


@settings(max_examples=50, deadline=None)
@given(clusters())
def test_no_signal_no_eviction(case: tuple[list[DrainNode], list[RunningPod], SchedulerConfig]) -> None:
    _, pods, config = case
    quiet = [DrainNode(name) for name in NODES]
    assert drain_plan(quiet, pods, config).drains == ()
    assert drain_plan(quiet, pods, config).closed == frozenset()
