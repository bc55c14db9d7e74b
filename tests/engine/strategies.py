"""Hypothesis strategies that build random domain ``Snapshot`` objects directly (no YAML).

Every snapshot they draw is *consistent*: running pods are bound with a ``gpu_index`` that does
not over-commit their node (no GPU shared by a whole-GPU pod and anything else, at most 100 blocks
per GPU, only healthy GPUs, cpu/memory/pods/MIG within allocatable), pods of ours sit in leaf
queues only, the queue forest has no cycle and is at most three levels deep, and every pod that
names a PodGroup has one.

Features are switched on with small probabilities through ``_chance``, written so that
hypothesis shrinks every optional feature *off*: a failing example shrinks to a plain one.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from hypothesis import strategies as st

from gpufleet.domain import (
    CPU,
    GPU,
    MEMORY,
    MILLI,
    PODS,
    LabelSelector,
    Node,
    NodeName,
    PersistentVolume,
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
    StorageClass,
    Taint,
    TaintEffect,
    Toleration,
    VolumeClaim,
    WithinQueue,
)
from gpufleet.domain.wire import NO_PROVISIONER

T = TypeVar("T")
Draw = Callable[[st.SearchStrategy[Any]], Any]

NS = "ml"
RACK = "topology.gpufleet.dev/rack"
HOST = "kubernetes.io/hostname"
GPU_TYPE = "gpufleet.test/gpu-type"
MIG = "nvidia.com/mig-1g.10gb"
GIB = 1024**3 * MILLI  # one GiB of memory in milli-bytes
OTHER_SCHEDULER = "default-scheduler"
DEDICATED = Taint("dedicated", "inference", TaintEffect.NO_SCHEDULE)
TOLERATE_DEDICATED = Toleration("dedicated", "Equal", "inference", TaintEffect.NO_SCHEDULE)
PRIORITY_CLASSES = (
    PriorityClass("low", 10),
    PriorityClass("mid", 50),
    PriorityClass("edge", 99),
    PriorityClass("high", 100),
    PriorityClass("critical", 200),
)
RAW_PRIORITIES = (0, 10, 50, 99, 100, 101, 150)


def _chance(draw: Draw, tenths: int) -> bool:
    """True with probability ``tenths``/10; shrinks to False."""
    return bool(draw(st.integers(0, 9)) >= 10 - tenths)


# ---------------------------------------------------------------------------------------------
# Nodes


@st.composite
def nodes(
    draw: Draw,
    min_nodes: int = 1,
    max_nodes: int = 12,
    *,
    min_gpus: int = 1,
    clean: bool = False,
) -> tuple[Node, ...]:
    """1..12 GPU nodes with racks, GPU types, sometimes a taint, unhealthy GPUs, NVLink halves,
    MIG slices, or ``unschedulable``. ``clean`` turns off everything that takes capacity away
    (taints, cordons, unhealthy GPUs)."""
    count = draw(st.integers(min_nodes, max_nodes))
    racks = draw(st.integers(1, 3))
    out: list[Node] = []
    for i in range(count):
        name = NodeName(f"n{i:02d}")
        gpus = draw(st.integers(min_gpus, 8))
        labels = {HOST: name, GPU_TYPE: draw(st.sampled_from(["a", "b"]))}
        if clean or not _chance(draw, 1):
            labels[RACK] = f"r{draw(st.integers(0, racks - 1))}"
        allocatable = {
            CPU: draw(st.sampled_from([64, 8, 32])) * MILLI,
            MEMORY: draw(st.sampled_from([512, 16, 64])) * GIB,
            PODS: draw(st.sampled_from([110, 3, 8])) * MILLI,
            GPU: gpus * MILLI,
        }
        if _chance(draw, 2):
            allocatable[MIG] = draw(st.integers(1, 7)) * MILLI
        unhealthy: frozenset[int] = frozenset()
        if not clean and _chance(draw, 2):
            unhealthy = frozenset(draw(st.lists(st.integers(0, gpus - 1), min_size=1, max_size=2)))
        nvlink: tuple[tuple[int, ...], ...] = ()
        if gpus >= 4 and _chance(draw, 3):
            half = gpus // 2
            nvlink = (tuple(range(half)), tuple(range(half, gpus)))
        taints = (DEDICATED,) if not clean and _chance(draw, 2) else ()
        unschedulable = not clean and _chance(draw, 1)
        out.append(
            Node(
                name=name,
                labels=labels,
                allocatable=allocatable,
                taints=taints,
                unschedulable=unschedulable,
                unhealthy_gpus=unhealthy,
                nvlink_domains=nvlink,
            )
        )
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Queues


@st.composite
def queue_forests(draw: Draw, min_queues: int = 1, max_queues: int = 6, *, flat: bool = False) -> tuple[Queue, ...]:
    """A forest of queues ``q0..qN`` (parents always come earlier, so no cycle; depth <= 3) with
    random GPU quotas, limits and lending limits in whole GPUs."""
    count = draw(st.integers(min_queues, max_queues))
    parents: list[QueueName | None] = []
    depth: list[int] = []
    for i in range(count):
        options: list[QueueName | None] = [None]
        if not flat:
            options += [QueueName(f"q{j}") for j in range(i) if depth[j] < 3]
        parent = draw(st.sampled_from(options))
        parents.append(parent)
        depth.append(1 if parent is None else depth[int(parent[1:])] + 1)
    has_children = {p for p in parents if p is not None}
    out: list[Queue] = []
    for i in range(count):
        name = QueueName(f"q{i}")
        quota: int | None = draw(st.integers(0, 8))
        if name in has_children and _chance(draw, 5):
            quota = None  # the sum of the children's quotas
        limit = draw(st.integers(0, 16)) * MILLI if _chance(draw, 3) else None
        lending = None
        if quota is not None and _chance(draw, 3):
            lending = draw(st.integers(0, quota)) * MILLI
        resources = {GPU: QueueResource(None if quota is None else quota * MILLI, limit, lending)}
        out.append(
            Queue(
                name=name,
                parent=parents[i],
                weight=draw(st.sampled_from([1.0, 2.0, 0.5])),
                resources=resources,
                reclaim_borrowed=not _chance(draw, 2),
                within_queue=WithinQueue.NEVER if _chance(draw, 2) else WithinQueue.LOWER_PRIORITY,
            )
        )
    return tuple(out)


def leaves(queues: Sequence[Queue]) -> list[QueueName]:
    parents = {q.parent for q in queues}
    return [q.name for q in queues if q.name not in parents]


# ---------------------------------------------------------------------------------------------
# Pods


@dataclass(frozen=True)
class Shape:
    """What one pod asks for."""

    whole: int = 0
    blocks: int | None = None
    cpu: int = 0
    memory: int = 0
    mig: int = 0

    def requests(self) -> dict[str, int]:
        out = {CPU: self.cpu, MEMORY: self.memory, GPU: self.whole * MILLI, MIG: self.mig}
        return {k: v for k, v in out.items() if v}


@st.composite
def shapes(draw: Draw, *, min_whole: int = 0, max_whole: int = 8, gpu: bool = False) -> Shape:
    """Whole GPUs 0..8, or 1..100 blocks of one GPU, or no GPU; cpu, memory, sometimes MIG."""
    kind = draw(st.integers(0, 9))
    whole, blocks = 0, None
    if kind >= 7:
        blocks = draw(st.one_of(st.sampled_from([50, 25, 10, 100]), st.integers(1, 100)))
    elif kind >= 2 or gpu:
        whole = draw(st.one_of(st.sampled_from([1, 2, 4]), st.integers(min_whole, max_whole)))
        whole = max(min_whole, min(whole, max_whole))
    cpu = draw(st.sampled_from([0, 500, 1000, 4000, 16000]))
    memory = draw(st.sampled_from([0, 1, 8, 64])) * GIB
    mig = draw(st.integers(1, 2)) * MILLI if _chance(draw, 1) else 0
    return Shape(whole, blocks, cpu, memory, mig)


def _priority(draw: Draw) -> tuple[str | None, int]:
    if _chance(draw, 5):
        cls = draw(st.sampled_from(PRIORITY_CLASSES))
        return cls.name, cls.value
    return None, draw(st.sampled_from(RAW_PRIORITIES))


def _preemptible_label(draw: Draw) -> bool | None:
    roll = draw(st.integers(0, 9))
    return None if roll < 6 else roll < 9


@dataclass
class _Room:
    """Free capacity of one node while running pods are drawn."""

    node: Node
    cpu: int
    memory: int
    pods: int
    mig: int
    whole: set[int] = field(default_factory=set)
    blocks: dict[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, node: Node) -> _Room:
        a = node.allocatable
        return cls(node, a.get(CPU, 0), a.get(MEMORY, 0), a.get(PODS, 0) // MILLI, a.get(MIG, 0))

    def healthy(self) -> list[int]:
        return [i for i in range(self.node.gpu_count) if i not in self.node.unhealthy_gpus]

    def place(self, shape: Shape, offset: int) -> tuple[int, ...] | None:
        """Take room for ``shape``; returns its gpu_index, or None (and takes nothing)."""
        if shape.cpu > self.cpu or shape.memory > self.memory or self.pods < 1 or shape.mig > self.mig:
            return None
        gpus: tuple[int, ...] = ()
        if shape.whole:
            free = [i for i in self.healthy() if i not in self.whole and not self.blocks.get(i)]
            if len(free) < shape.whole:
                return None
            start = offset % len(free)
            rotated = free[start:] + free[:start]
            gpus = tuple(sorted(rotated[: shape.whole]))
            self.whole.update(gpus)
        elif shape.blocks is not None:
            fits = [i for i in self.healthy() if i not in self.whole and self.blocks.get(i, 0) + shape.blocks <= 100]
            if not fits:
                return None
            gpu = fits[offset % len(fits)]
            self.blocks[gpu] = self.blocks.get(gpu, 0) + shape.blocks
            gpus = (gpu,)
        self.cpu -= shape.cpu
        self.memory -= shape.memory
        self.pods -= 1
        self.mig -= shape.mig
        return gpus


@dataclass
class _Builder:
    """Accumulates the pods and groups of one snapshot."""

    draw: Draw
    nodes: tuple[Node, ...]
    queue_leaves: list[QueueName]
    rooms: list[_Room] = field(init=False)
    pods: list[Pod] = field(default_factory=list)
    groups: list[PodGroup] = field(default_factory=list)
    clock: float = 1000.0

    def __post_init__(self) -> None:
        self.rooms = [_Room.of(n) for n in self.nodes]

    def tick(self) -> float:
        self.clock += 10.0
        return self.clock

    def _try_bind(self, shape: Shape) -> tuple[NodeName, tuple[int, ...]] | None:
        start = self.draw(st.integers(0, len(self.rooms) - 1))
        offset = self.draw(st.integers(0, 7))
        for k in range(len(self.rooms)):
            room = self.rooms[(start + k) % len(self.rooms)]
            gpus = room.place(shape, offset)
            if gpus is not None:
                return room.node.name, gpus
        return None

    def other_scheduler_pod(self, index: int) -> None:
        shape = self.draw(shapes())
        spot = self._try_bind(shape)
        if spot is None:
            return
        self.pods.append(
            Pod(
                namespace="kube-system",
                name=f"x{index}",
                scheduler_name=OTHER_SCHEDULER,
                requests=shape.requests(),
                gpu_blocks=shape.blocks,
                node_name=spot[0],
                phase="Running",
                creation_time=self.tick(),
                start_time=self.clock,
                gpu_index=spot[1],
            )
        )

    def running_gang(
        self, index: int, *, elastic: bool = True, gpu: bool = False, queue: QueueName | None = None
    ) -> None:
        """Up to 3 running pods of one gang; ``gpu``: GPU pods of mostly low priority."""
        draw = self.draw
        queue = queue if queue is not None else draw(st.sampled_from(self.queue_leaves))
        size = draw(st.integers(1, 3))
        grouped = size > 1 or _chance(draw, 3)
        shape = draw(shapes(gpu=gpu, max_whole=4 if gpu else 8))
        cls, prio = _priority(draw)
        if gpu and not _chance(draw, 3):
            cls, prio = None, draw(st.sampled_from([0, 10, 50]))
        label = _preemptible_label(draw)
        created = self.tick()
        group = f"g-r{index}" if grouped else None
        placed: list[Pod] = []
        for j in range(size):
            spot = self._try_bind(shape)
            if spot is None:
                continue
            placed.append(
                Pod(
                    namespace=NS,
                    name=f"r{index}-{j}",
                    requests=shape.requests(),
                    gpu_blocks=shape.blocks,
                    priority=prio,
                    priority_class_name=cls,
                    preemptible_label=label,
                    queue_label=None if grouped and _chance(draw, 2) else queue,
                    group_label=group,
                    node_name=spot[0],
                    phase="Running",
                    creation_time=created,
                    start_time=self.tick(),
                    gpu_index=spot[1],
                )
            )
        if not placed:
            return
        self.pods.extend(placed)
        if group is not None:
            self.groups.append(PodGroup(NS, group, min_member=draw(st.integers(1, len(placed))), queue=queue))
            if elastic and _chance(draw, 1):  # one more member, pending: elastic scale-up
                self.pods.append(
                    replace(
                        placed[0],
                        name=f"r{index}-{size}",
                        node_name=None,
                        phase="Pending",
                        start_time=None,
                        gpu_index=(),
                        creation_time=self.tick(),
                    )
                )

    def pending_gang(
        self,
        index: int,
        *,
        exact_size: bool = False,
        max_size: int = 4,
        gpu: bool = False,
        gang: bool = False,
        queue: QueueName | None = None,
        urgent: bool = False,
    ) -> None:
        """A pending gang of up to ``max_size`` pods; ``gang``: a PodGroup of 2+ pods, often with
        fewer ``minMember`` and a required topology; ``urgent``: often of non-preemptible priority."""
        draw = self.draw
        queue = queue if queue is not None else draw(st.sampled_from(self.queue_leaves))
        size = draw(st.integers(2 if gang else 1, max_size))
        grouped = gang or size > 1 or _chance(draw, 3)
        if exact_size or not grouped or (not gang and _chance(draw, 7)):
            min_member = size
        elif _chance(draw, 2):
            min_member = size + 1  # too few pods: stays pending
        else:
            min_member = draw(st.integers(1, size))
        shape = draw(shapes(gpu=gpu))
        cls, prio = _priority(draw)
        if urgent and _chance(draw, 5):
            cls, prio = "high", 100
        group_cls: str | None = None
        if grouped and _chance(draw, 2):
            group_class = draw(st.sampled_from(PRIORITY_CLASSES))
            group_cls, cls, prio = group_class.name, group_class.name, group_class.value
        label = _preemptible_label(draw)
        tolerations = (TOLERATE_DEDICATED,) if _chance(draw, 3) else ()
        selector = {GPU_TYPE: "a"} if _chance(draw, 1) else {}
        affinity: tuple[SelectorTerm, ...] = ()
        if _chance(draw, 1):
            affinity = (SelectorTerm((SelectorRequirement(RACK, "In", ("r0", "r1")),)),)
        created = self.tick()
        group = f"g-p{index}" if grouped else None
        default_queue = not grouped and _chance(draw, 1)
        for j in range(size):
            self.pods.append(
                Pod(
                    namespace=NS,
                    name=f"p{index}-{j}",
                    requests=shape.requests(),
                    gpu_blocks=shape.blocks,
                    priority=prio,
                    priority_class_name=cls,
                    preemptible_label=label,
                    queue_label=None if default_queue or (grouped and _chance(draw, 2)) else queue,
                    group_label=group,
                    creation_time=created,
                    node_selector=selector,
                    affinity=affinity,
                    tolerations=tolerations,
                )
            )
        if group is not None:
            required = RACK if _chance(draw, 6 if gang else 3) else None
            preferred = None
            if _chance(draw, 2):
                preferred = HOST if required is not None else draw(st.sampled_from([RACK, HOST]))
            self.groups.append(
                PodGroup(
                    NS,
                    group,
                    min_member=min_member,
                    queue=queue,
                    priority_class_name=group_cls,
                    topology_required=required,
                    topology_preferred=preferred,
                )
            )

    def extras(self) -> None:
        """A finished pod (holds nothing) and a pending pod of another scheduler (not ours)."""
        if _chance(self.draw, 2):
            self.pods.append(
                Pod(
                    namespace=NS,
                    name="done-0",
                    requests={GPU: 8 * MILLI, CPU: 64 * MILLI},
                    queue_label=self.queue_leaves[0],
                    node_name=self.nodes[0].name,
                    phase="Succeeded",
                    gpu_index=tuple(range(self.nodes[0].gpu_count)),
                    creation_time=1.0,
                )
            )
        if _chance(self.draw, 1):
            self.pods.append(
                Pod(
                    namespace="kube-system",
                    name="x-pending",
                    scheduler_name=OTHER_SCHEDULER,
                    requests={GPU: MILLI},
                    creation_time=2.0,
                )
            )


def _config(draw: Draw) -> SchedulerConfig:
    placement = Placement.SPREAD if _chance(draw, 2) else Placement.BINPACK
    return SchedulerConfig(topology_levels=(RACK, HOST), placement=placement)


# ---------------------------------------------------------------------------------------------
# Snapshots


@st.composite
def snapshots(
    draw: Draw,
    *,
    max_nodes: int = 12,
    max_queues: int = 6,
    max_running: int = 6,
    max_pending: int = 5,
) -> Snapshot:
    """A general random cluster: running pods (ours, of another scheduler, gangs), pending gangs."""
    cluster = draw(nodes(1, max_nodes))
    queues = draw(queue_forests(1, max_queues))
    b = _Builder(draw, cluster, leaves(queues))
    for i in range(draw(st.integers(0, max_running))):
        b.running_gang(i)
    for i in range(draw(st.integers(0, 2))):
        b.other_scheduler_pod(i)
    for i in range(draw(st.integers(0, max_pending))):
        b.pending_gang(i)
    b.extras()
    return Snapshot(
        nodes=cluster,
        pods=tuple(b.pods),
        priority_classes=PRIORITY_CLASSES,
        queues=queues,
        pod_groups=tuple(b.groups),
        config=_config(draw),
    )


@st.composite
def gang_snapshots(draw: Draw, *, min_nodes: int = 2, max_nodes: int = 6, max_running: int = 4,
                   max_pending: int = 3) -> Snapshot:
    """Pending PodGroups of 2..4 pods, often with fewer ``minMember`` (room for elastic scale-up)
    and a required rack, on up to 6 nodes in up to 3 racks with some running work."""
    cluster = draw(nodes(min_nodes, max_nodes))
    queues = draw(queue_forests(1, 3))
    b = _Builder(draw, cluster, leaves(queues))
    for i in range(draw(st.integers(0, max_running))):
        b.running_gang(i)
    for i in range(draw(st.integers(1, max_pending))):
        b.pending_gang(i, gang=True)
    return Snapshot(
        nodes=cluster,
        pods=tuple(b.pods),
        priority_classes=PRIORITY_CLASSES,
        queues=queues,
        pod_groups=tuple(b.groups),
        config=_config(draw),
    )


@st.composite
def single_gang_snapshots(draw: Draw, *, max_nodes: int = 3, max_running: int = 10) -> Snapshot:
    """Exactly ONE pending gang W (``minMember`` = its size, asking for GPUs) in a small cluster
    filled with running work, so that W's decision is taken on the snapshot itself."""
    cluster = draw(nodes(1, max_nodes, min_gpus=2))
    queues = draw(queue_forests(1, 4))
    b = _Builder(draw, cluster, leaves(queues))
    own = draw(st.sampled_from(b.queue_leaves))  # W's queue, where half of the running work is
    for i in range(draw(st.integers(1, max_running))):
        b.running_gang(i, elastic=False, gpu=True, queue=own if _chance(draw, 5) else None)
    if _chance(draw, 2):
        b.other_scheduler_pod(0)
    b.pending_gang(0, exact_size=True, max_size=3, gpu=True, queue=own, urgent=True)
    return Snapshot(
        nodes=cluster,
        pods=tuple(b.pods),
        priority_classes=PRIORITY_CLASSES,
        queues=queues,
        pod_groups=tuple(b.groups),
        config=_config(draw),
    )


