"""IncrementalEngine decides what a fresh ``schedule()`` decides, snapshot after snapshot.

The property drives one engine through a random sequence of snapshots of one cluster: pods bound
as the engine's own decisions say, evicted pods gone, running pods finishing, new pods arriving,
nodes cordoned, uncordoned or changed, queues changed or added, PodGroups moved to another queue
(their running pods the same objects), removed, replaced or added for a label, pods joining a
gang, pods changed in place (another priority), decisions now and then not carried out (the same
rows and gangs decided again after a call that changed them), and now and then a running pod whose GPU
annotation the engine does not take as it is. At every step the decisions (bindings, evictions,
pending reasons, warnings, cycles) equal those of ``schedule`` on the same snapshot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.bench.deltas import carried_out
from gpufleet.domain import GPU, MILLI, Node, Placement, Pod, PodGroup, Queue, QueueName, QueueResource, Snapshot
from gpufleet.engine import IncrementalEngine, incremental, schedule
from gpufleet.engine.cluster import ClusterState
from gpufleet.engine.incremental import KeptSteps, clone_cluster
from gpufleet.engine.scheduler import Engine

from .strategies import gang_snapshots, inter_pod_snapshots, snapshots, volume_snapshots
from .test_properties import PROPERTY

EQUIVALENCE = settings(PROPERTY, max_examples=80)

STEPS = 6


def _event(snapshot: Snapshot, data: Any, step: int) -> Snapshot:
    """One random change of the cluster between two calls."""
    kind = data.draw(st.sampled_from(["none", "finish", "arrive", "cordon", "node", "queue", "twice", "delete",
                                      "regroup", "newqueue", "join", "ungroup", "newgroup", "priority"]))
    pods = list(snapshot.pods)
    running = [i for i, p in enumerate(pods) if p.bound]
    if kind == "finish" and running:
        i = data.draw(st.sampled_from(running))
        pods[i] = dataclasses.replace(pods[i], phase=data.draw(st.sampled_from(["Succeeded", "Failed"])))
    elif kind == "delete" and pods:
        del pods[data.draw(st.integers(0, len(pods) - 1))]
    elif kind == "arrive" and pods:
        model = pods[data.draw(st.integers(0, len(pods) - 1))]
        pods.append(dataclasses.replace(model, name=f"{model.name}-new{step}", node_name=None, phase="Pending",
                                        gpu_index=(), start_time=None, group_label=None,
                                        creation_time=model.creation_time + step))
    elif kind in ("cordon", "node"):
        nodes = list(snapshot.nodes)
        i = data.draw(st.integers(0, len(nodes) - 1))
        if kind == "cordon":
            nodes[i] = dataclasses.replace(nodes[i], unschedulable=not nodes[i].unschedulable)
        else:  # a label changes (affinity and selectors read labels)
            nodes[i] = dataclasses.replace(nodes[i], labels={**nodes[i].labels, "gpufleet.test/changed": str(step)})
        return dataclasses.replace(snapshot, nodes=tuple(nodes), pods=tuple(pods))
    elif kind == "queue" and snapshot.queues:
        queues = list(snapshot.queues)
        i = data.draw(st.integers(0, len(queues) - 1))
        quota = data.draw(st.integers(0, 8)) * MILLI
        queues[i] = _with_gpu_quota(queues[i], quota)
        return dataclasses.replace(snapshot, queues=tuple(queues), pods=tuple(pods))
    elif kind == "regroup" and snapshot.pod_groups and snapshot.queues:  # its pods' queue may change
        groups = list(snapshot.pod_groups)
        i = data.draw(st.integers(0, len(groups) - 1))
        groups[i] = dataclasses.replace(groups[i], queue=data.draw(st.sampled_from(snapshot.queues)).name)
        return dataclasses.replace(snapshot, pods=tuple(pods), pod_groups=tuple(groups))
    elif kind == "join" and pods and snapshot.pod_groups:  # a pod arrives into a gang (one forms or grows)
        model = pods[data.draw(st.integers(0, len(pods) - 1))]
        group = data.draw(st.sampled_from(snapshot.pod_groups))
        pods.append(dataclasses.replace(model, name=f"{model.name}-join{step}", namespace=group.namespace,
                                        node_name=None, phase="Pending", gpu_index=(), start_time=None,
                                        group_label=group.name))
    elif kind == "ungroup" and snapshot.pod_groups:  # a PodGroup goes (its gang waits) or is replaced
        groups = list(snapshot.pod_groups)
        i = data.draw(st.integers(0, len(groups) - 1))
        if data.draw(st.booleans()):
            del groups[i]
        else:
            groups[i] = dataclasses.replace(groups[i], min_member=max(1, groups[i].min_member - 1))
        return dataclasses.replace(snapshot, pods=tuple(pods), pod_groups=tuple(groups))
    elif kind == "newgroup" and any(p.group_label for p in pods):  # a PodGroup named by a label appears
        model = next(p for p in pods if p.group_label)
        group = PodGroup(model.namespace, model.group_label or "", min_member=1)
        groups = [g for g in snapshot.pod_groups if g.key != group.key]
        return dataclasses.replace(snapshot, pods=tuple(pods), pod_groups=(*groups, group))
    elif kind == "priority" and pods:  # a pod changed in place: another object, another priority
        i = data.draw(st.integers(0, len(pods) - 1))
        pods[i] = dataclasses.replace(pods[i], priority=data.draw(st.integers(-5, 2000)), priority_class_name=None)
    elif kind == "newqueue":  # a queue named first: every queue's number changes
        queues = (Queue(name=QueueName(f"aa-new{step}")), *snapshot.queues)
        return dataclasses.replace(snapshot, queues=queues, pods=tuple(pods))
    elif kind == "twice" and len(running) >= 2:  # a running pod claims the GPUs of another
        a, b = data.draw(st.sampled_from(running)), data.draw(st.sampled_from(running))
        if pods[a].node_name == pods[b].node_name and a != b and pods[b].gpu_index:
            pods[a] = dataclasses.replace(pods[a], gpu_index=pods[b].gpu_index)
    return dataclasses.replace(snapshot, pods=tuple(pods))


def _with_gpu_quota(queue: Queue, quota: int) -> Queue:
    resources = dict(queue.resources)
    spec = resources.get(GPU)
    resources[GPU] = dataclasses.replace(spec, quota=quota) if spec is not None else QueueResource(quota=quota)
    return dataclasses.replace(queue, resources=resources)


@pytest.mark.parametrize("bulk", [incremental.BULK, 0])  # pods that start bound one by one, or with NumPy
@EQUIVALENCE
@given(st.one_of(snapshots(), gang_snapshots(), inter_pod_snapshots(), volume_snapshots()), st.data())
def test_incremental_decides_as_schedule_over_event_sequences(bulk: int, first: Snapshot, data: Any) -> None:
    engine = IncrementalEngine()
    snapshot = first
    with patch.object(incremental, "BULK", bulk):
        for step in range(STEPS):
            fresh = schedule(snapshot)
            kept = engine(snapshot)
            assert kept == fresh, f"step {step}:\nfresh {fresh}\nkept  {kept}"
            # Mostly the decisions carried out; now and then not (the controller's binds failed):
            # the same rows, gangs and victims come back after a call that changed them.
            done = carried_out(snapshot, fresh, 1000.0 + step) if data.draw(st.integers(0, 3)) else snapshot
            snapshot = _event(done, data, step)


def _node(name: str, gpus: int) -> Node:
    return Node(name, allocatable={GPU: gpus * MILLI, "cpu": 64 * MILLI, "memory": 2**40 * MILLI, "pods": 110 * MILLI})


def _pod(name: str, gpus: int, node: str | None = None, index: tuple[int, ...] = ()) -> Pod:
    return Pod("ml", name, requests={GPU: gpus * MILLI, "cpu": MILLI}, node_name=node,
               phase="Running" if node else "Pending", gpu_index=index)


def test_a_sequence_with_arrivals_and_completions_keeps_the_state() -> None:
    """Pods that start, finish and arrive between calls: the kept state follows them, with no
    fresh build after the first call, and each call decides as schedule() does."""
    snapshot = Snapshot(nodes=(_node("a", 4), _node("b", 8)), pods=tuple(_pod(f"p{i}", 1 + i % 3) for i in range(6)))
    engine = IncrementalEngine()
    for step in range(8):
        fresh = schedule(snapshot)
        assert engine(snapshot) == fresh
        snapshot = carried_out(snapshot, fresh, float(step))
        pods = [p for p in snapshot.pods if not (p.bound and p.name == f"p{step}")]  # one finishes
        pods.append(_pod(f"q{step}", 1 + step % 2))
        snapshot = dataclasses.replace(snapshot, pods=tuple(pods))
    assert engine.fresh_calls == 0


def test_a_gpu_held_twice_is_decided_fresh_with_its_warning() -> None:
    snapshot = Snapshot(nodes=(_node("a", 2),), pods=(_pod("x", 1, "a", (0,)), _pod("y", 1, "a", (0,)),
                                                       _pod("z", 1)))
    engine = IncrementalEngine()
    fresh = schedule(snapshot)
    assert any("held by more than one running pod" in w for w in fresh.warnings)
    assert engine(snapshot) == fresh
    assert engine.fresh_calls == 1
    healed = dataclasses.replace(snapshot, pods=(_pod("x", 1, "a", (0,)), _pod("z", 1)))
    assert engine(healed) == schedule(healed)
    assert engine.fresh_calls == 1


def test_the_kept_capacity_state_equals_a_fresh_build() -> None:
    """After calls that bind and free pods, the cluster state the kept steps give a call (its
    copy) has every array of the fresh build's, equal."""
    nodes = (_node("a", 4), _node("b", 8))
    first = Snapshot(nodes=nodes, pods=(_pod("r1", 2, "a", (0, 1)), _pod("r2", 1, "b", (3,)), _pod("p", 4)))
    second = Snapshot(nodes=nodes, pods=(_pod("r2", 1, "b", (3,)), _pod("r3", 4, "b", (4, 5, 6, 7)), _pod("p", 4)))
    steps = KeptSteps()
    for snapshot in (first, second):
        kept = Engine(snapshot, steps).cluster
        fresh = Engine(snapshot).cluster
        assert set(vars(kept)) == set(vars(fresh))
        for name, value in vars(fresh).items():
            if isinstance(value, np.ndarray):
                assert np.array_equal(getattr(kept, name), value), name
        assert kept.nodes == fresh.nodes and kept.resources == fresh.resources


