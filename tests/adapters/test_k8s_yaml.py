"""The Kubernetes YAML loader reads every object and field of api.md section 1 correctly."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpufleet.adapters.errors import InputError
from gpufleet.adapters.k8s_yaml import (
    load_config_file,
    load_config_text,
    load_snapshot_file,
    load_snapshot_text,
    validate_snapshot,
)
from gpufleet.adapters.quantity import to_milli
from gpufleet.domain import (
    GPU,
    AdmissionMode,
    Placement,
    Pod,
    PodGroup,
    Queue,
    QueueName,
    QueueResource,
    SchedulerConfig,
    SelectorRequirement,
    SelectorTerm,
    Snapshot,
    Taint,
    TaintEffect,
    Toleration,
    WithinQueue,
)

EXAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "spec" / "examples"
needs_examples = pytest.mark.skipif(not EXAMPLES.is_dir(), reason="spec examples not checked out")

GI = 1024**3 * 1000  # 1Gi in milli-units


def load(text: str) -> Snapshot:
    return load_snapshot_text(textwrap.dedent(text), "test.yaml")


def pod_yaml(body: str = "", meta: str = "", name: str = "p") -> str:
    """A minimal valid pod of ours, with extra spec/metadata lines (indented for the spot)."""
    return (
        "apiVersion: v1\nkind: Pod\nmetadata:\n"
        f"  name: {name}\n  namespace: ml\n{textwrap.indent(textwrap.dedent(meta), '  ')}"
        "spec:\n  schedulerName: gpufleet\n"
        f"{textwrap.indent(textwrap.dedent(body), '  ')}"
    )


CONTAINER = "containers: [{name: main, image: x, resources: {limits: {nvidia.com/gpu: '1'}}}]\n"


# ---------------------------------------------------------------------------------- quantities


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("8", 8000),
        ("500m", 500),
        ("1Gi", GI),
        ("80Gi", 80 * GI),
        ("1k", 1_000_000),
        ("1Ki", 1_024_000),
        ("1.5", 1500),
        ("0.1m", 1),  # finer than a milli: rounded up
        ("1.0001", 1001),
        ("1e3", 1_000_000),
        ("0", 0),
        ("+.5", 500),  # a sign before the point, as Kubernetes reads it
        ("+.5Gi", 512 * 1024 * 1024 * 1000),
        (2, 2000),  # a plain YAML number
        (0.25, 250),
    ],
)
def test_quantities_are_milli_units_rounded_up(text: str | int | float, milli: int) -> None:
    assert to_milli(text) == milli


# --------------------------------------------------------------------------------- the examples


@needs_examples
def test_reclaim_example() -> None:
    snap = load_snapshot_file(EXAMPLES / "reclaim.yaml")
    assert [n.name for n in snap.nodes] == ["gpu-node-1"]
    node = snap.nodes[0]
    assert node.allocatable == {"cpu": 64_000, "memory": 512 * GI, "pods": 110_000, GPU: 8000}
    assert node.gpu_count == 8
    assert node.gpu_memory_mib == 81920
    assert node.gpu_product == "NVIDIA-H100-80GB-HBM3"
    assert [(c.name, c.value) for c in snap.priority_classes] == [("train", 50)]
    assert snap.queues == (
        Queue(name=QueueName("team-a"), resources={GPU: QueueResource(quota=4000)}),
        Queue(name=QueueName("team-b"), resources={GPU: QueueResource(quota=4000)}),
    )
    pods: dict[str, Pod] = {p.key: p for p in snap.pods}
    assert list(pods) == ["ml/b-1", "ml/b-2", "ml/b-3", "ml/a-1"]
    b1 = pods["ml/b-1"]
    assert b1.ours and b1.bound and b1.phase == "Running"
    assert b1.requests == {GPU: 2000}
    assert b1.gpu_index == (0, 1)
    assert b1.node_name == "gpu-node-1"
    assert b1.queue_label == "team-b"
    assert b1.priority is None and b1.priority_class_name == "train"
    assert b1.start_time == 1767225610.0  # 2026-01-01T00:00:10Z
    assert b1.creation_time == 0.0
    a1 = pods["ml/a-1"]
    assert not a1.bound and a1.phase == "Pending" and a1.start_time is None
    assert a1.creation_time == 1767225660.0
    assert snap.config == SchedulerConfig()


@needs_examples
def test_gang_topology_example() -> None:
    snap = load_snapshot_file(str(EXAMPLES / "gang-topology.yaml"))
    assert len(snap.nodes) == 4 and len(snap.pods) == 8 and len(snap.priority_classes) == 7
    assert snap.pod_groups == (
        PodGroup(
            namespace="ml",
            name="llama",
            min_member=4,
            queue=QueueName("research"),
            topology_required="topology.gpufleet.dev/rack",
        ),
        PodGroup(namespace="ml", name="small", min_member=3, queue=QueueName("research")),
    )
    llama0 = next(p for p in snap.pods if p.name == "llama-0")
    assert llama0.group_label == "llama"
    assert llama0.priority == 50
    assert llama0.requests == {"cpu": 1000, "memory": 4 * GI, GPU: 4000}
    assert snap.nodes[0].labels["topology.gpufleet.dev/rack"] == "rack-a"


@needs_examples
def test_fractional_example() -> None:
    snap = load_snapshot_file(EXAMPLES / "fractional-and-inference.yaml")
    pods = {p.name: p for p in snap.pods}
    assert pods["nb-a"].gpu_blocks == 40 and pods["nb-a"].gpu_index == (0,)
    assert pods["nb-a"].is_fractional and pods["nb-a"].whole_gpus == 0
    assert pods["nb-b"].gpu_blocks == 30 and pods["nb-b"].gpu_index == ()
    assert pods["serve"].whole_gpus == 2 and pods["serve"].gpu_blocks is None
    assert [c.value for c in snap.priority_classes] == [10, 20, 30, 50, 75, 100, 125]


# -------------------------------------------------------------------------------------- Node


def test_node_fields() -> None:
    snap = load(
        """
        apiVersion: v1
        kind: Node
        metadata:
          name: n1
          labels: {nvidia.com/gpu.memory: "40960", nvidia.com/gpu.product: A100, rack: r1}
          annotations: {gpufleet.dev/unhealthy-gpus: "1,3", gpufleet.dev/nvlink-domains: "0-3;4-7"}
        spec:
          unschedulable: true
          taints:
          - {key: nvidia.com/gpu, value: unhealthy, effect: NoSchedule}
          - {key: dedicated, effect: PreferNoSchedule, timeAdded: "2026-01-01T00:00:00Z"}
          podCIDR: 10.0.0.0/24
        status:
          allocatable: {cpu: 7800m, memory: 60Gi, pods: "110", nvidia.com/gpu: "8", nvidia.com/mig-1g.10gb: "7"}
          capacity: {cpu: "8", memory: 64Gi}
        """
    )
    (node,) = snap.nodes
    assert node.name == "n1"
    assert node.allocatable == {
        "cpu": 7800,
        "memory": 60 * GI,
        "pods": 110_000,
        GPU: 8000,
        "nvidia.com/mig-1g.10gb": 7000,
    }
    assert node.unschedulable is True
    assert node.taints == (
        Taint("nvidia.com/gpu", "unhealthy", TaintEffect.NO_SCHEDULE),
        Taint("dedicated", "", TaintEffect.PREFER_NO_SCHEDULE),
    )
    assert node.unhealthy_gpus == frozenset({1, 3})
    assert node.nvlink_domains == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert node.gpu_memory_mib == 40960 and node.gpu_product == "A100"
    assert node.labels["rack"] == "r1"


def test_node_defaults_and_capacity_fallback() -> None:
    snap = load(
        """
        apiVersion: v1
        kind: Node
        metadata:
          name: n2
          annotations: {gpufleet.dev/unhealthy-gpus: "3", gpufleet.dev/nvlink-domains: "0,1;2,3"}
        status:
          capacity: {cpu: "4", nvidia.com/gpu: 4}
        """
    )
    (node,) = snap.nodes
    assert node.allocatable == {"cpu": 4000, GPU: 4000}
    assert node.unschedulable is False and node.taints == ()
    assert node.unhealthy_gpus == frozenset({3})
    assert node.nvlink_domains == ((0, 1), (2, 3))
    assert node.gpu_memory_mib is None and node.gpu_product is None


def test_node_without_status_has_nothing_allocatable() -> None:
    (node,) = load("apiVersion: v1\nkind: Node\nmetadata: {name: bare}\n").nodes
    assert node.allocatable == {} and node.gpu_count == 0


# --------------------------------------------------------------------------------------- Pod


def test_pod_defaults() -> None:
    snap = load(
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: web}
        spec:
          containers: [{name: c, image: nginx, resources: {requests: {cpu: 100m, memory: 64Mi}}}]
        """
    )
    (pod,) = snap.pods
    assert pod.key == "default/web"
    assert pod.scheduler_name == "default-scheduler" and not pod.ours
    assert pod.phase == "Pending" and pod.node_name is None and not pod.bound
    assert pod.creation_time == 0.0 and pod.start_time is None
    assert pod.requests == {"cpu": 100, "memory": 64 * 1024**2 * 1000}
    assert pod.priority is None and pod.priority_class_name is None
    assert pod.preemptible_label is None and pod.queue_label is None and pod.group_label is None
    assert pod.gpu_blocks is None and pod.gpu_memory_bytes is None
    assert pod.node_selector == {} and pod.affinity == () and pod.tolerations == ()
    assert pod.labels == {} and pod.annotations == {}


