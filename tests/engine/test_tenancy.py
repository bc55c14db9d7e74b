"""The Project rules in the engine (docs/semantics-notes.md, "Projects (tenancy)") on domain
snapshots: what the scenario files cannot show (a namespace claimed twice, which ``replay``
refuses; rule 6; caps through preemption; candidates counted per cycle)."""

from __future__ import annotations

from gpufleet.adapters import pod_from_dict
from gpufleet.domain import (
    GPU,
    MILLI,
    Binding,
    Eviction,
    EvictionReason,
    LabelSelector,
    Node,
    NodeName,
    NodePool,
    PendingPod,
    Pod,
    PodKey,
    PriorityClass,
    Project,
    Queue,
    QueueName,
    QueueResource,
    SchedulerConfig,
    Snapshot,
)
from gpufleet.domain.wire import ANNOTATION_GPU_INDEX, ANNOTATION_MPS_MEM_LIMIT
from gpufleet.engine import schedule

Q = QueueName("team")
LOW = PriorityClass("low", 10)
HIGH = PriorityClass("high", 50)


def node(name: str, gpus: int, **labels: str) -> Node:
    return Node(NodeName(name), labels=labels, allocatable={GPU: gpus * MILLI, "pods": 110 * MILLI})


def pod(name: str, gpus: int, *, ns: str = "ml", user: str | None = None, klass: PriorityClass | None = None,
        node_name: str | None = None, created: float = 0.0, **fields: object) -> Pod:
    return Pod(
        namespace=ns, name=name, requests={GPU: gpus * MILLI} if gpus else {}, queue_label=Q, submitted_by=user,
        priority_class_name=klass.name if klass else None, priority=klass.value if klass else None,
        node_name=NodeName(node_name) if node_name else None, phase="Running" if node_name else "Pending",
        creation_time=created, start_time=created if node_name else None, **fields,  # type: ignore[arg-type]
    )


def test_a_namespace_claimed_by_two_projects_belongs_to_neither() -> None:
    a = Project(name="a", namespace_names=("ml",), queues=(Q,))
    b = Project(name="b", namespace_selector=LabelSelector((("kubernetes.io/metadata.name", "ml"),)))
    decisions = schedule(Snapshot(nodes=(node("n1", 8),), pods=(pod("x", 1),), queues=(Queue(Q),), projects=(a, b)))
    assert decisions.bindings == ()
    assert decisions.pending == (PendingPod(PodKey("ml/x"), "namespace ml is claimed by projects a, b"),)


def test_scheduler_owned_annotations_of_a_pending_pod_are_never_read() -> None:
    """Rule 6: a pending pod whose author wrote gpu-index (and an MPS limit) is placed as if they
    were absent: the fractional pod of issue 10 (gpu-blocks 1, gpu-index 0,1,2,3) holds one block
    of the GPU the engine chooses, the whole-GPU pod the GPUs the engine chooses."""
    raw = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "frac", "namespace": "ml", "labels": {"gpufleet.dev/queue": "team"},
                     "annotations": {"gpufleet.dev/gpu-blocks": "1", ANNOTATION_GPU_INDEX: "0,1,2,3",
                                     ANNOTATION_MPS_MEM_LIMIT: "0=80000M"}},
        "spec": {"schedulerName": "gpufleet", "containers": [{"name": "main"}]},
    }
    frac = pod_from_dict(raw)
    assert frac.gpu_index == ()  # the loader does not take it from a pod on no node
    forged = pod("whole", 1, gpu_index=(3,), annotations={ANNOTATION_GPU_INDEX: "3"})  # a domain pod, forged
    busy = pod("busy", 1, node_name="n1", gpu_index=(0,), annotations={ANNOTATION_GPU_INDEX: "0"})
    decisions = schedule(Snapshot(nodes=(node("n1", 4),), pods=(busy, forged, frac), queues=(Queue(Q),)))
    assert decisions.bindings == (
        Binding(PodKey("ml/frac"), NodeName("n1"), (1,), 1),
        Binding(PodKey("ml/whole"), NodeName("n1"), (2,)),
    )


