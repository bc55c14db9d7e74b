"""Properties of GPU-model quotas (docs/semantics.md, "GPU-model quotas (resource flavors)").

Random snapshots (``strategies.snapshots``: nodes of GPU type ``a`` or ``b``) get two
ResourceFlavors, one per type, and some leaf queues give their GPU quota per flavor, in a random
order, with random limits and either flavorChoice. Then: a pod of such a queue that asks GPUs binds with the flavor of its
node and others with none; a gang is on the nodes of one flavor; no new binding takes a flavor's
usage above its limit; and the engine's invariants that do not read quota hold.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.domain import GPU, MILLI, FlavorChoice, Queue, QueueFlavor, QueueResource, ResourceFlavor, Snapshot
from gpufleet.domain.queues import gang_key, resolve_queue
from gpufleet.engine import schedule

from .invariants import check_gangs, check_inter_pod, check_nodes, check_report, check_volumes
from .strategies import GPU_TYPE, leaves, snapshots

FLAVORS = (ResourceFlavor("fa", ((GPU_TYPE, "a"),)), ResourceFlavor("fb", ((GPU_TYPE, "b"),)))
TYPE_OF = {"fa": "a", "fb": "b"}


@st.composite
def flavored_snapshots(draw: st.DrawFn) -> Snapshot:
    snapshot = draw(snapshots())
    leaf_names = set(leaves(snapshot.queues))
    queues: list[Queue] = []
    for q in snapshot.queues:
        if q.name not in leaf_names or not draw(st.booleans()):
            queues.append(q)
            continue
        order = draw(st.permutations(["fa", "fb"]))
        entries = []
        for name in order[:draw(st.integers(1, 2))]:
            limit = draw(st.integers(0, 12)) * MILLI if draw(st.booleans()) else None
            entries.append(QueueFlavor(name, {GPU: QueueResource(draw(st.integers(0, 8)) * MILLI, limit)}))
        resources = {r: spec for r, spec in q.resources.items() if r != GPU}
        queues.append(replace(q, resources=resources, flavors=tuple(entries),
                              flavor_choice=draw(st.sampled_from(list(FlavorChoice)))))
    return replace(snapshot, queues=tuple(queues), flavors=FLAVORS)


def _flavored_leaves(snapshot: Snapshot) -> dict[str, Queue]:
    return {q.name: q for q in snapshot.queues if q.flavors}


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(flavored_snapshots())
def test_flavors_bind_on_one_flavor_within_limits(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    node_type = {n.name: n.labels.get(GPU_TYPE) for n in snapshot.nodes}
    groups = {str(g.key): g for g in snapshot.pod_groups}
    flavored = _flavored_leaves(snapshot)
    pods = {p.key: p for p in snapshot.pods}
    default = snapshot.config.default_queue

    def queue_of(key: str) -> str:
        pod = pods[key]
        return str(resolve_queue(pod, groups.get(f"{pod.namespace}/{pod.group_label}"), default))

    def asks_gpu(key: str) -> bool:
        pod = pods[key]
        return pod.requests.get(GPU, 0) > 0 or pod.is_fractional

    # A pod takes a flavor iff its queue lists flavors and it asks GPUs; it is its node's.
    for b in decisions.bindings:
        if queue_of(b.pod) in flavored and asks_gpu(b.pod):
            assert b.flavor is not None, b
            assert TYPE_OF[b.flavor] == node_type[b.node], b
            assert b.flavor in {f.name for f in flavored[queue_of(b.pod)].flavors}, b
        else:
            assert b.flavor is None, b

    # A gang wholly pending in the snapshot is bound on the nodes of one flavor.
    evicted = {e.pod for e in decisions.evictions}
    types: dict[str, set[str | None]] = defaultdict(set)
    running_gangs = {gang_key(p) for p in snapshot.pods if p.node_name is not None}
    for b in decisions.bindings:
        if queue_of(b.pod) in flavored and asks_gpu(b.pod) and gang_key(pods[b.pod]) not in running_gangs:
            types[gang_key(pods[b.pod])].add(node_type[b.node])
    assert all(len(t) == 1 for t in types.values()), types

    # No new binding takes a flavor's usage (whole GPUs, at the leaf) above its limit.
    usage: dict[tuple[str, str | None], int] = defaultdict(int)
    added: set[tuple[str, str | None]] = set()
    fractional: set[str] = set()
    for p in snapshot.pods:
        if p.node_name is None or p.key in evicted or not p.ours or p.finished or p.key not in pods:
            continue
        q = queue_of(p.key)
        if q in flavored:
            fractional.update([q] if p.is_fractional else [])
            usage[(q, {v: k for k, v in TYPE_OF.items()}.get(node_type[p.node_name] or ""))] += p.requests.get(GPU, 0)
    for b in decisions.bindings:
        q = queue_of(b.pod)
        if q in flavored and b.flavor is not None:
            fractional.update([q] if pods[b.pod].is_fractional else [])
            usage[(q, b.flavor)] += pods[b.pod].requests.get(GPU, 0)
            added.add((q, b.flavor))
    for q, f in added:
        if q in fractional:
            continue
        entry = next(e for e in flavored[q].flavors if e.name == f)
        limit = entry.resources[GPU].limit
        assert limit is None or usage[(q, f)] <= limit, (q, f, usage[(q, f)], limit)

    # The invariants that do not read quota hold as without flavors.
    for check in (check_nodes, check_gangs, check_report, check_inter_pod, check_volumes):
        assert check(snapshot, decisions) == [], check.__name__


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(snapshots())
def test_flavors_no_queue_lists_change_nothing(snapshot: Snapshot) -> None:
    """ResourceFlavors that no queue lists leave the decisions as they were."""
    assert schedule(replace(snapshot, flavors=FLAVORS)) == schedule(snapshot)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flavored_snapshots())
def test_running_pods_count_on_their_flavor_as_quota_vec_says(snapshot: Snapshot) -> None:
    """The running pods' queue usage, set by column at the start of a call (running._flavored_usage),
    is the sum of each pod's own ``quota_vec`` (its requests, its GPUs moved to its node's flavor)."""
    from gpufleet.engine.scheduler import Engine

    engine = Engine(snapshot)
    forest, quota = engine.forest, engine.quota
    want = [[0] * len(forest.managed) for _ in forest.queues]
    for info in engine.pods:
        if info.node is not None and info.gang >= 0 and info.queue >= 0:
            for q in forest.paths[info.queue]:
                want[q] = [u + v for u, v in zip(want[q], quota.quota_vec(info), strict=True)]
    assert [list(row) for row in forest.usage] == want


@st.composite
def preempting_flavored_snapshots(draw: st.DrawFn) -> Snapshot:
    """:func:`flavored_snapshots`, sometimes with consolidation on (its moves change running gangs'
    nodes, after which the victim walk per static mask is not used)."""
    from gpufleet.domain import ANNOTATION_CHECKPOINTED, Consolidation

    snapshot = draw(flavored_snapshots())
    if draw(st.booleans()):
        pods = tuple(replace(p, annotations={**p.annotations, ANNOTATION_CHECKPOINTED: "true"})
                     if p.node_name is not None and draw(st.booleans()) else p for p in snapshot.pods)
        latest = max([p.creation_time for p in pods] + [p.start_time or 0.0 for p in pods] + [0.0])
        snapshot = replace(snapshot, pods=pods, config=replace(
            snapshot.config, now=latest + 60.0, consolidation=Consolidation(enabled=True, gpus_per_move=0)))
    return snapshot


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(preempting_flavored_snapshots())
def test_the_victim_walk_per_static_mask_changes_no_decision(snapshot: Snapshot) -> None:
    """VictimIndex.walk_small_for (a single-pod preemptor walks only the gangs that can free room on
    its nodes) decides as the walk over every gang."""
    from gpufleet.engine.victims import VictimIndex

    fast = schedule(snapshot)
    VictimIndex.WALK_BY_MASK = False
    try:
        slow = schedule(snapshot)
    finally:
        VictimIndex.WALK_BY_MASK = True
    assert fast == slow


def test_the_victim_walk_per_static_mask_decides_as_the_whole_walk_on_the_preemption_shape() -> None:
    """The bench's preemption shape with two GPU models and the queue's quota split between them:
    each preemptor tries its first flavor's victims (the walk per static mask skips the others')."""
    from gpufleet.bench.shapes import RACK_LABEL, make_shape
    from gpufleet.domain import LABEL_GPU_PRODUCT
    from gpufleet.engine.victims import VictimIndex

    base = make_shape("preemption", 0.05)
    nodes = tuple(replace(n, labels={**n.labels, LABEL_GPU_PRODUCT: "ab"[int(n.labels[RACK_LABEL][5:]) % 2]})
                  for n in base.nodes)
    quota = base.queues[0].resources[GPU].quota or 0
    half = QueueResource(quota // 2)
    queue = replace(base.queues[0], resources={}, flavors=(QueueFlavor("fa", {GPU: half}), QueueFlavor("fb", {GPU: half})))
    flavors = (ResourceFlavor("fa", ((LABEL_GPU_PRODUCT, "a"),)), ResourceFlavor("fb", ((LABEL_GPU_PRODUCT, "b"),)))
    snapshot = replace(base, nodes=nodes, queues=(queue,), flavors=flavors)
    fast = schedule(snapshot)
    VictimIndex.WALK_BY_MASK = False
    try:
        slow = schedule(snapshot)
    finally:
        VictimIndex.WALK_BY_MASK = True
    assert len(fast.evictions) == 50
    assert fast == slow