def test_a_clone_changes_apart_from_its_original() -> None:
    cluster = ClusterState([_node("a", 4)], [])
    copy = clone_cluster(cluster)
    copy.take(0, np.array([MILLI, 0, MILLI], dtype=np.int64), (0, 1), None)
    assert cluster.free_whole.tolist() == [4] and copy.free_whole.tolist() == [2]
    assert cluster.dirty == [] and copy.dirty == [0]



def _kept_builds(first: Snapshot, data: Any) -> Iterator[tuple[int, Engine, Engine]]:
    """Each step's engine as built from kept state (then run: its decisions mostly carried out,
    now and then not) and as built fresh; steps the kept state cannot follow are left out."""
    steps = KeptSteps()
    snapshot = first
    for step in range(STEPS):
        try:
            kept = Engine(snapshot, steps)
        except incremental.Rebuild:
            steps.forget()
            decided = schedule(snapshot)
        else:
            yield step, kept, Engine(snapshot)
            decided = kept.run()
        done = carried_out(snapshot, decided, 1000.0 + step) if data.draw(st.integers(0, 3)) else snapshot
        snapshot = _event(done, data, step)


@settings(PROPERTY, max_examples=40)
@given(st.one_of(snapshots(), gang_snapshots()), st.data())
def test_the_kept_queue_usage_equals_a_fresh_build(first: Snapshot, data: Any) -> None:
    """The queue usage of the running pods, kept per leaf between calls and changed by the pods
    that came and left, is the fresh build's at every step (PodGroups moved, queues renumbered,
    quotas changed included)."""
    for step, kept, fresh in _kept_builds(first, data):
        assert kept.forest.usage == fresh.forest.usage, f"step {step}"
        assert kept.forest.guaranteed == fresh.forest.guaranteed, f"step {step}"


