"""Properties of consolidation (docs/semantics.md, "Consolidation") on random snapshots.

Random snapshots of the engine's strategies get consolidation on and random running pods marked
checkpointed. Then: every move is of a pod that was running where the move says, checkpointed, and
its whole gang moves, within the per-call limit; a moved pod is placed (never pending, evicted or
bound again); and with the moved pods where the moves put them, every old invariant of the checker
holds (no node over-committed, gangs whole, victims eligible...). With no pod checkpointed the
decisions are those with consolidation off.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.domain import (
    ANNOTATION_CHECKPOINTED,
    ANNOTATION_GPU_INDEX,
    CPU,
    GPU,
    LABEL_GPU_PRODUCT,
    MEMORY,
    MILLI,
    PODS,
    Consolidation,
    Decisions,
    Node,
    NodeName,
    Pod,
    PodGroup,
    Queue,
    QueueFlavor,
    QueueName,
    QueueResource,
    ResourceFlavor,
    SchedulerConfig,
    Snapshot,
)
from gpufleet.engine import schedule

from .invariants import check_all
from .strategies import GIB, HOST, RACK, gang_snapshots, single_gang_snapshots, snapshots

PROPERTY = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NOW = 10_000.0


@st.composite
def consolidating(draw: st.DrawFn) -> Snapshot:
    snapshot = draw(st.one_of(snapshots(), gang_snapshots(), single_gang_snapshots()))
    pods = []
    for pod in snapshot.pods:
        if pod.node_name is not None and draw(st.booleans()):
            pod = replace(pod, annotations={**pod.annotations, ANNOTATION_CHECKPOINTED: "true"})
        pods.append(pod)
    limits = Consolidation(True, draw(st.integers(0, 6)), draw(st.integers(0, 2)))
    return replace(snapshot, pods=tuple(pods), config=replace(snapshot.config, now=NOW, consolidation=limits))


@st.composite
def fragmented(draw: st.DrawFn) -> Snapshot:
    """8-GPU nodes in up to two racks, partly filled with small running gangs (some checkpointed,
    some not preemptible, some pinned to a rack), and one or two pending gangs of big pods."""
    count = draw(st.integers(2, 5))
    nodes = tuple(Node(name=NodeName(f"n{i}"), labels={HOST: f"n{i}", RACK: f"r{draw(st.integers(0, 1))}"},
                       allocatable={CPU: 64 * MILLI, MEMORY: 512 * GIB, PODS: 110 * MILLI, GPU: 8 * MILLI})
                  for i in range(count))
    free = {n.name: list(range(8)) for n in nodes}
    pods: list[Pod] = []
    groups: list[PodGroup] = []
    q = QueueName("q")
    for i in range(draw(st.integers(3, 10))):
        size, whole = draw(st.integers(1, 2)), draw(st.integers(2, 4))
        prio = draw(st.sampled_from([0, 0, 500]))
        ckpt = draw(st.integers(0, 3)) > 0
        group = f"r{i}" if size > 1 else None
        placed = []
        for j in range(size):
            fits = [n for n in sorted(free) if len(free[n]) >= whole]
            if not fits:
                break
            node = draw(st.sampled_from(fits))
            gpus = tuple(free[node][:whole])
            del free[node][:whole]
            placed.append(Pod(namespace="ml", name=f"r{i}-{j}", requests={GPU: whole * MILLI}, priority=prio,
                              queue_label=q, group_label=group, node_name=NodeName(node), phase="Running",
                              creation_time=1.0, start_time=2.0 + i, gpu_index=gpus,
                              annotations={ANNOTATION_CHECKPOINTED: "true"} if ckpt else {}))
        if not placed:
            continue
        pods += placed
        if group is not None:
            rack = RACK if draw(st.booleans()) else None
            groups.append(PodGroup("ml", group, min_member=len(placed), queue=q, topology_required=rack))
    for i in range(draw(st.integers(1, 2))):
        size, whole = draw(st.integers(1, 2)), draw(st.integers(4, 8))
        group = f"w{i}" if size > 1 else None
        pods += [Pod(namespace="ml", name=f"w{i}-{j}", requests={GPU: whole * MILLI}, priority=0, queue_label=q,
                     group_label=group, creation_time=3.0 + i) for j in range(size)]
        if group is not None:
            groups.append(PodGroup("ml", group, min_member=size, queue=q,
                                   topology_required=RACK if draw(st.booleans()) else None))
    limits = Consolidation(True, draw(st.sampled_from([2, 4, 8, 0])), draw(st.sampled_from([1, 2, 0])))
    return Snapshot(nodes=nodes, pods=tuple(pods), queues=(Queue(q, resources={GPU: QueueResource(quota=64 * MILLI)}),),
                    pod_groups=tuple(groups),
                    config=SchedulerConfig(topology_levels=(RACK, HOST), now=NOW, consolidation=limits))


def _gang_of(pod: Pod) -> str:
    return f"{pod.namespace}/{pod.group_label}" if pod.group_label else pod.key


def _after_moves(snapshot: Snapshot, decisions: Decisions) -> Snapshot:
    """The snapshot with every moved pod running where its move put it."""
    moved = {m.pod: m for m in decisions.moves or ()}
    pods = []
    for pod in snapshot.pods:
        m = moved.get(pod.key)
        if m is not None:
            pod = replace(pod, node_name=NodeName(m.to_node), gpu_index=m.to_gpus, gpu_blocks=m.to_blocks or pod.gpu_blocks,
                          annotations={**pod.annotations, ANNOTATION_GPU_INDEX: ",".join(map(str, m.to_gpus))})
        pods.append(pod)
    return replace(snapshot, pods=tuple(pods), config=replace(snapshot.config, consolidation=None))


@PROPERTY
@given(st.one_of(consolidating(), fragmented()))
def test_moves_are_whole_checkpointed_gangs_placed_within_limits(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    assert decisions.moves is not None
    cons = snapshot.config.consolidation
    assert cons is not None
    assert len(decisions.moves) <= cons.max_moves_per_cycle
    by_key = {p.key: p for p in snapshot.pods}
    moved = {m.pod for m in decisions.moves}
    elsewhere = {b.pod for b in decisions.bindings} | {e.pod for e in decisions.evictions} | {
        p.pod for p in decisions.pending}
    assert not moved & elsewhere, "a moved pod is placed by its move, and nowhere else"
    gangs = {_gang_of(by_key[m]) for m in moved}
    for m in decisions.moves:
        pod = by_key[m.pod]
        assert pod.node_name == m.from_node and tuple(sorted(pod.gpu_index)) == m.from_gpus
        assert pod.annotations.get(ANNOTATION_CHECKPOINTED) == "true"
        assert m.to_node in {n.name for n in snapshot.nodes}
    for pod in snapshot.pods:  # gangs move whole
        if pod.node_name is not None and _gang_of(pod) in gangs:
            assert pod.key in moved, f"{pod.key}: its gang moves, it does not"


@PROPERTY
@given(st.one_of(consolidating(), fragmented()))
def test_old_invariants_hold_with_the_moves_carried_out(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    after = _after_moves(snapshot, decisions)
    violations = check_all(after, replace(decisions, moves=None))
    assert not violations, "\n".join(map(str, violations)) + f"\nmoves: {decisions.moves}"


@PROPERTY
@given(st.one_of(snapshots(), gang_snapshots(), single_gang_snapshots()))
def test_nothing_checkpointed_decides_as_off(snapshot: Snapshot) -> None:
    on = replace(snapshot, config=replace(snapshot.config, now=NOW, consolidation=Consolidation(True, 8, 1)))
    got = schedule(on)
    assert got.moves == ()
    assert replace(got, moves=None) == schedule(snapshot)


H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"


@st.composite
def fragmented_flavored(draw: st.DrawFn) -> Snapshot:
    """:func:`fragmented` on nodes of two GPU models, queue q's GPU quota split by flavor (h100,
    a100); the pending gangs of q, or of a queue without flavors."""
    snapshot = draw(fragmented())
    nodes = tuple(replace(n, labels={**n.labels, LABEL_GPU_PRODUCT: draw(st.sampled_from([H100, A100]))})
                  for n in snapshot.nodes)
    half = QueueResource(quota=32 * MILLI)
    q = Queue(QueueName("q"), flavors=(QueueFlavor("h100", {GPU: half}), QueueFlavor("a100", {GPU: half})))
    plain = Queue(QueueName("plain"), resources={GPU: QueueResource(quota=64 * MILLI)})
    to_plain = draw(st.booleans())
    pods = tuple(replace(p, queue_label=plain.name) if to_plain and p.node_name is None else p for p in snapshot.pods)
    groups = tuple(replace(g, queue=plain.name) if to_plain and g.name.startswith("w") else g
                   for g in snapshot.pod_groups)
    flavors = (ResourceFlavor("h100", ((LABEL_GPU_PRODUCT, H100),)), ResourceFlavor("a100", ((LABEL_GPU_PRODUCT, A100),)))
    return replace(snapshot, nodes=nodes, pods=pods, pod_groups=groups, queues=(q, plain), flavors=flavors)


@PROPERTY
@given(fragmented_flavored())
def test_a_moved_pod_keeps_its_flavor(snapshot: Snapshot) -> None:
    """A mover of a queue with flavors lands on a node of its own model (its usage stays on that
    flavor's quota); the old invariants hold with the moves carried out."""
    decisions = schedule(snapshot)
    model = {n.name: n.labels[LABEL_GPU_PRODUCT] for n in snapshot.nodes}
    for m in decisions.moves or ():
        assert model[m.to_node] == model[m.from_node], f"{m.pod} moved from {m.from_node} to {m.to_node}"
    after = _after_moves(snapshot, decisions)
    violations = check_all(after, replace(decisions, moves=None))
    assert not violations, "\n".join(map(str, violations)) + f"\nmoves: {decisions.moves}"