LENDER = QueueName("lender")


@st.composite
def lending_snapshots(draw: Draw) -> Snapshot:
    """Top-level queues only: ``lender`` with a GPU quota above its lendingLimit and no pods, and
    one or two borrowing queues with running and pending work on clean nodes (no taints, cordons,
    unhealthy GPUs or pods of other schedulers)."""
    cluster = draw(nodes(1, 4, clean=True))
    quota = draw(st.integers(1, 8))
    lender = Queue(
        LENDER,
        resources={GPU: QueueResource(quota * MILLI, None, draw(st.integers(0, quota - 1)) * MILLI)},
    )
    borrowers = [
        Queue(
            QueueName(f"b{i}"),
            resources={GPU: QueueResource(draw(st.integers(0, 4)) * MILLI)},
            within_queue=WithinQueue.NEVER if _chance(draw, 2) else WithinQueue.LOWER_PRIORITY,
        )
        for i in range(draw(st.integers(1, 2)))
    ]
    queues = (lender, *borrowers)
    b = _Builder(draw, cluster, [q.name for q in borrowers])
    for i in range(draw(st.integers(0, 4))):
        b.running_gang(i, elastic=False)
    for i in range(draw(st.integers(1, 4))):
        b.pending_gang(i, gpu=True)
    pods = [p for p in b.pods if p.queue_label is not None or p.group_label is not None]
    return Snapshot(
        nodes=cluster,
        pods=tuple(pods),
        priority_classes=PRIORITY_CLASSES,
        queues=queues,
        pod_groups=tuple(b.groups),
        config=_config(draw),
    )