def test_pod_effective_requests_follow_kubernetes_rules() -> None:
    snap = load(
        pod_yaml(
            """
            containers:
            - name: a      # request wins over limit; limit stands in for a missing request
              resources:
                requests: {cpu: "1"}
                limits: {cpu: "2", memory: 1Gi, nvidia.com/gpu: "2"}
            - name: b      # extended resources come from limits, requests when limits are missing
              resources:
                requests: {cpu: 500m, memory: 1Gi, nvidia.com/mig-1g.10gb: "1", pods: "1"}
            - name: c
            initContainers:
            - name: init   # bigger than the containers' sum for cpu only
              resources: {requests: {cpu: "4", memory: 1Gi}}
            overhead: {cpu: 250m}
            """
        )
    )
    (pod,) = snap.pods
    assert pod.requests == {
        "cpu": 4000 + 250,
        "memory": 2 * GI,
        GPU: 2000,
        "nvidia.com/mig-1g.10gb": 1000,
    }
    assert "pods" not in pod.requests


def test_pod_sidecar_init_containers_add_up() -> None:
    snap = load(
        pod_yaml(
            """
            containers: [{name: main, resources: {requests: {cpu: "1"}}}]
            initContainers:
            - {name: proxy, restartPolicy: Always, resources: {requests: {cpu: 500m}}}
            - {name: setup, resources: {requests: {cpu: "2"}}}
            """
        )
    )
    # running: 1 + 0.5 (sidecar); while "setup" runs: 2 + 0.5 -> 2.5 wins
    assert snap.pods[0].requests == {"cpu": 2500}


