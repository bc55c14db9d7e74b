"""Benchmark cluster shapes, after Kubernetes' scheduler_perf workloads.

Each shape is built directly as domain objects (no YAML), deterministically, in well under a
second or two at full size. At ``scale=1.0``:

- ``basic``: 5,000 nodes of 8 GPUs; 1,000 running 1-GPU pods; 10,000 pending 1-GPU pods over
  4 leaf queues (two of them within quota, two partly borrowing).
- ``gang-small``: 5,000 nodes; 1,000 gangs of 3 pods of 2 GPUs (minMember 3).
- ``gang-large``: 5,000 nodes; 3 gangs of 1,000 pods of 8 GPUs (minMember 1,000): 24,000 of the
  40,000 GPUs.
- ``preemption``: 5,000 nodes full of 40,000 running low-priority 1-GPU pods; 1,000 pending
  higher-priority (still preemptible) 1-GPU pods of the same queue, each of which must preempt.
- ``topology``: 5,000 nodes in racks of 40; 750 gangs of 4 pods of 8 GPUs that must stay in one
  rack; every other rack is partly used by running pods, so the choice of rack matters.
- ``affinity``: 5,000 nodes in 10 zones; 1,000 running 1-GPU pods; 10,000 pending 1-GPU pods of
  40 apps: half with a required anti-affinity to their own app over hostnames, half with two
  DoNotSchedule spread constraints (maxSkew 1) over zones and hostnames (kube-scheduler's
  scheduler_perf runs such workloads, inter-pod affinity its slowest plugin).
- ``basic-projects``: ``basic`` with 50 Projects: every pod in one of 50 namespaces, each the
  namespace of one Project that lists the four leaf queues and the pods' PriorityClass, and may
  use two of ten node pools (every node is in one pool, by its ``gpufleet.dev/pool`` label), so
  node-pool rules apply to every pod (issue 10: within 10% of ``basic``).
- ``dra-basic``: ``basic`` with its GPUs as DRA devices (issue 11: within 20% of ``basic``): every
  node publishes a ResourceSlice of 8 GPU devices of NVIDIA's driver and no ``nvidia.com/gpu``;
  every pod asks for its GPU through its own ResourceClaim (made from the template
  ``single-gpu``, class ``gpu.nvidia.com`` with NVIDIA's CEL selector); the running pods' claims
  are allocated and reserved for them.

- ``queues-2000``: 5,000 nodes; 10,000 pending 1-GPU pods spread over the 2,000 leaves of a
  3-level queue tree (10 organisations x 20 departments x 10 teams; team quotas of 0 to 6 GPUs
  and weights 1 to 3, every other organisation capped at half its teams' quotas), so the fair
  order switches between in-quota heads and borrowing ones (issue 13).
- ``stuck-gangs``: 5,000 nodes in racks of 40, each rack with 37 nodes running a 1-GPU pod;
  8,000 gangs of 4 pods of 8 GPUs that must stay in one rack (none can: a rack has 3 whole
  nodes free) and 5,000 pending 1-GPU pods that fit (issue 13).

``scale`` shrinks node and pod counts proportionally (at least 1 of each). The labels and
annotations of every object agree with its typed fields, so a shape survives a YAML round trip.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from gpufleet.domain import (
    ANNOTATION_GPU_INDEX,
    CPU,
    GPU,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRODUCT,
    LABEL_POD_GROUP,
    LABEL_POOL,
    LABEL_QUEUE,
    MEMORY,
    MILLI,
    PODS,
    ClaimTemplate,
    Device,
    DeviceClass,
    DeviceRequest,
    DeviceResult,
    LabelSelector,
    Node,
    NodeName,
    NodePool,
    Pod,
    PodAffinityTerm,
    PodClaim,
    PodGroup,
    PriorityClass,
    Project,
    Queue,
    QueueName,
    QueueResource,
    ResourceClaim,
    ResourceSlice,
    SchedulerConfig,
    Snapshot,
    SpreadConstraint,
    WithinQueue,
)
from gpufleet.domain import LABEL_RACK as RACK_LABEL

__all__ = [
    "BASE_TIME",
    "GPUS_PER_NODE",
    "HOSTNAME_LABEL",
    "NAMESPACE",
    "RACK_LABEL",
    "RACK_SIZE",
    "SHAPES",
    "ZONE_LABEL",
    "make_shape",
    "scaled",
]

SHAPES: tuple[str, ...] = ("basic", "gang-small", "gang-large", "preemption", "topology", "affinity",
                           "basic-projects", "dra-basic", "queues-2000", "stuck-gangs")

HOSTNAME_LABEL = "kubernetes.io/hostname"
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"
GPU_MEMORY_MIB = 81920
GPUS_PER_NODE = 8
RACK_SIZE = 40
NAMESPACE = "bench"
BASE_TIME = 1767225600.0  # 2026-01-01T00:00:00Z

GIB = 1 << 30
NODE_ALLOCATABLE: Mapping[str, int] = {
    CPU: 64 * MILLI,
    MEMORY: 512 * GIB * MILLI,
    PODS: 110 * MILLI,
    GPU: GPUS_PER_NODE * MILLI,
}

LOW = PriorityClass("low", 10)
HIGH = PriorityClass("high", 50)
TRAIN = PriorityClass("train", 50)

LEAF_QUEUES: tuple[QueueName, ...] = (
    QueueName("team-a"),
    QueueName("team-b"),
    QueueName("team-c"),
    QueueName("team-d"),
)
_PARENT_OF: Mapping[QueueName, QueueName] = {
    QueueName("team-a"): QueueName("research"),
    QueueName("team-b"): QueueName("research"),
    QueueName("team-c"): QueueName("product"),
    QueueName("team-d"): QueueName("product"),
}

# Shared, never mutated: thousands of pods point at the same few mappings to keep building fast.
_EMPTY: Mapping[str, str] = {}


def scaled(count: int, scale: float) -> int:
    """``count`` shrunk by ``scale``, at least 1."""
    return max(1, round(count * scale))


def _requests(gpus: int) -> Mapping[str, int]:
    return {CPU: 1 * MILLI, MEMORY: 4 * GIB * MILLI, GPU: gpus * MILLI}


def _nodes(count: int, *, racks: bool = True) -> tuple[Node, ...]:
    width = max(5, len(str(count - 1)))
    nodes: list[Node] = []
    for i in range(count):
        name = NodeName(f"node-{i:0{width}d}")
        labels = {
            HOSTNAME_LABEL: name,
            LABEL_GPU_PRODUCT: GPU_PRODUCT,
            LABEL_GPU_MEMORY: str(GPU_MEMORY_MIB),
        }
        if racks:
            labels[RACK_LABEL] = f"rack-{i // RACK_SIZE:03d}"
        nodes.append(
            Node(
                name=name,
                labels=labels,
                allocatable=NODE_ALLOCATABLE,
                gpu_memory_mib=GPU_MEMORY_MIB,
                gpu_product=GPU_PRODUCT,
            )
        )
    return tuple(nodes)


def _leaf_queues(quota_gpus: Mapping[QueueName, int]) -> tuple[Queue, ...]:
    """Two parents (research, product) of two leaves each; the leaves carry the GPU quotas."""
    parents = tuple(Queue(name=QueueName(name)) for name in ("product", "research"))
    leaves = tuple(
        Queue(
            name=leaf,
            parent=_PARENT_OF[leaf],
            resources={GPU: QueueResource(quota=quota_gpus[leaf] * MILLI)},
        )
        for leaf in LEAF_QUEUES
    )
    return parents + leaves


def _gpu_index_annotations() -> list[Mapping[str, str]]:
    return [{ANNOTATION_GPU_INDEX: str(i)} for i in range(GPUS_PER_NODE)]


def _queue_labels() -> dict[QueueName, Mapping[str, str]]:
    return {q: {LABEL_QUEUE: q} for q in LEAF_QUEUES}


def _config() -> SchedulerConfig:
    return SchedulerConfig(topology_levels=(RACK_LABEL, HOSTNAME_LABEL))


def _running_pod(
    name: str,
    queue: QueueName,
    labels: Mapping[str, str],
    node: Node,
    gpus: tuple[int, ...],
    annotations: Mapping[str, str],
    klass: PriorityClass,
    start: float,
    age: float,
) -> Pod:
    """A pod of ours running on ``node`` since ``start``, created ``age`` seconds before that."""
    return Pod(
        namespace=NAMESPACE,
        name=name,
        labels=labels,
        annotations=annotations,
        requests=_requests(len(gpus)),
        priority=klass.value,
        priority_class_name=klass.name,
        queue_label=queue,
        node_name=node.name,
        phase="Running",
        creation_time=start - age,
        start_time=start,
        gpu_index=gpus,
    )


def _pending_pod(
    name: str,
    queue: QueueName,
    labels: Mapping[str, str],
    gpus: int,
    klass: PriorityClass,
    created: float,
    group: str | None = None,
) -> Pod:
    return Pod(
        namespace=NAMESPACE,
        name=name,
        labels=labels,
        annotations=_EMPTY,
        requests=_requests(gpus),
        priority=klass.value,
        priority_class_name=klass.name,
        queue_label=queue,
        group_label=group,
        creation_time=created,
    )


def _basic(scale: float) -> Snapshot:
    nodes = _nodes(scaled(5000, scale))
    n_nodes = len(nodes)
    queue_labels = _queue_labels()
    gpu_index = _gpu_index_annotations()
    pods: list[Pod] = []

    # Running pods: node (i * stride) mod n visits every node once before any repeats.
    stride = 7919 if n_nodes % 7919 else 1
    used = [0] * n_nodes
    n_running = min(scaled(1000, scale), n_nodes * GPUS_PER_NODE)
    for i in range(n_running):
        node = (i * stride) % n_nodes
        index = used[node]
        used[node] += 1
        queue = LEAF_QUEUES[i % len(LEAF_QUEUES)]
        start = BASE_TIME - 3600.0 + i
        pods.append(
            _running_pod(
                f"run-{i:05d}", queue, queue_labels[queue], nodes[node], (index,), gpu_index[index], TRAIN, start, 1.0
            )
        )

    for i in range(scaled(10000, scale)):
        queue = LEAF_QUEUES[i % len(LEAF_QUEUES)]
        pods.append(_pending_pod(f"job-{i:05d}", queue, queue_labels[queue], 1, TRAIN, BASE_TIME + i))

    # Each leaf asks for ~2,750 GPUs: team-a and team-b stay within quota, team-c and team-d
    # borrow beyond theirs. The quotas add up to 11,000 of the 40,000 GPUs.
    quotas = {
        LEAF_QUEUES[0]: scaled(4000, scale),
        LEAF_QUEUES[1]: scaled(4000, scale),
        LEAF_QUEUES[2]: scaled(2000, scale),
        LEAF_QUEUES[3]: scaled(1000, scale),
    }
    return Snapshot(
        nodes=nodes,
        pods=tuple(pods),
        priority_classes=(TRAIN,),
        queues=_leaf_queues(quotas),
        config=_config(),
    )


def _gangs(
    *,
    n_groups: int,
    group_size: int,
    gpus: int,
    name: Callable[[int], str],
    topology_required: str | None = None,
) -> tuple[list[PodGroup], list[Pod]]:
    """``n_groups`` gangs of ``group_size`` pending pods of ``gpus`` GPUs, round robin over the leaves."""
    groups: list[PodGroup] = []
    pods: list[Pod] = []
    for g in range(n_groups):
        queue = LEAF_QUEUES[g % len(LEAF_QUEUES)]
        group_name = name(g)
        groups.append(
            PodGroup(
                namespace=NAMESPACE,
                name=group_name,
                min_member=group_size,
                queue=queue,
                topology_required=topology_required,
            )
        )
        labels = {LABEL_QUEUE: queue, LABEL_POD_GROUP: group_name}
        created = BASE_TIME + g
        width = len(str(group_size - 1))
        for p in range(group_size):
            pods.append(_pending_pod(f"{group_name}-{p:0{width}d}", queue, labels, gpus, TRAIN, created, group_name))
    return groups, pods


def _even_quotas(total_gpus: int) -> dict[QueueName, int]:
    share = max(1, total_gpus // len(LEAF_QUEUES))
    return dict.fromkeys(LEAF_QUEUES, share)


def _gang_small(scale: float) -> Snapshot:
    nodes = _nodes(scaled(5000, scale))
    groups, pods = _gangs(n_groups=scaled(1000, scale), group_size=3, gpus=2, name=lambda g: f"small-{g:04d}")
    return Snapshot(
        nodes=nodes,
        pods=tuple(pods),
        priority_classes=(TRAIN,),
        queues=_leaf_queues(_even_quotas(len(nodes) * GPUS_PER_NODE)),
        pod_groups=tuple(groups),
        config=_config(),
    )


def _gang_large(scale: float) -> Snapshot:
    nodes = _nodes(scaled(5000, scale))
    groups, pods = _gangs(n_groups=3, group_size=scaled(1000, scale), gpus=8, name=lambda g: f"large-{g}")
    return Snapshot(
        nodes=nodes,
        pods=tuple(pods),
        priority_classes=(TRAIN,),
        queues=_leaf_queues(_even_quotas(len(nodes) * GPUS_PER_NODE)),
        pod_groups=tuple(groups),
        config=_config(),
    )


def _preemption(scale: float) -> Snapshot:
    nodes = _nodes(scaled(5000, scale))
    n_nodes = len(nodes)
    queue = QueueName("batch")
    labels: Mapping[str, str] = {LABEL_QUEUE: queue}
    gpu_index = _gpu_index_annotations()
    pods: list[Pod] = []
    n_running = n_nodes * GPUS_PER_NODE
    # Start times are a permutation of the last n_running seconds: no two pods tie on age.
    stride = 7919 if n_running % 7919 else 1
    for i in range(n_running):
        node, index = divmod(i, GPUS_PER_NODE)
        start = BASE_TIME - n_running + (i * stride) % n_running
        pods.append(
            _running_pod(f"low-{i:05d}", queue, labels, nodes[node], (index,), gpu_index[index], LOW, start, 60.0)
        )
    for i in range(scaled(1000, scale)):
        pods.append(_pending_pod(f"high-{i:04d}", queue, labels, 1, HIGH, BASE_TIME + i))
    batch = Queue(
        name=queue,
        resources={GPU: QueueResource(quota=n_running * MILLI)},
        within_queue=WithinQueue.LOWER_PRIORITY,
    )
    return Snapshot(
        nodes=nodes,
        pods=tuple(pods),
        priority_classes=(LOW, HIGH),
        queues=(batch,),
        config=_config(),
    )


def _partly_used(rack: int) -> int:
    """How many nodes at the start of ``rack`` carry a running pod: odd racks only, 4 to 28."""
    return 4 + (rack * 7) % 25 if rack % 2 else 0


def _topology(scale: float) -> Snapshot:
    gang_size = 4
    nodes = _nodes(scaled(5000, scale))
    queue_labels = _queue_labels()
    gpu_index = [{ANNOTATION_GPU_INDEX: ",".join(str(i) for i in range(n))} for n in range(GPUS_PER_NODE + 1)]
    pods: list[Pod] = []
    capacity = 0  # gangs of 4 whole 8-GPU nodes that fit in the free nodes, rack by rack
    for first in range(0, len(nodes), RACK_SIZE):
        rack = first // RACK_SIZE
        rack_nodes = nodes[first : first + RACK_SIZE]
        busy = min(_partly_used(rack), len(rack_nodes))
        capacity += (len(rack_nodes) - busy) // gang_size
        for j in range(busy):
            gpus = 1 + (rack + j) % 4
            queue = LEAF_QUEUES[(rack + j) % len(LEAF_QUEUES)]
            start = BASE_TIME - 3600.0 + first + j
            pods.append(
                _running_pod(
                    f"warm-{first + j:05d}",
                    queue,
                    queue_labels[queue],
                    rack_nodes[j],
                    tuple(range(gpus)),
                    gpu_index[gpus],
                    TRAIN,
                    start,
                    1.0,
                )
            )
    n_groups = max(1, min(scaled(750, scale), capacity))
    groups, gang_pods = _gangs(
        n_groups=n_groups,
        group_size=gang_size,
        gpus=GPUS_PER_NODE,
        name=lambda g: f"rackjob-{g:04d}",
        topology_required=RACK_LABEL,
    )
    return Snapshot(
        nodes=nodes,
        pods=tuple(pods + gang_pods),
        priority_classes=(TRAIN,),
        queues=_leaf_queues(_even_quotas(len(nodes) * GPUS_PER_NODE)),
        pod_groups=tuple(groups),
        config=_config(),
    )


ZONE_LABEL = "topology.kubernetes.io/zone"
ZONES = 10


def _affinity(scale: float) -> Snapshot:
    """``basic`` with a zone on every node and an inter-pod rule on every pending pod."""
    base = _basic(scale)
    n_nodes = len(base.nodes)
    per_zone = max(1, -(-n_nodes // ZONES))
    nodes = tuple(
        replace(node, labels={**node.labels, ZONE_LABEL: f"zone-{i // per_zone}"}) for i, node in enumerate(base.nodes)
    )
    pods: list[Pod] = []
    for pod in base.pods:
        number = int(pod.name.rsplit("-", 1)[1])
        app = f"{'serve' if number % 2 == 0 else 'web'}-{number % 40 // 2:02d}"
        labels = {**pod.labels, "app": app}
        if pod.node_name is not None:
            pods.append(replace(pod, labels=labels))
            continue
        selector = LabelSelector((("app", app),))
        if number % 2 == 0:
            pods.append(replace(pod, labels=labels, anti_affinity_terms=(PodAffinityTerm(HOSTNAME_LABEL, selector),)))
        else:
            pods.append(replace(pod, labels=labels, spread_constraints=(
                SpreadConstraint(1, ZONE_LABEL, "DoNotSchedule", selector),
                SpreadConstraint(1, HOSTNAME_LABEL, "DoNotSchedule", selector),
            )))
    return replace(base, nodes=nodes, pods=tuple(pods))


PROJECTS = 50
NODE_POOLS = 10


def _basic_projects(scale: float) -> Snapshot:
    """``basic`` with 50 Projects and node-pool rules on every pod (see the module's docstring)."""
    base = _basic(scale)
    nodes = tuple(
        replace(node, labels={**node.labels, LABEL_POOL: f"pool-{i % NODE_POOLS}"}) for i, node in enumerate(base.nodes)
    )
    namespaces = [f"{NAMESPACE}-{j:02d}" for j in range(PROJECTS)]
    pods = tuple(replace(pod, namespace=namespaces[int(pod.name.rsplit("-", 1)[1]) % PROJECTS]) for pod in base.pods)
    pools = [NodePool(f"pool-{k}", LabelSelector(((LABEL_POOL, f"pool-{k}"),))) for k in range(NODE_POOLS)]
    projects = tuple(
        Project(
            name=f"project-{j:02d}",
            namespace_names=(namespaces[j],),
            queues=LEAF_QUEUES,
            node_pools=(pools[j % NODE_POOLS], pools[(j + 1) % NODE_POOLS]),
            priority_classes=(TRAIN.name,),
        )
        for j in range(PROJECTS)
    )
    return replace(base, nodes=nodes, pods=pods, projects=projects)


DRA_DRIVER = "gpu.nvidia.com"
GPU_DEVICE_CLASS = DeviceClass(DRA_DRIVER, selectors=(
    f"device.driver == '{DRA_DRIVER}' && device.attributes['{DRA_DRIVER}'].type == 'gpu'",))


def _gpu_devices(node: int) -> tuple[Device, ...]:
    return tuple(
        Device(f"gpu-{g}", {f"{DRA_DRIVER}/type": "gpu", f"{DRA_DRIVER}/index": g,
                            f"{DRA_DRIVER}/uuid": f"GPU-{node:05d}-{g}", f"{DRA_DRIVER}/productName": GPU_PRODUCT},
               {f"{DRA_DRIVER}/memory": f"{GPU_MEMORY_MIB}Mi"})
        for g in range(GPUS_PER_NODE)
    )


def _dra_basic(scale: float) -> Snapshot:
    """``basic`` with DRA GPUs (see the module's docstring)."""
    base = _basic(scale)
    allocatable = {r: v for r, v in NODE_ALLOCATABLE.items() if r != GPU}
    nodes = tuple(replace(n, allocatable=allocatable) for n in base.nodes)
    slices = tuple(ResourceSlice(f"{n.name}-gpu", DRA_DRIVER, n.name, n.name, 1, _gpu_devices(i))
                   for i, n in enumerate(nodes))
    request = (DeviceRequest("gpu", DRA_DRIVER),)
    pods: list[Pod] = []
    claims: list[ResourceClaim] = []
    for pod in base.pods:
        claim = f"{pod.name}-gpu"
        requests = {r: v for r, v in pod.requests.items() if r != GPU}
        pods.append(replace(pod, requests=requests, resource_claims=(
            PodClaim("gpu", template="single-gpu", generated=claim),)))
        allocation: tuple[DeviceResult, ...] = ()
        if pod.node_name is not None:
            allocation = tuple(DeviceResult("gpu", DRA_DRIVER, pod.node_name, f"gpu-{g}") for g in pod.gpu_index)
        claims.append(ResourceClaim(NAMESPACE, claim, uid=f"uid-{claim}", requests=request, allocation=allocation,
                                    allocated_node=pod.node_name, reserved_for=(pod.name,) if allocation else ()))
    return replace(base, nodes=nodes, pods=tuple(pods), resource_slices=slices, device_classes=(GPU_DEVICE_CLASS,),
                   resource_claims=tuple(claims),
                   claim_templates=(ClaimTemplate(NAMESPACE, "single-gpu", requests=request),))


QUEUE_ROOTS, QUEUE_CHILDREN, QUEUE_LEAVES = 10, 20, 10


def _queues_2000(scale: float) -> Snapshot:
    """``basic``'s pending pods over a deep tree (see the module's docstring)."""
    nodes = _nodes(scaled(5000, scale))
    queues: list[Queue] = []
    leaves: list[QueueName] = []
    for r in range(QUEUE_ROOTS):
        root = QueueName(f"org-{r:02d}")
        root_quota = 0
        for c in range(QUEUE_CHILDREN):
            child = QueueName(f"{root}-dept-{c:02d}")
            queues.append(Queue(name=child, parent=root))
            for j in range(QUEUE_LEAVES):
                k = len(leaves)
                leaf = QueueName(f"{child}-team-{j:02d}")
                quota = k % 7  # 0 to 6 GPUs: some leaves stay in quota, some borrow
                root_quota += quota
                leaves.append(leaf)
                queues.append(Queue(name=leaf, parent=child, weight=1.0 + k % 3,
                                    resources={GPU: QueueResource(quota=quota * MILLI)}))
        # Odd organisations set a quota of half their leaves' sum: their own limit binds first.
        resources = {GPU: QueueResource(quota=root_quota // 2 * MILLI)} if r % 2 else {}
        queues.append(Queue(name=root, resources=resources))
    labels = [{LABEL_QUEUE: q} for q in leaves]
    stride = 7 if len(leaves) % 7 else 1
    pods = tuple(
        _pending_pod(f"job-{i:05d}", leaves[(i * stride) % len(leaves)], labels[(i * stride) % len(leaves)], 1,
                     TRAIN, BASE_TIME + i)
        for i in range(scaled(10000, scale))
    )
    return Snapshot(nodes=nodes, pods=pods, priority_classes=(TRAIN,), queues=tuple(queues), config=_config())


def _stuck_gangs(scale: float) -> Snapshot:
    """Gangs no rack can hold, and one-GPU pods that fit (see the module's docstring)."""
    nodes = _nodes(scaled(5000, scale))
    gpu_index = _gpu_index_annotations()
    serving = QueueName("serving")
    batch = QueueName("batch")
    pods: list[Pod] = []
    # Every rack keeps only 3 whole nodes free: one GPU in use on each of the others.
    for i, node in enumerate(nodes):
        if i % RACK_SIZE < RACK_SIZE - 3:
            pods.append(_running_pod(f"serve-{i:05d}", serving, {LABEL_QUEUE: serving}, node, (0,), gpu_index[0],
                                     TRAIN, BASE_TIME - 3600.0 + i, 1.0))
    groups, gang_pods = _gangs(n_groups=scaled(8000, scale), group_size=4, gpus=GPUS_PER_NODE,
                               name=lambda g: f"stuck-{g:04d}", topology_required=RACK_LABEL)
    pods.extend(gang_pods)
    for i in range(scaled(5000, scale)):
        pods.append(_pending_pod(f"fill-{i:05d}", batch, {LABEL_QUEUE: batch}, 1, TRAIN, BASE_TIME + i))
    gpus = len(nodes) * GPUS_PER_NODE
    queues = (*_leaf_queues(_even_quotas(gpus // 4)),
              Queue(name=serving, resources={GPU: QueueResource(quota=gpus // 4 * MILLI)}),
              Queue(name=batch, resources={GPU: QueueResource(quota=gpus // 4 * MILLI)}))
    return Snapshot(nodes=nodes, pods=tuple(pods), priority_classes=(TRAIN,), queues=queues,
                    pod_groups=tuple(groups), config=_config())


_BUILDERS: Mapping[str, Callable[[float], Snapshot]] = {
    "basic": _basic,
    "gang-small": _gang_small,
    "gang-large": _gang_large,
    "preemption": _preemption,
    "topology": _topology,
    "affinity": _affinity,
    "basic-projects": _basic_projects,
    "dra-basic": _dra_basic,
    "queues-2000": _queues_2000,
    "stuck-gangs": _stuck_gangs,
}


def make_shape(name: str, scale: float = 1.0) -> Snapshot:
    """Build benchmark shape ``name`` (one of :data:`SHAPES`) at ``scale`` (1.0: full size)."""
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    try:
        builder = _BUILDERS[name]
    except KeyError:
        raise ValueError(f"unknown shape {name!r}; known shapes: {', '.join(SHAPES)}") from None
    return builder(scale)
