"""The benchmark shapes have the structure they promise; the runner reports what it says."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from gpufleet.adapters import resolve_devices
from gpufleet.bench.shapes import (
    GPUS_PER_NODE,
    HOSTNAME_LABEL,
    RACK_LABEL,
    RACK_SIZE,
    SHAPES,
    make_shape,
    scaled,
)
from gpufleet.domain import (
    ANNOTATION_GPU_INDEX,
    GPU,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRODUCT,
    LABEL_POD_GROUP,
    LABEL_QUEUE,
    MILLI,
    Pod,
    PodGroup,
    Snapshot,
    WithinQueue,
)

SMALL = 0.02  # 100 nodes


def pending(snapshot: Snapshot) -> list[Pod]:
    return [p for p in snapshot.pods if p.ours and p.node_name is None]


def running(snapshot: Snapshot) -> list[Pod]:
    return [p for p in snapshot.pods if p.bound]


def gpus_used(snapshot: Snapshot) -> Counter[str]:
    used: Counter[str] = Counter()
    for pod in running(snapshot):
        assert pod.node_name is not None
        used[pod.node_name] += pod.whole_gpus
    return used


def members(snapshot: Snapshot) -> dict[str, list[Pod]]:
    by_group: dict[str, list[Pod]] = defaultdict(list)
    for pod in snapshot.pods:
        if pod.group_label is not None:
            by_group[f"{pod.namespace}/{pod.group_label}"].append(pod)
    return by_group


def check_gangs(snapshot: Snapshot, *, count: int, size: int, gpus: int) -> list[PodGroup]:
    groups = list(snapshot.pod_groups)
    assert len(groups) == count
    by_group = members(snapshot)
    assert set(by_group) == {g.key for g in groups}
    for group in groups:
        assert group.min_member == size
        pods = by_group[group.key]
        assert len(pods) == size
        assert all(p.whole_gpus == gpus and p.node_name is None for p in pods)
        assert {p.queue_label for p in pods} == {group.queue}
    return groups


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_is_consistent(shape: str) -> None:
    snapshot = resolve_devices(make_shape(shape, SMALL)).snapshot  # dra-basic: its GPUs come from slices
    node_names = [n.name for n in snapshot.nodes]
    assert len(node_names) == len(set(node_names)) == 100
    assert node_names == sorted(node_names)
    for node in snapshot.nodes:
        assert node.gpu_count == GPUS_PER_NODE
        assert node.labels[HOSTNAME_LABEL] == node.name
        assert node.labels[RACK_LABEL].startswith("rack-")
        assert node.labels[LABEL_GPU_PRODUCT] == node.gpu_product
        assert node.labels[LABEL_GPU_MEMORY] == str(node.gpu_memory_mib) == "81920"
    keys = [p.key for p in snapshot.pods]
    assert len(keys) == len(set(keys))
    leaves = {q.name for q in snapshot.queues} - {q.parent for q in snapshot.queues if q.parent}
    classes = {pc.name: pc.value for pc in snapshot.priority_classes}
    on_node: Counter[tuple[str, int]] = Counter()
    for pod in snapshot.pods:
        assert pod.ours
        assert pod.queue_label in leaves
        assert pod.labels[LABEL_QUEUE] == pod.queue_label
        assert pod.labels.get(LABEL_POD_GROUP) == pod.group_label
        assert pod.priority_class_name is not None
        assert classes[pod.priority_class_name] == pod.priority
        if pod.node_name is None:
            assert pod.phase == "Pending" and pod.gpu_index == () and pod.start_time is None
        else:
            assert pod.phase == "Running"
            assert pod.start_time is not None and pod.creation_time <= pod.start_time
            assert len(pod.gpu_index) == pod.whole_gpus
            assert pod.annotations[ANNOTATION_GPU_INDEX] == ",".join(map(str, pod.gpu_index))
            for index in pod.gpu_index:
                on_node[(pod.node_name, index)] += 1
    # No GPU is handed out twice, and every index exists on its node.
    assert all(count == 1 for count in on_node.values())
    assert all(0 <= index < GPUS_PER_NODE for _, index in on_node)
    assert snapshot.config.topology_levels == (RACK_LABEL, HOSTNAME_LABEL)


@pytest.mark.parametrize("shape", SHAPES)
def test_shapes_are_deterministic(shape: str) -> None:
    assert make_shape(shape, SMALL) == make_shape(shape, SMALL)


def test_scale_keeps_at_least_one_of_each() -> None:
    assert scaled(5000, 1e-9) == 1
    assert scaled(5000, 0.02) == 100
    for shape in SHAPES:
        snapshot = make_shape(shape, 1e-9)
        assert len(snapshot.nodes) == 1
        assert pending(snapshot)


def test_unknown_shape_and_bad_scale_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown shape"):
        make_shape("nope")
    with pytest.raises(ValueError, match="scale"):
        make_shape("basic", 0.0)


def test_full_scale_counts() -> None:
    expected = {  # shape: (pending pods, running pods, pod groups)
        "basic": (10_000, 1_000, 0),
        "gang-small": (3_000, 0, 1_000),
        "gang-large": (3_000, 0, 3),
        "preemption": (1_000, 40_000, 0),
        "topology": (3_000, None, 750),
        "affinity": (10_000, 1_000, 0),
        "basic-projects": (10_000, 1_000, 0),
        "dra-basic": (10_000, 1_000, 0),
        "queues-2000": (10_000, 0, 0),
        "stuck-gangs": (37_000, 4_625, 8_000),
    }
    for shape, (n_pending, n_running, n_groups) in expected.items():
        snapshot = make_shape(shape)
        assert len(snapshot.nodes) == 5_000
        assert len(pending(snapshot)) == n_pending
        if n_running is not None:
            assert len(running(snapshot)) == n_running
        assert len(snapshot.pod_groups) == n_groups


def test_basic() -> None:
    snapshot = make_shape("basic", SMALL)
    waiting = pending(snapshot)
    assert len(waiting) == 200
    assert len(running(snapshot)) == 20
    assert all(p.whole_gpus == 1 and p.group_label is None for p in snapshot.pods)
    assert all(p.requests["cpu"] == 1 * MILLI and p.requests["memory"] == 4 * 2**30 * MILLI for p in waiting)
    per_queue = Counter(p.queue_label for p in waiting)
    assert len(per_queue) == 4 and set(per_queue.values()) == {50}
    # Running pods are spread: no node holds two of them at this scale.
    assert max(gpus_used(snapshot).values()) == 1
    # A mix of queues within quota and borrowing, and everything fits in the cluster.
    quotas = {q.name: q.resources[GPU].quota for q in snapshot.queues if GPU in q.resources}
    usage = Counter(p.queue_label for p in snapshot.pods)
    within = {q for q, quota in quotas.items() if quota is not None and usage[q] * MILLI <= quota}
    assert 0 < len(within) < len(quotas)
    assert len(snapshot.pods) <= len(snapshot.nodes) * GPUS_PER_NODE


def test_gang_small() -> None:
    snapshot = make_shape("gang-small", SMALL)
    check_gangs(snapshot, count=20, size=3, gpus=2)
    assert not running(snapshot)
    assert len(snapshot.nodes) * GPUS_PER_NODE >= 20 * 3 * 2


def test_gang_large() -> None:
    snapshot = make_shape("gang-large", SMALL)
    groups = check_gangs(snapshot, count=3, size=20, gpus=8)
    assert len({g.queue for g in groups}) == 3
    # 3 x 20 whole nodes of the 100: all three gangs fit at once.
    assert len(snapshot.nodes) >= 3 * 20


def test_preemption_fills_every_node_with_low_priority_work() -> None:
    snapshot = make_shape("preemption", SMALL)
    classes = {pc.name: pc.value for pc in snapshot.priority_classes}
    threshold = snapshot.config.non_preemptible_priority
    low = running(snapshot)
    assert len(low) == 100 * GPUS_PER_NODE
    assert gpus_used(snapshot) == Counter({n.name: GPUS_PER_NODE for n in snapshot.nodes})
    assert {p.priority for p in low} == {classes["low"]} == {10}
    assert all(p.whole_gpus == 1 for p in low)
    start_times = [p.start_time for p in low]
    assert len(set(start_times)) == len(low)  # varying start times, no ties
    high = pending(snapshot)
    assert len(high) == 20
    assert {p.priority for p in high} == {classes["high"]} == {50}
    assert all(p.whole_gpus == 1 for p in high)
    # Both sides are preemptible by default, in one queue that preempts within itself.
    assert all(p.preemptible_label is None for p in snapshot.pods)
    assert 10 < 50 < threshold
    assert {p.queue_label for p in snapshot.pods} == {snapshot.queues[0].name}
    assert len(snapshot.queues) == 1
    assert snapshot.queues[0].within_queue is WithinQueue.LOWER_PRIORITY


@pytest.mark.parametrize("scale", [SMALL, 0.1, 1.0])
def test_topology_gangs_fit_in_racks_and_the_choice_matters(scale: float) -> None:
    snapshot = make_shape("topology", scale)
    n_groups = scaled(750, scale)
    groups = check_gangs(snapshot, count=n_groups, size=4, gpus=8)
    assert all(g.topology_required == RACK_LABEL for g in groups)
    racks: dict[str, list[str]] = defaultdict(list)
    for node in snapshot.nodes:
        racks[node.labels[RACK_LABEL]].append(node.name)
    assert all(len(names) == RACK_SIZE for names in list(racks.values())[:-1])
    used = gpus_used(snapshot)
    assert all(0 < gpus < GPUS_PER_NODE for gpus in used.values())
    free_nodes = {rack: sum(1 for n in names if n not in used) for rack, names in racks.items()}
    # Every gang fits: 4 free 8-GPU nodes of one rack each.
    assert sum(free // 4 for free in free_nodes.values()) >= n_groups
    # Racks differ in how full they are, so a placement has a choice to make.
    assert len(set(free_nodes.values())) > 1


def test_topology_at_full_scale_has_125_racks() -> None:
    snapshot = make_shape("topology")
    assert len({n.labels[RACK_LABEL] for n in snapshot.nodes}) == 125


def _engine_ready() -> bool:
    from gpufleet.engine import schedule

    try:
        schedule(Snapshot())
    except NotImplementedError:
        return False
    return True


def test_run_bench_reports_the_promised_keys() -> None:
    from gpufleet.bench.runner import run_bench

    if not _engine_ready():
        pytest.skip("the engine is not written yet")
    result = run_bench("basic", scale=0.004, repeat=3)
    assert set(result) == {"shape", "nodes", "pods", "seconds", "pods_per_second", "engine_seconds", "peak_rss_mib"}
    assert 0 <= result["engine_seconds"] <= result["seconds"]  # type: ignore[operator]
    assert result["shape"] == "basic"
    assert result["nodes"] == 20
    assert result["pods"] == len(pending(make_shape("basic", 0.004))) == 40
    seconds = result["seconds"]
    assert isinstance(seconds, float) and seconds > 0
    assert result["pods_per_second"] == pytest.approx(40 / seconds)
    peak = result["peak_rss_mib"]
    assert isinstance(peak, float) and peak > 1


def test_run_bench_rejects_bad_arguments() -> None:
    from gpufleet.bench.runner import run_bench

    with pytest.raises(ValueError, match="unknown shape"):
        run_bench("nope")
    with pytest.raises(ValueError, match="repeat"):
        run_bench("basic", scale=0.001, repeat=0)


def test_replay_vs_parse() -> None:
    pytest.importorskip("gpufleet.adapters.k8s_yaml")
    pytest.importorskip("gpufleet.adapters.output")
    if not _engine_ready():
        pytest.skip("the engine is not written yet")
    from gpufleet.bench.runner import replay_vs_parse

    result = replay_vs_parse(scale=0.004, repeat=1)
    assert set(result) == {
        "objects", "yaml_bytes", "json_bytes", "parse_seconds", "yaml_load_seconds", "json_load_seconds",
        "replay_seconds", "json_replay_seconds", "ratio", "json_speedup",
    }
    snapshot = make_shape("basic", 0.004)
    # SchedulerConfig + priority classes + queues + nodes + pods.
    assert result["objects"] == 1 + 1 + 6 + len(snapshot.nodes) + len(snapshot.pods)
    yaml_bytes = result["yaml_bytes"]
    assert isinstance(yaml_bytes, int) and yaml_bytes > 1000
    parse, replay = result["parse_seconds"], result["replay_seconds"]
    assert isinstance(parse, float) and isinstance(replay, float)
    assert result["ratio"] == pytest.approx(replay / parse)
    json_replay = result["json_replay_seconds"]
    assert isinstance(json_replay, float) and isinstance(result["json_bytes"], int)
    assert result["json_speedup"] == pytest.approx(parse / json_replay)


def test_dra_basic_decides_as_basic_and_allocates_the_bound_gpus() -> None:
    """The same cluster with its GPUs as DRA devices: the same bindings, and each binding's claim
    gets exactly the devices of the GPUs it was bound to."""
    from gpufleet.engine import schedule

    plain = schedule(make_shape("basic", SMALL))
    view = resolve_devices(make_shape("dra-basic", SMALL))
    dra = view.attach(schedule(view.snapshot))
    assert [(b.pod, b.node, b.gpus) for b in dra.bindings] == [(b.pod, b.node, b.gpus) for b in plain.bindings]
    assert [(p.pod, p.reason) for p in dra.pending] == [(p.pod, p.reason) for p in plain.pending]
    for b in dra.bindings:
        (alloc,) = b.devices
        assert alloc.claim == f"{b.pod.split('/')[1]}-gpu" and not alloc.shared
        assert [(r.pool, r.device) for r in alloc.results] == [(b.node, f"gpu-{g}") for g in b.gpus]


def test_queues_2000() -> None:
    snapshot = make_shape("queues-2000")
    parents = {q.parent for q in snapshot.queues if q.parent}
    leaves = [q for q in snapshot.queues if q.name not in parents]
    assert len(leaves) == 2_000 and len(snapshot.queues) == 2_000 + 200 + 10
    by_name = {q.name: q for q in snapshot.queues}
    assert all(by_name[by_name[q.parent].parent].parent is None for q in leaves if q.parent)  # 3 levels
    per_leaf = Counter(p.queue_label for p in snapshot.pods)
    assert set(per_leaf.values()) == {5}
    quotas = Counter(q.resources["nvidia.com/gpu"].quota // MILLI for q in leaves)
    assert set(quotas) == set(range(7))  # leaves that stay in quota (6 GPUs for 5 pods) and leaves that borrow


def test_stuck_gangs() -> None:
    snapshot = make_shape("stuck-gangs", SMALL)
    groups = check_gangs(snapshot, count=160, size=4, gpus=GPUS_PER_NODE)
    assert all(g.topology_required == RACK_LABEL for g in groups)
    busy = {p.node_name for p in running(snapshot)}
    racks = Counter(n.labels[RACK_LABEL] for n in snapshot.nodes if n.name not in busy)
    assert max(racks.values()) == 3  # no rack has the 4 whole nodes a gang needs
    assert len([p for p in pending(snapshot) if p.group_label is None]) == 100