def test_pod_fields() -> None:
    snap = load(
        pod_yaml(
            """
            containers: [{name: main, resources: {limits: {nvidia.com/gpu: "2"}}}]
            priority: 1000
            priorityClassName: build
            nodeName: n1
            nodeSelector: {rack: r1, gpu: true}
            affinity:
              nodeAffinity:
                requiredDuringSchedulingIgnoredDuringExecution:
                  nodeSelectorTerms:
                  - matchExpressions:
                    - {key: zone, operator: In, values: [a, b]}
                    - {key: gen, operator: Gt, values: ["3"]}
                    - {key: spot, operator: DoesNotExist}
                  - matchFields:
                    - {key: metadata.name, operator: NotIn, values: [n9]}
                preferredDuringSchedulingIgnoredDuringExecution: []
            tolerations:
            - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
            - {key: team, value: ml}
            - {operator: Exists}
            - {key: x, operator: Equal, value: y, effect: NoExecute, tolerationSeconds: 30}
            """,
            meta="""
            labels: {gpufleet.dev/queue: team-a, gpufleet.dev/pod-group: g1, gpufleet.dev/preemptible: "false"}
            annotations: {gpufleet.dev/gpu-index: "4,5"}
            creationTimestamp: "2026-01-01T00:00:00Z"
            """,
        )
        + "status: {phase: Running, startTime: '2026-01-01T01:00:00+01:00'}\n"
        + "---\napiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: team-a}\n"
    )
    (pod,) = snap.pods
    assert pod.ours and pod.bound and pod.phase == "Running"
    assert pod.priority == 1000 and pod.priority_class_name == "build"
    assert pod.node_name == "n1" and pod.gpu_index == (4, 5)
    assert pod.queue_label == "team-a" and pod.group_label == "g1" and pod.preemptible_label is False
    assert pod.creation_time == 1767225600.0 and pod.start_time == 1767225600.0
    assert pod.node_selector == {"rack": "r1", "gpu": "true"}
    assert pod.affinity == (
        SelectorTerm(
            expressions=(
                SelectorRequirement("zone", "In", ("a", "b")),
                SelectorRequirement("gen", "Gt", ("3",)),
                SelectorRequirement("spot", "DoesNotExist", ()),
            )
        ),
        SelectorTerm(fields=(SelectorRequirement("metadata.name", "NotIn", ("n9",)),)),
    )
    assert pod.tolerations == (
        Toleration("nvidia.com/gpu", "Exists", "", TaintEffect.NO_SCHEDULE),
        Toleration("team", "Equal", "ml", None),
        Toleration(None, "Exists", "", None),
        Toleration("x", "Equal", "y", TaintEffect.NO_EXECUTE),
    )


