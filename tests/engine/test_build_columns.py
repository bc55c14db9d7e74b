"""The fresh build makes the pod table and the gangs by columns (workload.py): the gangs must be
those the gang-by-gang path makes (the one an engine keeping state takes, ``kept``), field by field."""

from __future__ import annotations

from dataclasses import fields

from hypothesis import given, settings
from tests.engine.strategies import gang_snapshots, snapshots

from gpufleet.domain import (
    CPU,
    GPU,
    MEMORY,
    MILLI,
    Node,
    NodeName,
    Pod,
    PodGroup,
    PriorityClass,
    QueueName,
    Snapshot,
)
from gpufleet.engine.intake import screen
from gpufleet.engine.scheduler import Engine
from gpufleet.engine.workload import Gang, KeptGangs, build_gangs, build_pod_table


def _fields(gang: Gang) -> tuple[object, ...]:
    return tuple(getattr(gang, f.name) for f in fields(gang))


def _both(snapshot: Snapshot) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]], list[int], list[int]]:
    """The gangs by columns and gang by gang, and the pods' gang numbers after each."""
    engine = Engine(snapshot)  # the forest's numbering and the cluster, as a call builds them
    screened = screen(snapshot).snapshot
    classes = {pc.name: pc.value for pc in screened.priority_classes}
    out = []
    for kept in (None, KeptGangs()):
        pods, _ = build_pod_table(screened, engine.cluster, engine.forest.index)
        gangs = build_gangs(screened, pods, classes, kept)
        out.append(([_fields(g) for g in gangs], [p.gang for p in pods]))
    (columns, at_columns), (one_by_one, at_one) = out
    return columns, one_by_one, at_columns, at_one


def _pod(name: str, group: str | None, gpus: int = 1, *, cpu: int = 1, gates: tuple[str, ...] = (),
         priority: str | None = None, created: float = 0.0, node: str | None = None) -> Pod:
    return Pod(namespace="ml", name=name, requests={GPU: gpus * MILLI, CPU: cpu * MILLI},
               queue_label=QueueName("default"), group_label=group, scheduling_gates=gates,
               priority_class_name=priority, creation_time=created, node_name=NodeName(node) if node else None,
               phase="Running" if node else "Pending", gpu_index=tuple(range(gpus)) if node else ())


def test_every_branch_of_a_gang_is_made_as_gang_by_gang() -> None:
    node = Node(NodeName("n1"), allocatable={CPU: 64 * MILLI, MEMORY: 64 * MILLI, "pods": 110 * MILLI,
                                              GPU: 8 * MILLI})
    pods = (
        # sizes differ: members_by_size is not the name order
        _pod("mixed-0", "mixed", 1), _pod("mixed-1", "mixed", 4), _pod("mixed-2", "mixed", 1, cpu=3),
        # alike, with gates on one member and priorities of their own (the group names none)
        _pod("gated-0", "gated", gates=("b", "a"), priority="high", created=5.0),
        _pod("gated-1", "gated", gates=("a",), created=3.0),
        # the group's class and queued-at win
        _pod("old-0", "old", priority="high", created=9.0), _pod("old-1", "old", created=8.0),
        # a label naming no PodGroup, one pod and two
        _pod("lost", "nowhere"), _pod("lost2-0", "nowhere2"), _pod("lost2-1", "nowhere2"),
        # a pod named like a label of its namespace, and a running member
        _pod("mixed", None), _pod("run-0", "run", node="n1"), _pod("run-1", "run"),
    )
    groups = (PodGroup("ml", "mixed", min_member=3), PodGroup("ml", "gated", min_member=2),
              PodGroup("ml", "old", min_member=2, priority_class_name="low", queued_at=1.0,
                       topology_preferred="rack"),
              PodGroup("ml", "run", min_member=2, topology_required="rack"))
    snapshot = Snapshot(nodes=(node,), pods=pods, pod_groups=groups,
                        priority_classes=(PriorityClass("high", 100), PriorityClass("low", 1)))
    columns, one_by_one, at_columns, at_one = _both(snapshot)
    assert columns == one_by_one
    assert at_columns == at_one
    by_key: dict[str, Gang] = {}
    for g in Engine(snapshot).gangs:
        by_key.setdefault(g.key, g)  # the labelled gang comes before the pod named like it
    mixed = by_key["ml/mixed"]
    assert mixed.members_by_size != mixed.members  # the 4-GPU member first
    assert by_key["ml/gated"].gates == ("a", "b")
    assert (by_key["ml/old"].priority, by_key["ml/old"].creation) == (1, 1.0)
    assert by_key["ml/nowhere2"].missing_group


@settings(max_examples=150, deadline=None)
@given(snapshots())
def test_random_snapshots_get_the_same_gangs(snapshot: Snapshot) -> None:
    columns, one_by_one, at_columns, at_one = _both(snapshot)
    assert columns == one_by_one
    assert at_columns == at_one


@settings(max_examples=100, deadline=None)
@given(gang_snapshots())
def test_random_gang_snapshots_get_the_same_gangs(snapshot: Snapshot) -> None:
    columns, one_by_one, at_columns, at_one = _both(snapshot)
    assert columns == one_by_one
    assert at_columns == at_one