# ---------------------------------------------------------------------------------------------
# Transformations


def _shuffled(items: Sequence[T], rng: random.Random) -> tuple[T, ...]:
    out = list(items)
    rng.shuffle(out)
    return tuple(out)


def shuffled_snapshot(snapshot: Snapshot, seed: int) -> Snapshot:
    """The same snapshot with every tuple (and every label/allocatable mapping) in another order."""
    rng = random.Random(seed)

    def mapping(m: Any) -> dict[str, Any]:
        keys = list(m)
        rng.shuffle(keys)
        return {k: m[k] for k in keys}

    node_list = [replace(n, labels=mapping(n.labels), allocatable=mapping(n.allocatable)) for n in snapshot.nodes]
    pod_list = [replace(p, requests=mapping(p.requests)) for p in snapshot.pods]
    return replace(
        snapshot,
        nodes=_shuffled(node_list, rng),
        pods=_shuffled(pod_list, rng),
        priority_classes=_shuffled(snapshot.priority_classes, rng),
        queues=_shuffled(snapshot.queues, rng),
        pod_groups=_shuffled(snapshot.pod_groups, rng),
    )


# ---------------------------------------------------------------------------------------------
# Inter-pod rules (issue 9): apps with a required anti-affinity, a DoNotSchedule spread or an affinity