def test_pod_fractional_annotations() -> None:
    snap = load(
        pod_yaml(
            "containers: [{name: main}]\n",
            meta="annotations: {gpufleet.dev/gpu-blocks: '25', gpufleet.dev/gpu-memory: 20Gi}\n",
            name="frac",
        )
        + "---\n"
        + pod_yaml(
            "containers: [{name: main}]\n",
            meta="annotations: {gpufleet.dev/gpu-memory: 1.5Gi}\n",
            name="mem",
        )
        + "---\n"
        + pod_yaml(
            "containers: [{name: main}]\n",
            meta="labels: {gpufleet.dev/preemptible: 'true'}\nannotations: {gpufleet.dev/gpu-blocks: 100}\n",
            name="full",
        )
    )
    frac, mem, full = snap.pods
    assert frac.gpu_blocks == 25 and frac.gpu_memory_bytes == 20 * 1024**3
    assert mem.gpu_blocks is None and mem.gpu_memory_bytes == 3 * 1024**3 // 2
    assert full.gpu_blocks == 100 and full.preemptible_label is True
    assert full.requests == {}


def test_gpu_index_is_only_read_on_bound_pods() -> None:
    snap = load(pod_yaml(CONTAINER, meta="annotations: {gpufleet.dev/gpu-index: 'stale'}\n"))
    assert snap.pods[0].gpu_index == ()


def test_unquoted_yaml_timestamps_and_numbers() -> None:
    snap = load(
        pod_yaml(
            CONTAINER,
            meta="creationTimestamp: 2026-01-01T00:00:30Z\nannotations: {gpufleet.dev/gpu-index: 7}\n",
        )
        + "  nodeName: n1\nstatus: {startTime: 2026-01-01 00:01:00}\n"
    )
    (pod,) = snap.pods
    assert pod.creation_time == 1767225630.0 and pod.start_time == 1767225660.0
    assert pod.gpu_index == (7,)