def test_the_gpu_cap_holds_through_preemption() -> None:
    """alice (cap 2) holds 2 GPUs at low priority; her high-priority pod of 2 GPUs may only come
    in by evicting her own pod: bob's (started later, the preferred victim) frees room but leaves
    her over the cap."""
    project = Project(name="p", namespace_names=("ml",), queues=(Q,), max_gpus_per_user=2)
    pods = (
        pod("alice-low", 2, user="alice", klass=LOW, node_name="n1", gpu_index=(0, 1), created=1.0),
        pod("bob-low", 2, user="bob", klass=LOW, node_name="n1", gpu_index=(2, 3), created=2.0),
        pod("alice-high", 2, user="alice", klass=HIGH, created=3.0),
    )
    snapshot = Snapshot(nodes=(node("n1", 4),), pods=pods, priority_classes=(LOW, HIGH), queues=(Queue(Q),),
                        projects=(project,))
    decisions = schedule(snapshot)
    assert decisions.evictions == (Eviction(PodKey("ml/alice-low"), EvictionReason.PREEMPT, PodKey("ml/alice-high")),)
    assert decisions.bindings == (Binding(PodKey("ml/alice-high"), NodeName("n1"), (0, 1)),)
    without = schedule(Snapshot(nodes=snapshot.nodes, pods=pods, priority_classes=snapshot.priority_classes,
                                queues=snapshot.queues))
    assert [e.pod for e in without.evictions] == ["ml/bob-low"]


def test_pending_gangs_are_counted_at_each_cycle() -> None:
    """maxPendingGangsPerUser 1: one of alice's gangs is a candidate per cycle; once it binds it is
    no longer pending, and the next one is a candidate in the next cycle."""
    project = Project(name="p", namespace_names=("ml",), queues=(Q,), max_pending_gangs_per_user=1)
    pods = tuple(pod(f"a{i}", 1, user="alice", created=float(i)) for i in range(3))
    decisions = schedule(Snapshot(nodes=(node("n1", 8),), pods=pods, queues=(Queue(Q),), projects=(project,)))
    assert [b.pod for b in decisions.bindings] == ["ml/a0", "ml/a1", "ml/a2"]
    assert decisions.cycles == 4


def test_default_queue_of_a_project_decides_the_queue_of_pods_that_name_none() -> None:
    infer = QueueName("infer")
    project = Project(name="p", namespace_names=("ml",), queues=(Q, infer), default_queue=infer)
    plain = Pod(namespace="ml", name="plain", requests={GPU: 2 * MILLI})
    queues = (Queue(Q), Queue(infer, resources={GPU: QueueResource(limit=1 * MILLI)}))
    decisions = schedule(Snapshot(nodes=(node("n1", 8),), pods=(plain,), queues=queues, projects=(project,),
                                  config=SchedulerConfig(default_queue=Q)))
    assert decisions.pending[0].reason.startswith("queue infer at its limit of 1 GPU")


def test_node_pools_rule_out_every_node_and_count_the_others() -> None:
    pools = (NodePool("a100", LabelSelector((("pool", "a100"),))), NodePool("b200", LabelSelector((("pool", "b200"),))))
    project = Project(name="p", namespace_names=("ml",), queues=(Q,), node_pools=pools)
    nowhere = schedule(Snapshot(nodes=(node("n1", 8, pool="h100"),), pods=(pod("x", 1),), queues=(Queue(Q),),
                                projects=(project,)))
    assert nowhere.pending == (PendingPod(PodKey("ml/x"), "project p may only use node pools a100, b200; "
                                                          "no eligible victims"),)
    some = schedule(Snapshot(nodes=(node("n1", 8, pool="h100"), node("n2", 1, pool="b200")), pods=(pod("x", 2),),
                             queues=(Queue(Q),), projects=(project,)))
    assert some.pending == (PendingPod(PodKey("ml/x"), "0/2 nodes fit: 1 outside project p's node pools (a100, b200), "
                                                       "1 without 2 free GPUs (most free on one node: 1); "
                                                       "no eligible victims"),)