APPS = ("a", "b", "c")
INTER_POD_RULES = (
    ("anti", HOST, 0), ("anti", RACK, 0), ("spread", HOST, 1), ("spread", RACK, 1), ("spread", RACK, 2),
    ("affinity", RACK, 0), ("none", "", 0),
)


def _with_rule(pod: Pod, app: str, rule: tuple[str, str, int]) -> Pod:
    kind, key, skew = rule
    labels = {**pod.labels, "app": app}
    selector = LabelSelector((("app", app),))
    if kind == "anti":
        return replace(pod, labels=labels, anti_affinity_terms=(PodAffinityTerm(key, selector),))
    if kind == "spread":
        # nodeAffinityPolicy Ignore: the constraint counts on every node with the key, as the checker does.
        return replace(pod, labels=labels, spread_constraints=(
            SpreadConstraint(skew, key, "DoNotSchedule", selector, None, "Ignore"),))
    if kind == "affinity":
        return replace(pod, labels=labels, affinity_terms=(PodAffinityTerm(key, selector),))
    return replace(pod, labels=labels)


@st.composite
def inter_pod_snapshots(draw: Draw) -> Snapshot:
    """A general or gang snapshot whose pods (running, pending, other schedulers') belong to apps,
    each app with one inter-pod rule that all its pods carry."""
    base = draw(st.one_of(snapshots(), gang_snapshots()))
    rules = {app: draw(st.sampled_from(INTER_POD_RULES)) for app in APPS}
    soft = _chance(draw, 5)  # soft scores too: they must never break a required rule
    pods: list[Pod] = []
    for pod in base.pods:
        app = draw(st.sampled_from((*APPS, None)))
        pod = pod if app is None else _with_rule(pod, app, rules[app])
        pods.append(_with_preferences(pod, APPS[(APPS.index(app) + 1) % len(APPS)]) if soft and app else pod)
    nodes = base.nodes
    if soft:  # PreferNoSchedule on some nodes
        nodes = tuple(replace(n, taints=(*n.taints, SPOT)) if i % 2 else n for i, n in enumerate(nodes))
    return replace(base, pods=tuple(pods), nodes=nodes)