def test_a_call_that_fails_while_building_forgets_the_kept_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """An error halfway through updating the kept state (the controller logs it and goes on) must
    not leave that half-updated state to decide the next call."""
    from gpufleet.bench.shapes import make_shape

    snapshot = make_shape("basic", 0.01)
    engine = IncrementalEngine()
    engine(snapshot)
    kept = engine.steps

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(incremental, "Engine", broken)
    with pytest.raises(RuntimeError, match="boom"):
        engine(snapshot)
    monkeypatch.undo()
    assert engine.steps is not kept
    assert engine(snapshot) == schedule(snapshot)


def _state(obj: object) -> tuple[object, ...]:
    """Every field of a PodInfo or Gang (arrays as lists)."""
    return tuple(v.tolist() if isinstance(v, np.ndarray) else v
                 for v in (getattr(obj, f.name) for f in dataclasses.fields(obj)))  # type: ignore[arg-type]


@settings(PROPERTY, max_examples=40)
@given(st.one_of(snapshots(), gang_snapshots()), st.data())
def test_the_kept_rows_gangs_and_victims_equal_a_fresh_build(first: Snapshot, data: Any) -> None:
    """Rows and gangs used again after a call that changed them (pods bound, evicted, withdrawn,
    pending reasons given), and the victim index built from them, are at the next call's start
    those of a fresh build, field by field."""
    for step, kept, fresh in _kept_builds(first, data):
        assert [_state(i) for i in kept.pods] == [_state(i) for i in fresh.pods], f"step {step}"
        assert [_state(g) for g in kept.gangs] == [_state(g) for g in fresh.gangs], f"step {step}"
        kept.victims.ready()
        fresh.victims.ready()
        for name, value in vars(fresh.victims).items():
            if isinstance(value, np.ndarray) and name != "_fresh":
                assert np.array_equal(value, vars(kept.victims)[name]), f"step {step}: {name}"