# ------------------------------------------------------------------ PriorityClass and our CRDs


def test_priority_class() -> None:
    snap = load(
        """
        apiVersion: scheduling.k8s.io/v1
        kind: PriorityClass
        metadata: {name: high}
        value: 1000
        globalDefault: true
        preemptionPolicy: Never
        description: important
        """
    )
    ((pc),) = snap.priority_classes
    assert (pc.name, pc.value, pc.global_default) == ("high", 1000, True)


def test_queue_all_fields_and_defaults() -> None:
    snap = load(
        """
        apiVersion: gpufleet.dev/v1alpha1
        kind: Queue
        metadata: {name: research}
        ---
        apiVersion: gpufleet.dev/v1alpha1
        kind: Queue
        metadata: {name: team-a, labels: {x: y}}
        spec:
          parent: research
          weight: 2.5
          resources:
            nvidia.com/gpu: {quota: "8", limit: "16", lendingLimit: "4"}
            cpu: {quota: "64"}
            memory: {limit: 1Ti}
          preemption: {reclaimBorrowed: false, withinQueue: Never}
        """
    )
    research, team_a = snap.queues
    assert research == Queue(name=QueueName("research"))
    assert research.weight == 1.0 and research.reclaim_borrowed is True
    assert research.within_queue is WithinQueue.LOWER_PRIORITY
    assert team_a.parent == "research"
    assert team_a.weight == 2.5
    assert team_a.resources == {
        GPU: QueueResource(quota=8000, limit=16000, lending_limit=4000),
        "cpu": QueueResource(quota=64000),
        "memory": QueueResource(limit=1024 * GI),
    }
    assert team_a.reclaim_borrowed is False and team_a.within_queue is WithinQueue.NEVER


def test_pod_group() -> None:
    snap = load(
        """
        apiVersion: gpufleet.dev/v1alpha1
        kind: PodGroup
        metadata: {name: g, namespace: ml}
        spec:
          minMember: 2
          priorityClassName: train
          topology: {required: block, preferred: rack}
        ---
        apiVersion: gpufleet.dev/v1alpha1
        kind: PodGroup
        metadata: {name: g}
        spec: {minMember: 1}
        """
    )
    assert snap.pod_groups == (
        PodGroup("ml", "g", 2, None, "train", "block", "rack"),
        PodGroup("default", "g", 1),
    )
    assert snap.pod_groups[1].key == "default/g"


CONFIG = """\
apiVersion: gpufleet.dev/v1alpha1
kind: SchedulerConfig
metadata: {name: default}
spec:
  defaultQueue: batch
  topologyLevels: [block, rack, kubernetes.io/hostname]
  nonPreemptiblePriority: 500
  placement: spread
"""


def test_scheduler_config_in_snapshot() -> None:
    snap = load(CONFIG)
    assert snap.config == SchedulerConfig(
        default_queue=QueueName("batch"),
        topology_levels=("block", "rack", "kubernetes.io/hostname"),
        non_preemptible_priority=500,
        placement=Placement.SPREAD,
    )
    assert isinstance(snap.config.placement, Placement)


