"""The domain model: frozen value objects, one integer unit for every resource, the pod's derived facts."""

from __future__ import annotations

import dataclasses

import pytest

import gpufleet.domain as domain
from gpufleet.domain import (
    BLOCKS_PER_GPU,
    CPU,
    GPU,
    MILLI,
    MILLI_PER_BLOCK,
    Binding,
    Decisions,
    EvictionReason,
    Node,
    NodeName,
    Placement,
    Pod,
    PodGroup,
    QueueName,
    SchedulerConfig,
    Snapshot,
    TaintEffect,
    WithinQueue,
)

DATACLASSES = sorted(name for name in domain.__all__ if dataclasses.is_dataclass(getattr(domain, name)))


def test_the_model_classes_are_dataclasses() -> None:
    assert {"Node", "Pod", "Queue", "PodGroup", "Snapshot", "Decisions", "Binding"} <= set(DATACLASSES)


@pytest.mark.parametrize("name", DATACLASSES)
def test_every_dataclass_is_frozen_and_slotted(name: str) -> None:
    cls = getattr(domain, name)
    assert cls.__dataclass_params__.frozen, name  # layers share these objects: nobody may change them
    assert hasattr(cls, "__slots__"), name  # millions of pods in the simulator: no per-object __dict__


def test_changing_a_field_is_refused() -> None:
    pod = Pod(namespace="ml", name="a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        pod.name = "b"  # type: ignore[misc]
    assert dataclasses.replace(pod, name="b").key == "ml/b" and pod.key == "ml/a"


def test_one_integer_unit_for_every_resource() -> None:
    assert (MILLI, BLOCKS_PER_GPU, MILLI_PER_BLOCK) == (1000, 100, 10)
    assert MILLI_PER_BLOCK * BLOCKS_PER_GPU == MILLI  # a block is a whole number of milli-GPUs
    assert all(isinstance(value, int) for value in (MILLI, BLOCKS_PER_GPU, MILLI_PER_BLOCK))
    assert (GPU, CPU) == ("nvidia.com/gpu", "cpu")  # the Kubernetes resource names, as in requests


def test_whole_gpus_and_gpu_count_floor_milli_units() -> None:
    assert Node(NodeName("n1"), allocatable={GPU: 8 * MILLI}).gpu_count == 8
    assert Node(NodeName("n1"), allocatable={GPU: 2500}).gpu_count == 2
    assert Node(NodeName("n1")).gpu_count == 0
    assert Pod(namespace="ml", name="a", requests={GPU: 4 * MILLI, CPU: 500}).whole_gpus == 4
    assert Pod(namespace="ml", name="a", requests={CPU: 500}).whole_gpus == 0


def test_a_pod_is_fractional_by_blocks_or_by_memory() -> None:
    assert not Pod(namespace="ml", name="a").is_fractional
    assert Pod(namespace="ml", name="a", gpu_blocks=30).is_fractional
    assert Pod(namespace="ml", name="a", gpu_memory_bytes=2**30).is_fractional


@pytest.mark.parametrize(
    ("node", "phase", "bound", "finished"),
    [
        (None, "Pending", False, False),
        ("n1", "Running", True, False),
        ("n1", "Succeeded", False, True),  # a finished pod holds nothing on its node
        ("n1", "Failed", False, True),
    ],
)
def test_bound_means_on_a_node_and_not_finished(node: str | None, phase: str, bound: bool, finished: bool) -> None:
    pod = Pod(namespace="ml", name="a", node_name=NodeName(node) if node else None, phase=phase)
    assert (pod.bound, pod.finished) == (bound, finished)


def test_ours_is_the_scheduler_name() -> None:
    assert Pod(namespace="ml", name="a").ours
    assert not Pod(namespace="ml", name="a", scheduler_name="default-scheduler").ours


def test_keys_are_namespace_slash_name() -> None:
    assert Pod(namespace="ml", name="a").key == "ml/a"
    assert PodGroup(namespace="ml", name="g").key == "ml/g"


def test_defaults_of_a_bare_snapshot() -> None:
    snap = Snapshot()
    assert snap.config == SchedulerConfig()
    assert (snap.config.default_queue, snap.config.placement) == (QueueName("default"), Placement.BINPACK)
    assert snap.nodes == snap.pods == snap.queues == ()
    assert Decisions() == Decisions(bindings=(), evictions=(), pending=(), warnings=(), cycles=0)


def test_enums_are_their_api_spelling() -> None:
    # The loaders build them from YAML strings and the JSON output writes .value: both must match api.md.
    assert [p.value for p in Placement] == ["binpack", "spread", "defrag"]
    # "idle" and the drains' reasons are the controller's own, never in the engine's Decisions;
    # "reservation" is the engine's with reservations on (docs/semantics.md, "Reservation and backfill");
    # "consolidation" is the controller's eviction of a moved pod (the engine reports moves)
    assert [r.value for r in EvictionReason] == ["reclaim", "preempt", "idle", "spot", "maintenance", "gpu-failure",
                                                 "reservation", "consolidation"]
    assert [w.value for w in WithinQueue] == ["LowerPriority", "Never"]
    assert TaintEffect("NoExecute") is TaintEffect.NO_EXECUTE and TaintEffect.NO_SCHEDULE == "NoSchedule"


def test_decisions_compare_and_hash_by_value() -> None:
    a = Binding(pod=domain.PodKey("ml/a"), node=NodeName("n1"), gpus=(0, 1))
    assert a == Binding(pod=domain.PodKey("ml/a"), node=NodeName("n1"), gpus=(0, 1))
    assert len({a, dataclasses.replace(a)}) == 1
    assert Decisions(bindings=(a,)) == Decisions(bindings=(a,))


def test_pending_pods_are_the_constructors_and_stay_frozen() -> None:
    keys = [domain.PodKey(f"ns/p{i}") for i in range(5)]
    reasons = [f"reason {i % 2}" for i in range(5)]
    made = domain.pending_pods(keys, reasons)
    expected = tuple(domain.PendingPod(k, r) for k, r in zip(keys, reasons, strict=True))
    assert made == expected
    assert [hash(p) for p in made] == [hash(p) for p in expected]
    assert [repr(p) for p in made] == [repr(p) for p in expected]
    assert domain.pending_pods([], []) == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        made[0].reason = "changed"  # type: ignore[misc]


def test_bindings_of_are_the_constructors() -> None:
    rows = [(domain.PodKey(f"ns/p{i}"), NodeName(f"n{i % 3}"), (i % 2, 3), None if i % 2 else 4,
             (), "h100" if i % 3 else None) for i in range(6)]
    made = domain.bindings_of(*zip(*rows, strict=True))
    expected = tuple(Binding(p, n, g, b, v, flavor=f) for p, n, g, b, v, f in rows)
    assert made == expected
    assert [hash(b) for b in made] == [hash(b) for b in expected]
    assert [repr(b) for b in made] == [repr(b) for b in expected]
