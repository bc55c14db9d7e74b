"""The snapshot writer prints api.md's YAML, and the loader reads back what it was given."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gpufleet.adapters.k8s_yaml_writer import (
    dump_snapshot,
    format_quantity,
    format_time,
    snapshot_to_documents,
)
from gpufleet.bench.shapes import SHAPES, make_shape
from gpufleet.domain import (
    GPU,
    MILLI,
    LabelSelector,
    Namespace,
    Node,
    NodeName,
    Placement,
    Pod,
    PodAffinityTerm,
    PodGroup,
    PriorityClass,
    Queue,
    QueueName,
    QueueResource,
    SchedulerConfig,
    SelectorRequirement,
    SelectorTerm,
    Snapshot,
    SpreadConstraint,
    Taint,
    TaintEffect,
    Toleration,
    WithinQueue,
)

GIB = 1 << 30
T0 = 1767225600.0  # 2026-01-01T00:00:00Z
EXAMPLES = Path("/work/shared/spec/examples")

HAS_LOADER = importlib.util.find_spec("gpufleet.adapters.k8s_yaml") is not None
needs_loader = pytest.mark.skipif(not HAS_LOADER, reason="gpufleet.adapters.k8s_yaml is not written yet")


def load(text: str) -> Snapshot:
    from gpufleet.adapters import k8s_yaml

    loader: Callable[[str, str], Snapshot] = k8s_yaml.load_snapshot_text
    return loader(text, "<round-trip>")


def canonical(snapshot: Snapshot) -> Snapshot:
    """The snapshot with every collection sorted, so that document order does not matter."""
    return Snapshot(
        nodes=tuple(sorted(snapshot.nodes, key=lambda n: n.name)),
        pods=tuple(sorted(snapshot.pods, key=lambda p: p.key)),
        priority_classes=tuple(sorted(snapshot.priority_classes, key=lambda c: c.name)),
        queues=tuple(sorted(snapshot.queues, key=lambda q: q.name)),
        pod_groups=tuple(sorted(snapshot.pod_groups, key=lambda g: g.key)),
        config=snapshot.config,
        namespaces=tuple(sorted(snapshot.namespaces, key=lambda ns: ns.name)),
    )


def assert_round_trip(snapshot: Snapshot) -> None:
    back = canonical(load(dump_snapshot(snapshot)))
    want = canonical(snapshot)
    # Field by field first, for a readable failure.
    for kind in ("nodes", "pods", "priority_classes", "queues", "pod_groups", "namespaces"):
        got_items, want_items = getattr(back, kind), getattr(want, kind)
        assert len(got_items) == len(want_items), kind
        for got_item, want_item in zip(got_items, want_items, strict=True):
            assert got_item == want_item
    assert back.config == want.config
    assert back == want


def full_snapshot() -> Snapshot:
    """Every field of every object set, to values other than the defaults."""
    node = Node(
        name=NodeName("gpu-1"),
        labels={
            "kubernetes.io/hostname": "gpu-1",
            "topology.gpufleet.dev/rack": "r1",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.memory": "81920",
        },
        annotations={
            "gpufleet.dev/unhealthy-gpus": "3",
            "gpufleet.dev/nvlink-domains": "0-3;4-7",
            "example.com/owner": "infra",
        },
        allocatable={
            "cpu": 63500,
            "memory": (512 * GIB + 1) * MILLI,
            "pods": 110 * MILLI,
            GPU: 8 * MILLI,
            "nvidia.com/mig-1g.10gb": 7 * MILLI,
            "ephemeral-storage": 100 * GIB * MILLI,
        },
        taints=(
            Taint("nvidia.com/gpu", "unhealthy", TaintEffect.NO_SCHEDULE),
            Taint("dedicated", "", TaintEffect.NO_EXECUTE),
            Taint("soft", "x", TaintEffect.PREFER_NO_SCHEDULE),
        ),
        unschedulable=True,
        unhealthy_gpus=frozenset({3}),
        nvlink_domains=((0, 1, 2, 3), (4, 5, 6, 7)),
        gpu_memory_mib=81920,
        gpu_product="NVIDIA-H100-80GB-HBM3",
    )
    plain_node = Node(name=NodeName("cpu-1"), allocatable={"cpu": 16 * MILLI, "memory": 64 * GIB * MILLI})
    whole = Pod(
        namespace="ml",
        name="train-0",
        labels={
            "app": "llama",
            "gpufleet.dev/queue": "team-a",
            "gpufleet.dev/pod-group": "llama",
            "gpufleet.dev/preemptible": "false",
        },
        annotations={"gpufleet.dev/gpu-index": "0,1", "example.com/note": "hi"},
        requests={"cpu": 1500, "memory": 4 * GIB * MILLI, GPU: 2 * MILLI, "nvidia.com/mig-1g.10gb": MILLI},
        priority=50,
        priority_class_name="train",
        preemptible_label=False,
        queue_label=QueueName("team-a"),
        group_label="llama",
        node_name=NodeName("gpu-1"),
        phase="Running",
        creation_time=T0,
        start_time=T0 + 5,
        node_selector={"topology.gpufleet.dev/rack": "r1"},
        affinity=(
            SelectorTerm(
                expressions=(
                    SelectorRequirement("nvidia.com/gpu.product", "In", ("NVIDIA-H100-80GB-HBM3", "B")),
                    SelectorRequirement("spot", "DoesNotExist"),
                    SelectorRequirement("gpus", "Gt", ("4",)),
                ),
                fields=(SelectorRequirement("metadata.name", "NotIn", ("gpu-9",)),),
            ),
            SelectorTerm(expressions=(SelectorRequirement("zone", "Exists"),)),
        ),
        tolerations=(
            Toleration(None, "Exists", "", None),
            Toleration("nvidia.com/gpu", "Equal", "unhealthy", TaintEffect.NO_SCHEDULE),
            Toleration("dedicated", "Exists", "", TaintEffect.NO_EXECUTE),
        ),
        gpu_index=(0, 1),
        scheduling_gates=("example.com/a", "example.com/b"),
        host_ports=(("TCP", "0.0.0.0", 8080), ("UDP", "10.0.0.1", 53)),
        affinity_terms=(
            PodAffinityTerm("kubernetes.io/hostname", LabelSelector((("app", "cache"),)), ("ml", "infra")),
            PodAffinityTerm("zone", LabelSelector(), namespace_selector=LabelSelector(), weight=20),
        ),
        anti_affinity_terms=(
            PodAffinityTerm("kubernetes.io/hostname", LabelSelector(
                (("app", "llama"),), (SelectorRequirement("tier", "NotIn", ("x", "y")),
                                      SelectorRequirement("canary", "DoesNotExist")))),
        ),
        spread_constraints=(
            SpreadConstraint(2, "zone", "ScheduleAnyway", LabelSelector((("app", "llama"),))),
            SpreadConstraint(1, "kubernetes.io/hostname", "DoNotSchedule", None, 3, "Ignore", "Honor"),
        ),
        preferred_affinity=(
            (30, SelectorTerm(expressions=(SelectorRequirement("zone", "In", ("z1",)),))),
            (5, SelectorTerm(fields=(SelectorRequirement("metadata.name", "In", ("gpu-2",)),))),
        ),
    )
    blocks = Pod(
        namespace="ml",
        name="nb-1",
        labels={"gpufleet.dev/queue": "team-a", "gpufleet.dev/preemptible": "true"},
        annotations={"gpufleet.dev/gpu-blocks": "25", "gpufleet.dev/gpu-index": "4"},
        requests={"cpu": 500, "memory": 1536 * (1 << 20) * MILLI},
        gpu_blocks=25,
        priority=10,
        priority_class_name="low",
        preemptible_label=True,
        queue_label=QueueName("team-a"),
        node_name=NodeName("gpu-1"),
        phase="Pending",
        creation_time=T0 + 1,
        start_time=T0 + 2,
        gpu_index=(4,),
    )
    memory = Pod(
        namespace="dev",
        name="nb-2",
        labels={"gpufleet.dev/queue": "team-b"},
        annotations={"gpufleet.dev/gpu-memory": "20Gi"},
        requests={"cpu": 250},
        gpu_memory_bytes=20 * GIB,
        queue_label=QueueName("team-b"),
        creation_time=T0 + 3,
    )
    foreign = Pod(
        namespace="kube-system",
        name="dns",
        scheduler_name="default-scheduler",
        requests={"cpu": 100, "memory": 70 * (1 << 20) * MILLI},
        node_name=NodeName("cpu-1"),
        phase="Running",
        creation_time=T0 - 100,
        start_time=T0 - 99,
    )
    done = Pod(
        namespace="ml",
        name="old",
        labels={"gpufleet.dev/queue": "team-b"},
        requests={GPU: MILLI},
        queue_label=QueueName("team-b"),
        node_name=NodeName("gpu-1"),
        phase="Succeeded",
        creation_time=T0 - 50,
        start_time=T0 - 40,
    )
    return Snapshot(
        nodes=(node, plain_node),
        pods=(whole, blocks, memory, foreign, done),
        priority_classes=(
            PriorityClass("low", 10, global_default=True),
            PriorityClass("train", 50),
        ),
        queues=(
            Queue(name=QueueName("org"), resources={GPU: QueueResource(quota=6 * MILLI, limit=8 * MILLI)}),
            Queue(
                name=QueueName("team-a"),
                parent=QueueName("org"),
                weight=2.5,
                resources={
                    GPU: QueueResource(quota=4 * MILLI, limit=6 * MILLI, lending_limit=1500),
                    "cpu": QueueResource(quota=64 * MILLI),
                    "memory": QueueResource(limit=256 * GIB * MILLI),
                },
                reclaim_borrowed=False,
                within_queue=WithinQueue.NEVER,
            ),
            Queue(name=QueueName("team-b"), parent=QueueName("org"), weight=3.0),
            Queue(name=QueueName("default")),
        ),
        pod_groups=(
            PodGroup(
                namespace="ml",
                name="llama",
                min_member=1,
                queue=QueueName("team-a"),
                priority_class_name="train",
                topology_required="topology.gpufleet.dev/rack",
                topology_preferred="kubernetes.io/hostname",
            ),
        ),
        config=SchedulerConfig(
            default_queue=QueueName("default"),
            topology_levels=("topology.gpufleet.dev/rack", "kubernetes.io/hostname"),
            non_preemptible_priority=200,
            placement=Placement.SPREAD,
        ),
    )


@pytest.mark.parametrize(
    ("resource", "milli", "text"),
    [
        ("cpu", 64000, "64"),
        ("cpu", 500, "500m"),
        ("cpu", 1500, "1500m"),
        ("cpu", 0, "0"),
        ("memory", 512 * GIB * MILLI, "512Gi"),
        ("memory", 1536 * (1 << 20) * MILLI, "1536Mi"),
        ("memory", 1024 * MILLI, "1Ki"),
        ("memory", (512 * GIB + 1) * MILLI, "549755813889"),
        ("memory", 1000 * MILLI, "1000"),
        ("memory", 1, "1m"),
        ("ephemeral-storage", 100 * GIB * MILLI, "100Gi"),
        ("hugepages-2Mi", 2 * (1 << 20) * MILLI, "2Mi"),
        ("nvidia.com/gpu", 8000, "8"),
        ("nvidia.com/gpu", 250, "250m"),
        ("pods", 110000, "110"),
        ("nvidia.com/gpu", 1024 * MILLI, "1024"),  # counts never take a binary suffix
    ],
)
def test_format_quantity(resource: str, milli: int, text: str) -> None:
    assert format_quantity(resource, milli) == text


def test_format_time() -> None:
    assert format_time(T0) == "2026-01-01T00:00:00Z"
    assert format_time(T0 + 61.5) == "2026-01-01T00:01:01.500000Z"


def test_documents_have_the_kubectl_layout() -> None:
    docs = snapshot_to_documents(full_snapshot())
    kinds = [d["kind"] for d in docs]
    assert (
        kinds == ["SchedulerConfig"] + ["PriorityClass"] * 2 + ["Queue"] * 4 + ["Node"] * 2 + ["PodGroup"] + ["Pod"] * 5
    )
    node = docs[7]
    assert node["apiVersion"] == "v1"
    assert node["metadata"]["annotations"]["gpufleet.dev/nvlink-domains"] == "0-3;4-7"
    assert node["metadata"]["annotations"]["gpufleet.dev/unhealthy-gpus"] == "3"
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"][0] == {
        "key": "nvidia.com/gpu",
        "value": "unhealthy",
        "effect": "NoSchedule",
    }
    assert node["spec"]["taints"][1] == {"key": "dedicated", "effect": "NoExecute"}
    assert node["status"]["allocatable"] == {
        "cpu": "63500m",
        "memory": "549755813889",
        "pods": "110",
        "nvidia.com/gpu": "8",
        "nvidia.com/mig-1g.10gb": "7",
        "ephemeral-storage": "100Gi",
    }
    assert node["status"]["capacity"] == node["status"]["allocatable"]
    pod = docs[10]
    assert pod["metadata"]["creationTimestamp"] == "2026-01-01T00:00:00Z"
    assert pod["metadata"]["labels"]["gpufleet.dev/preemptible"] == "false"
    spec = pod["spec"]
    assert spec["schedulerName"] == "gpufleet"
    assert spec["nodeName"] == "gpu-1"
    assert spec["priorityClassName"] == "train" and spec["priority"] == 50
    resources = spec["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == "2"
    assert resources["requests"]["cpu"] == "1500m"
    assert resources["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchFields"] == [{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-9"]}]
    assert terms[1] == {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}
    assert spec["tolerations"][0] == {"operator": "Exists"}
    assert spec["tolerations"][1] == {
        "key": "nvidia.com/gpu",
        "operator": "Equal",
        "value": "unhealthy",
        "effect": "NoSchedule",
    }
    assert pod["status"] == {"phase": "Running", "startTime": "2026-01-01T00:00:05Z"}
    queue = docs[4]
    assert queue["spec"] == {
        "parent": "org",
        "weight": 2.5,
        "resources": {
            "nvidia.com/gpu": {"quota": "4", "limit": "6", "lendingLimit": "1500m"},
            "cpu": {"quota": "64"},
            "memory": {"limit": "256Gi"},
        },
        "preemption": {"reclaimBorrowed": False, "withinQueue": "Never"},
    }
    assert docs[0]["spec"] == {
        "defaultQueue": "default",
        "topologyLevels": ["topology.gpufleet.dev/rack", "kubernetes.io/hostname"],
        "nonPreemptiblePriority": 200,
        "placement": "spread",
    }
    assert docs[1] == {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "low"},
        "value": 10,
        "globalDefault": True,
    }
    assert docs[9]["spec"] == {
        "minMember": 1,
        "queue": "team-a",
        "priorityClassName": "train",
        "topology": {"required": "topology.gpufleet.dev/rack", "preferred": "kubernetes.io/hostname"},
    }


def test_dump_is_yaml_with_quoted_strings() -> None:
    text = dump_snapshot(full_snapshot())
    docs = list(yaml.safe_load_all(text))
    assert docs == snapshot_to_documents(full_snapshot())
    # Strings that look like numbers, booleans or timestamps stay strings.
    assert "nvidia.com/gpu.memory: '81920'" in text
    assert "creationTimestamp: '2026-01-01T00:00:00Z'" in text
    assert "gpufleet.dev/preemptible: 'true'" in text
    assert text.count("\n---\n") == len(docs) - 1


def test_typed_fields_win_over_raw_labels_and_annotations() -> None:
    pod = Pod(
        namespace="ml",
        name="p",
        labels={"gpufleet.dev/queue": "stale", "gpufleet.dev/pod-group": "gone", "keep": "1"},
        annotations={"gpufleet.dev/gpu-index": "7", "gpufleet.dev/gpu-memory": "20480Mi"},
        queue_label=QueueName("fresh"),
        gpu_index=(0, 2),
        gpu_memory_bytes=20 * GIB,
        gpu_blocks=30,
    )
    node = Node(
        name=NodeName("n"),
        labels={"nvidia.com/gpu.memory": "40960"},
        annotations={"gpufleet.dev/unhealthy-gpus": "1"},
        gpu_memory_mib=81920,
        nvlink_domains=((0, 2), (1, 3)),
    )
    docs = snapshot_to_documents(Snapshot(nodes=(node,), pods=(pod,)))
    pod_meta = docs[-1]["metadata"]
    assert pod_meta["labels"] == {"gpufleet.dev/queue": "fresh", "keep": "1"}
    assert pod_meta["annotations"] == {
        "gpufleet.dev/gpu-index": "0,2",
        "gpufleet.dev/gpu-memory": "20480Mi",  # equivalent raw text is kept as written
        "gpufleet.dev/gpu-blocks": "30",
    }
    assert "creationTimestamp" not in pod_meta
    assert "startTime" not in docs[-1]["status"]
    node_meta = docs[-2]["metadata"]
    assert node_meta["labels"] == {"nvidia.com/gpu.memory": "81920"}
    assert node_meta["annotations"] == {"gpufleet.dev/nvlink-domains": "0,2;1,3"}


def test_dump_is_deterministic() -> None:
    snapshot = make_shape("topology", 0.01)
    assert dump_snapshot(snapshot) == dump_snapshot(make_shape("topology", 0.01))


@needs_loader
def test_round_trip_of_every_field() -> None:
    assert_round_trip(full_snapshot())


@needs_loader
@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip_of_shapes(shape: str) -> None:
    assert_round_trip(make_shape(shape, 0.01))


@needs_loader
@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_round_trip_of_spec_examples(example: str) -> None:
    if not EXAMPLES.is_dir():
        pytest.skip("spec examples not available")
    snapshot = load((EXAMPLES / example).read_text(encoding="utf-8"))
    assert_round_trip(snapshot)


def test_round_trip_of_namespaces() -> None:
    namespaces = (Namespace("ml", {"team": "research", "kubernetes.io/metadata.name": "ml"}), Namespace("bare"))
    snapshot = Snapshot(nodes=(Node(NodeName("n1")),), namespaces=namespaces)
    assert [d["kind"] for d in snapshot_to_documents(snapshot)][-2:] == ["Namespace", "Namespace"]
    assert_round_trip(snapshot)
