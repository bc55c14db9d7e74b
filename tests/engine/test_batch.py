"""The batch path (engine/batch.py, ``Engine.USE_BATCH``) decides exactly what the one-by-one loop decides.

Random snapshots built to have runs of identical lone pods spread over several leaf queues
(flat forests and trees, quotas, borrowing, limits, sometimes lending limits), on nodes that are
cordoned, tainted, partly unhealthy or partly full, with gangs, fractional and non-preemptible
pods between them: ``Engine.run()`` with the batch path on and off gives the same decisions, the
same bindings in the same order of admission, the same evictions and the same pending reasons.
Unit tests show the path taken (``Engine.batches``) where it applies and not where it must not.
The same holds with GPU-model quotas (docs/semantics.md, "GPU-model quotas"): leaves that give their
GPU quota per flavor, in either order and flavorChoice, with pods pinned to a model or not.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet import domain
from gpufleet.bench.shapes import make_shape
from gpufleet.domain import (
    ANNOTATION_EXPECTED_RUNTIME,
    CPU,
    GPU,
    MILLI,
    PODS,
    FlavorChoice,
    Placement,
    Pod,
    Queue,
    QueueFlavor,
    QueueName,
    QueueResource,
    ReservationConfig,
    ResourceFlavor,
    SchedulerConfig,
    Snapshot,
)
from gpufleet.engine.scheduler import Engine

from .strategies import (
    GPU_TYPE,
    NS,
    PRIORITY_CLASSES,
    Draw,
    _Builder,
    _chance,
    _config,
    leaves,
    nodes,
    queue_forests,
    shapes,
)


@st.composite
def batch_snapshots(draw: Draw, pinned: bool = False) -> Snapshot:
    """Families of identical lone pods over the leaves, between random running and pending work."""
    cluster = draw(nodes(2, 12))
    queues = draw(queue_forests(1, 6, flat=draw(st.booleans())))
    if not _chance(draw, 2):  # lending limits keep the batch path off: mostly without them
        queues = tuple(replace(q, resources={r: replace(spec, lending_limit=None)
                                             for r, spec in q.resources.items()}) for q in queues)
    b = _Builder(draw, cluster, leaves(queues))
    for i in range(draw(st.integers(0, 8))):
        b.running_gang(i)
    for i in range(draw(st.integers(0, 3))):
        b.pending_gang(i)
    count = 0
    for f in range(draw(st.integers(1, 3))):
        shape = draw(shapes(gpu=True, min_whole=1, max_whole=4))
        priority = draw(st.sampled_from([0, 50, 100]))
        label = draw(st.sampled_from([None, None, True, False]))
        selector = {GPU_TYPE: draw(st.sampled_from("ab"))} if pinned and _chance(draw, 2) else {}
        for _ in range(draw(st.integers(2, 14))):
            queue = draw(st.sampled_from(b.queue_leaves))
            created = b.clock if _chance(draw, 2) else b.tick()  # equal creation: ties by name
            b.pods.append(Pod(namespace=NS, name=f"f{f}-{count:02d}", requests=shape.requests(),
                              gpu_blocks=shape.blocks, priority=priority, preemptible_label=label,
                              queue_label=queue, creation_time=created, node_selector=selector))
            count += 1
    b.extras()
    return Snapshot(nodes=cluster, pods=tuple(b.pods), priority_classes=PRIORITY_CLASSES, queues=queues,
                    pod_groups=tuple(b.groups), config=_config(draw))


FLAVORS = (ResourceFlavor("fa", ((GPU_TYPE, "a"),)), ResourceFlavor("fb", ((GPU_TYPE, "b"),)))


@st.composite
def flavored_batch_snapshots(draw: Draw) -> Snapshot:
    """:func:`batch_snapshots` (some families pinned to a GPU type) whose leaves mostly give their
    GPU quota per flavor (one or both, in either order, with limits, either flavorChoice)."""
    snapshot = draw(batch_snapshots(pinned=True))
    parents = {q.parent for q in snapshot.queues}
    queues = []
    for q in snapshot.queues:
        if q.name in parents or _chance(draw, 3):
            queues.append(q)
            continue
        order = draw(st.permutations(["fa", "fb"]))
        gpu = q.resources[GPU]
        entries = []
        for name in order[:draw(st.integers(1, 2))]:
            limit = draw(st.integers(0, 12)) * MILLI if _chance(draw, 2) else None
            lending = gpu.lending_limit if _chance(draw, 2) else None
            entries.append(QueueFlavor(name, {GPU: QueueResource(draw(st.integers(0, 8)) * MILLI, limit, lending)}))
        queues.append(replace(q, resources={r: v for r, v in q.resources.items() if r != GPU}, flavors=tuple(entries),
                              flavor_choice=draw(st.sampled_from(list(FlavorChoice)))))
    config = snapshot.config
    if _chance(draw, 3):  # the defrag score: no node index, flavored copies of the pods
        config = replace(config, placement=Placement.DEFRAG)
    return replace(snapshot, queues=tuple(queues), flavors=FLAVORS, config=config)


def run(snapshot: Snapshot, batch: bool) -> tuple[Any, ...]:
    engine = Engine(snapshot)
    engine.USE_BATCH = batch
    decisions = engine.run()
    return decisions, list(engine.log.bindings.items()), list(engine.log.evictions.items()), engine.batched


@settings(max_examples=150, deadline=None)
@given(batch_snapshots())
def test_the_batch_path_decides_as_the_one_by_one_loop(snapshot: Snapshot) -> None:
    *batched, _ = run(snapshot, True)
    *single, none = run(snapshot, False)
    assert none == 0
    assert batched == single


@settings(max_examples=150, deadline=None)
@given(flavored_batch_snapshots())
def test_the_batch_path_decides_as_the_one_by_one_loop_with_flavors(snapshot: Snapshot) -> None:
    *batched, _ = run(snapshot, True)
    *single, none = run(snapshot, False)
    assert none == 0
    assert batched == single


def test_basic_is_decided_in_batches() -> None:
    snapshot = make_shape("basic", 0.05)
    engine = Engine(snapshot)
    decisions = engine.run()
    assert engine.batches >= 1
    assert engine.batched == len(decisions.bindings) == 500
    engine = Engine(snapshot)
    engine.USE_BATCH = False
    assert engine.run() == decisions and engine.batched == 0


def _lone(name: str, queue: str, whole: int = 1, created: float = 0.0, **kw: Any) -> Pod:
    return Pod(NS, name, requests={GPU: whole * MILLI, CPU: MILLI}, queue_label=queue, creation_time=created, **kw)


def _snapshot(pods: list[Pod], queues: tuple[Queue, ...], gpus: int = 8) -> Snapshot:
    node = domain.Node(domain.NodeName("n0"), allocatable={GPU: gpus * MILLI, CPU: 64 * MILLI, PODS: 110 * MILLI})
    return Snapshot(nodes=(node,), pods=tuple(pods), queues=queues)


def _both(snapshot: Snapshot) -> tuple[Engine, domain.Decisions]:
    engine = Engine(snapshot)
    got = engine.run()
    plain = Engine(snapshot)
    plain.USE_BATCH = False
    assert plain.run() == got
    return engine, got


def test_a_run_stops_where_the_node_is_full_and_at_a_gate() -> None:
    queues = (Queue(QueueName("a"), resources={GPU: QueueResource(2 * MILLI, 3 * MILLI)}),
              Queue(QueueName("b"), resources={GPU: QueueResource(2 * MILLI)}))
    pods = [_lone(f"p{i}", "ab"[i % 2], created=i) for i in range(12)]
    engine, decisions = _both(_snapshot(pods, queues))
    # p0-p5 in one run; a's limit of 3 GPUs stops its fourth pod (p6, one by one: it fails);
    # then b's p7 and p9 start runs that a's next heads stop; p11 finds the node full.
    assert engine.batched == 8 and engine.batches == 3
    pending = {p.pod.split("/")[1]: p.reason for p in decisions.pending}
    assert set(pending) == {"p6", "p8", "p10", "p11"} and "limit" in pending["p6"]


def test_no_batch_with_lending_limits_gangs_or_fractional_pods() -> None:
    lending = (Queue(QueueName("a"), resources={GPU: QueueResource(2 * MILLI, None, MILLI)}),
               Queue(QueueName("b"), resources={GPU: QueueResource(2 * MILLI)}))
    pods = [_lone(f"p{i}", "ab"[i % 2], created=i) for i in range(4)]
    assert _both(_snapshot(pods, lending))[0].batches == 0
    queues = (Queue(QueueName("a"), resources={GPU: QueueResource(8 * MILLI)}),)
    shares = [replace(_lone(f"s{i}", "a", whole=0, created=i), gpu_blocks=50) for i in range(4)]
    assert _both(_snapshot(shares, queues))[0].batches == 0
    # A lone pod after a fractional head: the batch starts at it, not before.
    engine, _ = _both(_snapshot([*shares[:1], *(_lone(f"p{i}", "a", created=10 + i) for i in range(3))], queues))
    assert engine.batches == 1 and engine.batched == 3


def test_a_sibling_falls_out_of_quota_when_its_parent_fills() -> None:
    """x0's admission fills the parent's quota: l1, in quota at its own leaf, falls out, and the
    pick between l1 and x1 (both out of quota) goes by borrowed share, ties by age: x1 first."""
    gpus = {GPU: QueueResource(2 * MILLI)}
    queues = (Queue(QueueName("r"), resources=gpus), Queue(QueueName("l"), parent=QueueName("r"), resources=gpus),
              Queue(QueueName("x"), parent=QueueName("r"), resources=gpus))
    pods = [_lone("l0", "l", created=0), _lone("x0", "x", created=1), _lone("x1", "x", created=2),
            _lone("l1", "l", created=5)]
    engine, _ = _both(_snapshot(pods, queues))
    assert engine.batched == 4
    assert [engine.pods[p].pod.name for p in engine.log.bindings] == ["l0", "x0", "x1", "l1"]


def _typed_snapshot(pods: list[Pod], queue: Queue, free: dict[str, int]) -> Snapshot:
    """Nodes ``a`` and ``b`` (GPU types a and b) of 8 GPUs, ``8 - free[n]`` of them held by a running pod."""
    nodes, running = [], []
    for n in ("a", "b"):
        nodes.append(domain.Node(domain.NodeName(n), labels={GPU_TYPE: n},
                                 allocatable={GPU: 8 * MILLI, CPU: 64 * MILLI, PODS: 110 * MILLI}))
        if free[n] < 8:
            running.append(Pod(NS, f"run-{n}", requests={GPU: (8 - free[n]) * MILLI}, queue_label="other",
                               node_name=domain.NodeName(n), gpu_index=tuple(range(8 - free[n]))))
    return Snapshot(nodes=tuple(nodes), pods=(*running, *pods), flavors=FLAVORS,
                    queues=(queue, Queue(QueueName("other"))))


def _flavor_queue(choice: FlavorChoice, quota_a: int, quota_b: int) -> Queue:
    return Queue(QueueName("q"), flavor_choice=choice,
                 flavors=(QueueFlavor("fa", {GPU: QueueResource(quota_a * MILLI)}),
                          QueueFlavor("fb", {GPU: QueueResource(quota_b * MILLI)})))


def test_flavored_pods_are_batched_in_quota_first_then_borrowing_in_order() -> None:
    pods = [_lone(f"p{i}", "q", created=i) for i in range(9)]
    engine, decisions = _both(_typed_snapshot(pods, _flavor_queue(FlavorChoice.IN_ORDER, 2, 4), {"a": 8, "b": 8}))
    assert engine.batches == 1 and engine.batched == 9
    # fa in quota (p0, p1), then fb in quota (p2-p5), then borrowing on the first flavor, fa.
    assert [b.flavor for b in decisions.bindings] == ["fa"] * 2 + ["fb"] * 4 + ["fa"] * 3
    assert [b.node for b in decisions.bindings] == ["a"] * 2 + ["b"] * 4 + ["a"] * 3


def test_flavored_best_placement_is_batched_over_in_quota_flavors_first() -> None:
    """fa is out of quota (0), fb in quota for 2 GPUs: p0, p1 go to b although binpack's best node is
    a (2 GPUs free); then both borrow and the best node over both, a, takes p2, p3; then b."""
    pods = [_lone(f"p{i}", "q", created=i) for i in range(5)]
    engine, decisions = _both(_typed_snapshot(pods, _flavor_queue(FlavorChoice.BEST_PLACEMENT, 0, 2),
                                              {"a": 2, "b": 8}))
    assert engine.batched == 5
    assert [(b.node, b.flavor) for b in decisions.bindings] == [("b", "fb")] * 2 + [("a", "fa")] * 2 + [("b", "fb")]


def test_a_run_from_a_queue_without_flavors_admits_a_flavored_queue_s_pods_on_a_flavor() -> None:
    """A run started at a queue without flavors goes on to the heads of a queue with them: those take
    a flavor and count on it (the batch once admitted them there as without flavors)."""
    pods = [_lone(f"p{i}", "pq"[i % 2], created=i) for i in range(6)]
    snapshot = _typed_snapshot(pods, _flavor_queue(FlavorChoice.IN_ORDER, 8, 8), {"a": 8, "b": 8})
    snapshot = replace(snapshot, queues=(*snapshot.queues, Queue(QueueName("p"), resources={GPU: QueueResource(8 * MILLI)})))
    engine, decisions = _both(snapshot)
    assert engine.batches == 1 and engine.batched == 6
    assert {b.pod: b.flavor for b in decisions.bindings} == {
        f"{NS}/p{i}": ("fa" if i % 2 else None) for i in range(6)}


@st.composite
def reserved_batch_snapshots(draw: Draw, flavored: bool = False) -> Snapshot:
    """:func:`batch_snapshots` or :func:`flavored_batch_snapshots` (``flavored``: only the latter) with
    reservation and backfill on (docs/semantics.md): the snapshot's time a little after its last
    event, a short ``after``, observed runtimes for some queues and declared ones for some pods, so
    that gangs hold reservations while runs of lone pods, some of which may use them, are admitted."""
    snapshot = draw(flavored_batch_snapshots() if flavored else st.one_of(batch_snapshots(), flavored_batch_snapshots()))
    latest = max([p.creation_time for p in snapshot.pods] + [p.start_time or 0.0 for p in snapshot.pods] + [0.0])
    pods = [replace(p, annotations={**p.annotations, ANNOTATION_EXPECTED_RUNTIME: f"{draw(st.integers(0, 300))}s"})
            if _chance(draw, 2) else p for p in snapshot.pods]
    observed = {q.name: float(draw(st.integers(0, 300))) for q in snapshot.queues if draw(st.booleans())}
    config = replace(snapshot.config, now=latest + draw(st.integers(0, 120)), reservation=ReservationConfig(
        after=float(draw(st.integers(0, 60))), max=draw(st.integers(1, 3)), observed_runtime=observed))
    return replace(snapshot, pods=tuple(pods), config=config)


@settings(max_examples=150, deadline=None)
@given(reserved_batch_snapshots())
def test_the_batch_path_decides_as_the_one_by_one_loop_with_reservations_held(snapshot: Snapshot) -> None:
    *batched, _ = run(snapshot, True)
    *single, none = run(snapshot, False)
    assert none == 0
    assert batched == single


@settings(max_examples=150, deadline=None)
@given(reserved_batch_snapshots(flavored=True))
def test_lone_flavored_pods_under_held_reservations_decide_as_the_flavor_attempt(snapshot: Snapshot) -> None:
    """With flavors and reservations held (of borrowing gangs or not), the batch path and each lone
    flavored pod's admission without copies (placed under the holds of its flavor attempt's
    placement on each flavor: Engine.admit_lone_flavored) decide as the flavor attempt alone."""
    *batched, _ = run(snapshot, True)
    *single, none = run(snapshot, False)
    assert none == 0
    assert batched == single


def _reserving_snapshot(pods: list[Pod]) -> Snapshot:
    """One node of 8 GPUs, 6 held by a non-preemptible pod that started at 30 s and declares an hour's runtime (no
    backfill of ``big``: it started before ``big``'s reservation time, 60 s); ``big`` (4 GPUs, waiting
    since 0) is overdue at 1000 s and reserves the node, whose 2 free GPUs it holds."""
    node = domain.Node(domain.NodeName("n0"), allocatable={GPU: 8 * MILLI, CPU: 64 * MILLI, PODS: 110 * MILLI})
    running = Pod(NS, "run", requests={GPU: 6 * MILLI}, queue_label="b", node_name=node.name, phase="Running",
                  gpu_index=tuple(range(6)), start_time=30.0, annotations={ANNOTATION_EXPECTED_RUNTIME: "1h"},
                  preemptible_label=False)
    queues = (Queue(QueueName("a"), resources={GPU: QueueResource(4 * MILLI)}),
              Queue(QueueName("b"), resources={GPU: QueueResource(4 * MILLI)}))
    config = SchedulerConfig(now=1000.0, reservation=ReservationConfig(after=60.0))
    return Snapshot(nodes=(node,), pods=(running, _lone("big", "a", whole=4, created=0.0), *pods), queues=queues,
                    config=config)


def test_a_run_admits_the_pods_a_held_reservation_yields_to() -> None:
    """Preemptible pods that waited less than the reserved gang may use its held GPUs: batched."""
    pods = [_lone(f"p{i}", "ab"[i % 2], created=100.0 + i, preemptible_label=True) for i in range(4)]
    engine, decisions = _both(_reserving_snapshot(pods))
    assert [r.gang for r in decisions.reservations] == [f"{NS}/big"]
    assert engine.batches == 1 and engine.batched == 2  # b borrows (6 GPUs of 4): a's pods first
    assert sorted(b.pod for b in decisions.bindings) == [f"{NS}/p0", f"{NS}/p2"]


def test_a_run_stops_at_a_pod_a_held_reservation_does_not_yield_to() -> None:
    """p1 is not preemptible (nor declares a runtime): the reservation holds its GPUs against it, so
    the run stops before it and it waits; p2 (preemptible) starts a run of its own."""
    pods = [_lone("p0", "a", created=100.0, preemptible_label=True),
            _lone("p1", "a", created=101.0, preemptible_label=False),
            _lone("p2", "a", created=102.0, preemptible_label=True)]
    engine, decisions = _both(_reserving_snapshot(pods))
    assert [r.gang for r in decisions.reservations] == [f"{NS}/big"]
    assert sorted(b.pod for b in decisions.bindings) == [f"{NS}/p0", f"{NS}/p2"]
    assert engine.batched == 2 and engine.batches == 2
    assert "reserved for" in {p.pod: p.reason for p in decisions.pending}[f"{NS}/p1"]


def test_flavored_lone_pods_of_many_leaves_are_admitted_one_by_one_without_copies() -> None:
    """More leaves than the batch takes (MAX_LEAVES): each lone pod is still admitted as the batch
    admits it (Engine.admit_lone_flavored: no flavored copy of the pod), with the same decisions."""
    from gpufleet.engine.batch import MAX_LEAVES

    n = MAX_LEAVES + 2
    queues = tuple(replace(_flavor_queue(FlavorChoice.IN_ORDER, 1, 1), name=QueueName(f"q{i}")) for i in range(n))
    pods = [_lone(f"p{i:02d}", f"q{i % n}", created=i) for i in range(3 * n)]
    snapshot = _typed_snapshot(pods, queues[0], {"a": 8, "b": 8})
    snapshot = replace(snapshot, queues=(*queues, Queue(QueueName("other"))))
    engine, decisions = _both(snapshot)
    assert engine.batches == 0 and len(decisions.bindings) == 16
    assert engine.flavors is not None
    # Only pods whose attempt failed once went through the flavor attempt (a copy per flavor tried):
    # none of those admitted on their first one, p00-p07 on fa then p10, p11 on fb.
    copied = {engine.pods[m].key for m, _ in engine.flavors._pods}
    first = {f"{NS}/p{i:02d}" for i in (*range(8), 10, 11)}
    assert first <= {b.pod for b in decisions.bindings} and not copied & first
    plain = Engine(snapshot)
    plain.USE_BATCH = False
    plain.run()  # the flavor attempt copies them
    assert plain.flavors is not None and first <= {plain.pods[m].key for m, _ in plain.flavors._pods}


def _borrowing_reservation_snapshot(pods: list[Pod]) -> Snapshot:
    """Nodes ``a`` and ``c`` (GPU type a) and ``b`` (type b), 8 GPUs each, mostly held by long runs of
    queue ``other`` (in quota, not preemptible: no victims): 2 GPUs free on a (its run declares an
    hour), 3 on c (its run declares nothing: never expected to end), none on b (two hours). ``big``
    (preemptible, 4 GPUs, queue ``q`` whose flavor fa has no quota: it borrows) waits since 0, is
    overdue at 1000 s and reserves a, whose 2 free GPUs it holds."""
    nodes, running = [], []
    for n, t, used, runtime in (("a", "a", 6, "1h"), ("b", "b", 8, "2h"), ("c", "a", 5, None)):
        nodes.append(domain.Node(domain.NodeName(n), labels={GPU_TYPE: t},
                                 allocatable={GPU: 8 * MILLI, CPU: 64 * MILLI, PODS: 110 * MILLI}))
        running.append(Pod(NS, f"run-{n}", requests={GPU: used * MILLI}, queue_label="other", phase="Running",
                           node_name=domain.NodeName(n), gpu_index=tuple(range(used)), start_time=30.0,
                           preemptible_label=False,
                           annotations={ANNOTATION_EXPECTED_RUNTIME: runtime} if runtime else {}))
    queues = (Queue(QueueName("q"), flavors=(QueueFlavor("fa", {GPU: QueueResource(0)}),)),
              Queue(QueueName("q2"), flavors=(QueueFlavor("fa", {GPU: QueueResource(4 * MILLI)}),)),
              Queue(QueueName("other"), resources={GPU: QueueResource(24 * MILLI)}))
    config = SchedulerConfig(now=1000.0, reservation=ReservationConfig(after=60.0))
    big = _lone("big", "q", whole=4, created=0.0, preemptible_label=True)
    return Snapshot(nodes=tuple(nodes), pods=(*running, big, *pods), queues=queues, flavors=FLAVORS, config=config)


def test_a_lone_flavored_pod_a_borrowing_reservation_does_not_yield_to_is_admitted_without_copies() -> None:
    """``big`` borrows: its held GPUs on a go only to preemptible gangs that waited less and borrow
    too. p1 (preemptible, in quota on fa) may not use them: the run stops before it, and its attempt
    places it as the flavor attempt does, under the holds (on c, not on a where binpack would put
    it without them), from the free-GPU index without a flavored copy (Engine.admit_lone_flavored
    with FlavorBook.admit_lone's ``hold``). p2 (preemptible, borrowing) may use them: it goes on a."""
    pods = [_lone("p1", "q2", created=100.0, preemptible_label=True),
            _lone("p2", "q", created=101.0, preemptible_label=True)]
    engine, decisions = _both(_borrowing_reservation_snapshot(pods))
    assert [r.gang for r in decisions.reservations] == [f"{NS}/big"]
    assert {b.pod: (b.node, b.flavor) for b in decisions.bindings} == {f"{NS}/p1": ("c", "fa"),
                                                                       f"{NS}/p2": ("a", "fa")}
    assert engine.flavors is not None  # only big, which fails, went through the flavor attempt's copies
    assert {engine.pods[m].key for m, _ in engine.flavors._pods} == {f"{NS}/big"}
    plain = Engine(_borrowing_reservation_snapshot(pods))
    plain.USE_BATCH = False
    plain.run()  # the flavor attempt copies them
    assert plain.flavors is not None and {plain.pods[m].key for m, _ in plain.flavors._pods} >= {f"{NS}/p1"}