def test_gangs_evicted_by_a_call_are_fresh_again_in_the_next() -> None:
    """A call that evicts: decided again from the same snapshot (its evictions not carried out),
    the kept gangs have nothing of that call (evicted, alive, pending reasons)."""
    from gpufleet.bench.shapes import make_shape

    snapshot = make_shape("preemption", 0.02)
    steps = KeptSteps()
    first = Engine(snapshot, steps)
    assert first.run().evictions
    again, fresh = Engine(snapshot, steps), Engine(snapshot)
    assert [_state(g) for g in again.gangs] == [_state(g) for g in fresh.gangs]
    assert [_state(i) for i in again.pods] == [_state(i) for i in fresh.pods]
    assert again.run() == fresh.run()


def test_the_snapshots_time_alone_keeps_the_rows() -> None:
    """The controller sets ``config.now`` at every cycle: a new time alone must not throw the kept pod
    rows away (each would be built again)."""
    snapshot = Snapshot(nodes=(_node("a", 8),), pods=tuple(_pod(f"p{i}", 1) for i in range(4)))
    steps = KeptSteps()
    Engine(dataclasses.replace(snapshot, config=dataclasses.replace(snapshot.config, now=100.0)), steps)
    rows = {key: id(row[0]) for key, row in steps._rows.items()}
    assert rows
    Engine(dataclasses.replace(snapshot, config=dataclasses.replace(snapshot.config, now=200.0)), steps)
    assert {key: id(row[0]) for key, row in steps._rows.items()} == rows
    Engine(dataclasses.replace(snapshot, config=dataclasses.replace(snapshot.config, placement=Placement.SPREAD)), steps)
    assert {key: id(row[0]) for key, row in steps._rows.items()} != rows  # a real change builds them again