def test_config_file_wins_over_snapshot(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\nspec: {placement: binpack}\n")
    config = load_config_file(cfg)
    assert config == SchedulerConfig(placement=Placement.BINPACK)
    snap_file = tmp_path / "snap.yaml"
    snap_file.write_text(CONFIG)
    assert load_snapshot_file(snap_file).config.default_queue == "batch"
    assert load_snapshot_file(snap_file, config=config).config == config


def test_admission_mode_reads_pods_by_default_and_suspend() -> None:
    head = "apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\nspec: "
    assert load_config_text(head + "{}\n", "cfg.yaml").admission is AdmissionMode.PODS
    assert load_config_text(head + "{admission: suspend}\n", "cfg.yaml").admission is AdmissionMode.SUSPEND
    with pytest.raises(InputError, match=r"admission"):
        load_config_text(head + "{admission: later}\n", "cfg.yaml")


def test_config_file_needs_a_scheduler_config() -> None:
    with pytest.raises(InputError, match=r"^cfg.yaml: no SchedulerConfig document found$"):
        load_config_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n", "cfg.yaml")


# -------------------------------------------------------------------------- document structure


def test_list_multi_document_and_ignored_kinds() -> None:
    text = """
    apiVersion: v1
    kind: List
    items:
    - {apiVersion: v1, kind: Node, metadata: {name: n1}}
    - {apiVersion: v1, kind: Namespace, metadata: {name: ml}}
    - {apiVersion: scheduling.volcano.sh/v1beta1, kind: Queue, metadata: {name: volcano}, spec: {weight: x}}
    - apiVersion: v1
      kind: List
      items: [{apiVersion: v1, kind: Node, metadata: {name: n3}}]
    metadata: {resourceVersion: ""}
    ---
    ---
    # only a comment
    ---
    apiVersion: v1
    kind: Service
    metadata: {name: svc}
    ---
    apiVersion: v1
    kind: Node
    metadata: {name: n2}
    """
    snap = load(text)
    assert [n.name for n in snap.nodes] == ["n1", "n3", "n2"]
    assert snap.queues == () and snap.pods == ()
    assert load("") == Snapshot()
    assert load("# nothing\n") == Snapshot()


def test_objects_are_tuples_in_input_order() -> None:
    snap = load("\n---\n".join(f"{{apiVersion: v1, kind: Node, metadata: {{name: n{i}}}}}" for i in (3, 1, 2)))
    assert isinstance(snap.nodes, tuple)
    assert [n.name for n in snap.nodes] == ["n3", "n1", "n2"]


def test_default_queue_may_be_missing_but_named_queues_must_exist() -> None:
    # no label -> default queue, and "default" may be missing; naming it explicitly is fine too
    snap = load(pod_yaml(CONTAINER, name="a") + "---\n" + pod_yaml(CONTAINER, "labels: {gpufleet.dev/queue: default}\n", "b"))
    assert [p.queue_label for p in snap.pods] == [None, "default"]
    # a finished pod or another scheduler's pod naming a missing queue is not checked
    finished = pod_yaml(CONTAINER, "labels: {gpufleet.dev/queue: gone}\n") + "status: {phase: Succeeded}\n"
    assert load(finished).pods[0].finished
    theirs = pod_yaml(CONTAINER, "labels: {gpufleet.dev/queue: gone}\n").replace("gpufleet\n", "other\n")
    assert not load(theirs).pods[0].ours


def test_pod_group_smaller_than_min_member_is_valid() -> None:
    snap = load(
        "apiVersion: gpufleet.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g, namespace: ml}\n"
        "spec: {minMember: 8}\n---\n" + pod_yaml(CONTAINER, "labels: {gpufleet.dev/pod-group: g}\n")
    )
    assert snap.pod_groups[0].min_member == 8 and len(snap.pods) == 1


def test_validate_snapshot_on_domain_objects_names_the_object() -> None:
    snap = Snapshot(queues=(Queue(QueueName("a"), parent=QueueName("b")), Queue(QueueName("b"), parent=QueueName("a"))))
    with pytest.raises(InputError) as err:
        validate_snapshot(snap, "generated")
    assert str(err.value) == "generated: Queue a: spec.parent: cycle in the queue tree: a -> b -> a"
    validate_snapshot(Snapshot(), "empty")  # nothing to complain about



def test_the_config_carries_the_snapshots_time() -> None:
    snap = load_snapshot_text(
        "apiVersion: gpufleet.dev/v1alpha1\nkind: SchedulerConfig\nspec: {now: '2026-11-25T01:00:00Z'}\n", "t.yaml")
    assert snap.config.now == 1795568400.0
    assert load_snapshot_text("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n", "t.yaml").config.now is None
