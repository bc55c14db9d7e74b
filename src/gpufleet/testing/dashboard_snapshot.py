"""A large cluster for the dashboard's tests and benchmark (``scripts/bench_dashboard.py``): by default
5,000 nodes of 8 GPUs in racks of 40 and pools of 4 racks, 200 queues (20 parents of 9 leaves), and
40,000 pods: 36,000 running (whole GPUs and fractional pairs) and 4,000 pending (gangs of 4 pods x
8 GPUs and lone 1-GPU pods), with unhealthy GPUs and cordoned nodes. Deterministic: no randomness."""

from __future__ import annotations

from gpufleet.domain import (
    GPU,
    LABEL_GPU_PRODUCT,
    LABEL_POOL,
    LABEL_RACK,
    MILLI,
    Node,
    NodeName,
    Pod,
    PodGroup,
    PriorityClass,
    Queue,
    QueueName,
    QueueResource,
    SchedulerConfig,
    Snapshot,
)

__all__ = ["big_snapshot"]

GIB = 2**30


def big_snapshot(nodes: int = 5000, parents: int = 20, leaves_per_parent: int = 9, gangs: int = 500,
                 lone_pending: int = 2000, filled_share: float = 0.9) -> Snapshot:
    """See the module text; the sizes scale with the arguments (tests use small ones)."""
    t0 = 1_767_225_600.0  # 2026-01-01
    models = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB")
    node_list: list[Node] = []
    for i in range(nodes):
        name = f"gpu-{i:05d}"
        rack = i // 40
        node_list.append(Node(
            name=NodeName(name),
            labels={"kubernetes.io/hostname": name, LABEL_RACK: f"rack-{rack:03d}", LABEL_POOL: f"pool-{rack // 4:02d}",
                    LABEL_GPU_PRODUCT: models[(rack // 4) % 2]},
            allocatable={GPU: 8 * MILLI, "cpu": 96 * MILLI, "memory": 1024 * GIB * MILLI, "pods": 110 * MILLI},
            unschedulable=i % 997 == 5,
            unhealthy_gpus=frozenset({7}) if i % 331 == 3 else frozenset(),
            nvlink_domains=((0, 1, 2, 3), (4, 5, 6, 7)),
            gpu_memory_mib=81920,
            gpu_product=models[(rack // 4) % 2],
        ))
    leaves: list[str] = []
    queues: list[Queue] = []
    leaf_quota = max(1, (nodes * 8) // (parents * leaves_per_parent))
    for p in range(parents):
        parent = f"org-{p:02d}"
        quota = leaf_quota * leaves_per_parent * MILLI
        queues.append(Queue(QueueName(parent), resources={GPU: QueueResource(quota=quota)}))
        for k in range(leaves_per_parent):
            leaf = f"{parent}-team-{k}"
            leaves.append(leaf)
            queues.append(Queue(QueueName(leaf), parent=QueueName(parent), weight=1.0 + k % 3,
                                resources={GPU: QueueResource(quota=leaf_quota * MILLI, limit=3 * leaf_quota * MILLI)}))
    pods: list[Pod] = []
    n = 0

    def pod(name: str, ns: str, queue: str, gpus: int = 0, blocks: int | None = None, node: str | None = None,
            index: tuple[int, ...] = (), group: str | None = None, user: int = 0) -> Pod:
        requests = {"cpu": 2 * MILLI, "memory": 8 * GIB * MILLI}
        if gpus:
            requests[GPU] = gpus * MILLI
        return Pod(namespace=ns, name=name, queue_label=QueueName(queue), group_label=group, requests=requests,
                   gpu_blocks=blocks, node_name=NodeName(node) if node else None, gpu_index=index,
                   phase="Running" if node else "Pending", creation_time=t0 + n, start_time=t0 + n if node else None,
                   priority_class_name="train", submitted_by=f"user-{user % 300:03d}")

    filled = int(nodes * filled_share)
    for i in range(filled):
        node = node_list[i].name
        for g in range(6):
            q = leaves[(i * 7 + g) % len(leaves)]
            ns = f"ns-{(i * 7 + g) % len(leaves) % 50:02d}"
            pods.append(pod(f"run-{i:05d}-{g}", ns, q, gpus=1, node=node, index=(g,), user=i + g))
            n += 1
        for s, blocks in enumerate((40, 30)):
            q = leaves[(i + s) % len(leaves)]
            pods.append(pod(f"frac-{i:05d}-{s}", f"ns-{(i + s) % len(leaves) % 50:02d}", q, blocks=blocks, node=node,
                            index=(6,), user=i + s))
            n += 1
    groups: list[PodGroup] = []
    for g in range(gangs):
        q = leaves[g % len(leaves)]
        ns = f"ns-{g % len(leaves) % 50:02d}"
        groups.append(PodGroup(ns, f"gang-{g:04d}", min_member=4, queue=QueueName(q)))
        for m in range(4):
            pods.append(pod(f"gang-{g:04d}-{m}", ns, q, gpus=8, group=f"gang-{g:04d}", user=g))
            n += 1
    for k in range(lone_pending):
        q = leaves[(k * 3) % len(leaves)]
        pods.append(pod(f"wait-{k:05d}", f"ns-{(k * 3) % len(leaves) % 50:02d}", q, gpus=1, user=k))
        n += 1
    config = SchedulerConfig(default_queue=QueueName(leaves[0]), topology_levels=(LABEL_RACK, "kubernetes.io/hostname"),
                             now=t0 + n + 3600)
    return Snapshot(nodes=tuple(node_list), pods=tuple(pods), queues=tuple(queues), pod_groups=tuple(groups),
                    priority_classes=(PriorityClass("train", 50),), config=config)