SPOT = Taint("spot", "true", TaintEffect.PREFER_NO_SCHEDULE)


def _with_preferences(pod: Pod, other_app: str) -> Pod:
    """Preferred terms of every kind: node affinity to rack r0, anti-affinity to another app (which
    that app's pods score both ways), affinity to it over racks."""
    away = PodAffinityTerm(HOST, LabelSelector((("app", other_app),)), weight=50)
    near = PodAffinityTerm(RACK, LabelSelector((("app", other_app),)), weight=20)
    rack0 = SelectorTerm(expressions=(SelectorRequirement(RACK, "In", ("r0",)),))
    return replace(pod, anti_affinity_terms=(*pod.anti_affinity_terms, away),
                   affinity_terms=(*pod.affinity_terms, near), preferred_affinity=((30, rack0),))




# ---------------------------------------------------------------------------------------------
# Volumes (issue 9 item 3): local and rack-pinned PVs, claims bound or not, pods naming them

CLASSES = (
    StorageClass("local", NO_PROVISIONER, wait_for_first_consumer=True),
    StorageClass("csi", "csi.example.com", wait_for_first_consumer=True,
                 allowed_topologies=(SelectorTerm(expressions=(SelectorRequirement(RACK, "In", ("r0",)),)),)),
    StorageClass("instant", "csi.example.com"),
)
ACCESS_MODES = (("ReadWriteOnce",), ("ReadWriteOncePod",), ("ReadWriteMany",))
GIB = 1 << 30


@st.composite
def volume_snapshots(draw: Draw) -> Snapshot:
    """A general or gang snapshot with storage: PVs pinned to one host or one rack, claims of the
    three classes (some bound to PVs), and pods (running, pending, other schedulers') naming 0-2
    of them, and now and then a missing claim."""
    base = draw(st.one_of(snapshots(), gang_snapshots()))
    hosts = [n.name for n in base.nodes]
    racks = sorted({n.labels[RACK] for n in base.nodes if RACK in n.labels})
    volumes: list[PersistentVolume] = []
    for i in range(draw(st.integers(0, 12))):
        if racks and _chance(draw, 3):
            term = SelectorTerm(expressions=(SelectorRequirement(RACK, "In", (draw(st.sampled_from(racks)),)),))
        else:
            term = SelectorTerm(expressions=(SelectorRequirement(HOST, "In", (draw(st.sampled_from(hosts)),)),))
        volumes.append(PersistentVolume(
            f"pv-{i}", storage_class=draw(st.sampled_from(("local", "local", "csi"))),
            capacity_bytes=draw(st.integers(1, 4)) * GIB, access_modes=draw(st.sampled_from(ACCESS_MODES)),
            node_affinity=(term,),
        ))
    claims: list[VolumeClaim] = []
    for i in range(draw(st.integers(1, 8))):
        bound = draw(st.sampled_from([None, *(v.name for v in volumes)])) if _chance(draw, 2) else None
        claims.append(VolumeClaim(
            NS, f"c{i}", storage_class="instant" if bound else draw(st.sampled_from(("local", "local", "csi"))),
            volume_name=bound, request_bytes=draw(st.integers(1, 3)) * GIB,
            access_modes=draw(st.sampled_from((*ACCESS_MODES, ("ReadWriteOnce",)))),
        ))
    bound_to = {c.volume_name: c.key for c in claims if c.volume_name}
    volumes = [replace(v, claim=bound_to[v.name], phase="Bound") if v.name in bound_to else v for v in volumes]
    names = [f"c{i}" for i in range(len(claims))]
    pods: list[Pod] = []
    for pod in base.pods:
        if pod.namespace == NS and _chance(draw, 6):
            chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
            if _chance(draw, 1):
                chosen.append("missing")
            pod = replace(pod, claims=tuple(chosen))
        pods.append(pod)
    return replace(base, pods=tuple(pods), claims=tuple(claims), volumes=tuple(volumes), storage_classes=CLASSES)
