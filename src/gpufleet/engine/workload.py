"""Pods and gangs as the engine sees them: resolved priority, queue, preemptibility, requests."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gpufleet.domain import (
    BLOCKS_PER_GPU,
    GPU,
    MILLI,
    MILLI_PER_BLOCK,
    PODS,
    Pod,
    PodGroup,
    PodKey,
    QueueName,
    Snapshot,
)
from gpufleet.engine.cluster import ClusterState, IntArray

MIB = 1024 * 1024


@dataclass(slots=True)
class PodInfo:
    idx: int
    pod: Pod
    key: PodKey
    res: IntArray  # requests over ClusterState.resources, "pods" included
    whole: int
    blocks: int | None  # fixed blocks (annotation) or None
    gpu_mem_bytes: int | None
    priority: int
    preemptible: bool
    queue: int  # leaf queue index, -1 for pods that are not ours
    gang: int = -1
    # where it is bound now (None: not bound)
    node: int | None = None
    gpus: tuple[int, ...] = ()
    bound_blocks: int | None = None
    start: float = 0.0
    name_rank: int = 0

    @property
    def fractional(self) -> bool:
        return self.blocks is not None or self.gpu_mem_bytes is not None

    def blocks_on(self, gpu_memory_mib: int) -> int | None:
        """Blocks this pod takes on a GPU of ``gpu_memory_mib`` (None: cannot go there)."""
        if self.blocks is not None:
            return self.blocks
        if self.gpu_mem_bytes is None or gpu_memory_mib <= 0:
            return None
        b = math.ceil(self.gpu_mem_bytes * BLOCKS_PER_GPU / (gpu_memory_mib * MIB))
        return b if 1 <= b <= BLOCKS_PER_GPU else (1 if b < 1 else None)


@dataclass(slots=True)
class Gang:
    idx: int
    key: str  # PodGroup key, or the pod key of a gang of one
    members: list[int]  # pod indices, in name order
    min_member: int
    queue: int
    priority: int
    preemptible: bool
    ours: bool
    creation: float
    topology_required: str | None = None
    topology_preferred: str | None = None
    group: PodGroup | None = None
    name_rank: int = 0
    alive: int = 0  # pods bound now
    evicted: bool = False
    pending_reason: str = ""
    members_by_size: list[int] = field(default_factory=list)


def resolve_priority(pod: Pod, classes: dict[str, int], default_value: int | None) -> int:
    if pod.priority_class_name is not None and pod.priority_class_name in classes:
        return classes[pod.priority_class_name]
    if pod.priority is not None:
        return pod.priority
    return default_value if default_value is not None else 0


def build_pods(snapshot: Snapshot, cluster: ClusterState, queue_of: dict[QueueName, int]) -> list[PodInfo]:
    """PodInfo for every pod that is ours or holds capacity, in pod-key order."""
    classes = {pc.name: pc.value for pc in snapshot.priority_classes}
    defaults = [pc.value for pc in snapshot.priority_classes if pc.global_default]
    default_value = max(defaults) if defaults else None
    groups: dict[str, PodGroup] = {g.key: g for g in snapshot.pod_groups}
    threshold = snapshot.config.non_preemptible_priority
    default_queue = snapshot.config.default_queue
    pods = sorted((p for p in snapshot.pods if not p.finished), key=lambda p: (p.namespace, p.name))
    out: list[PodInfo] = []
    n_res = len(cluster.resources)
    pods_j = cluster.res_index[PODS]
    matrix = np.zeros((len(pods), n_res), dtype=np.int64)
    matrix[:, pods_j] = MILLI
    res_index = cluster.res_index
    rows: list[int] = []
    cols: list[int] = []
    vals: list[int] = []
    for i, pod in enumerate(pods):
        for r, v in pod.requests.items():
            j = res_index.get(r)
            if j is not None and r != GPU:
                rows.append(i)
                cols.append(j)
                vals.append(v)
    matrix[rows, cols] = vals
    for i, pod in enumerate(pods):
        res = matrix[i]
        group = groups.get(f"{pod.namespace}/{pod.group_label}") if pod.group_label else None
        priority = resolve_priority(pod, classes, default_value)
        if group is not None and group.priority_class_name in classes:
            priority = classes[group.priority_class_name]
        preemptible = pod.preemptible_label if pod.preemptible_label is not None else priority < threshold
        queue = -1
        if pod.ours:
            qname = pod.queue_label or (group.queue if group is not None else None) or default_queue
            queue = queue_of.get(qname, -1)
        out.append(
            PodInfo(
                idx=i,
                pod=pod,
                key=pod.key,
                res=res,
                whole=pod.whole_gpus,
                blocks=pod.gpu_blocks,
                gpu_mem_bytes=pod.gpu_memory_bytes if pod.gpu_blocks is None else None,
                priority=priority,
                preemptible=preemptible,
                queue=queue,
                start=pod.start_time if pod.start_time is not None else pod.creation_time,
                name_rank=i,
            )
        )
    return out


def build_gangs(snapshot: Snapshot, pods: list[PodInfo], classes: dict[str, int]) -> list[Gang]:
    """Gangs of our pods (a PodGroup, or a pod of its own); other schedulers' pods get none."""
    groups: dict[str, PodGroup] = {g.key: g for g in snapshot.pod_groups}
    by_key: dict[str, list[int]] = {}
    for info in pods:
        if info.queue < 0 and not info.pod.ours:
            continue
        label = info.pod.group_label
        key: str = info.key
        if label:
            group_key = f"{info.pod.namespace}/{label}"
            if group_key in groups:  # a label naming no PodGroup: the pod is a gang of one
                key = group_key
        by_key.setdefault(key, []).append(info.idx)
    gangs: list[Gang] = []
    for rank, key in enumerate(sorted(by_key)):
        members = by_key[key]
        group = groups.get(key)
        if group is None and len(members) == 1:  # a pod of its own: the common case, kept cheap
            info = pods[members[0]]
            gangs.append(Gang(len(gangs), key, members, 1, info.queue, info.priority, info.preemptible, True,
                              info.pod.creation_time, name_rank=rank, members_by_size=members))
            info.gang = len(gangs) - 1
            continue
        infos = [pods[m] for m in members]
        if group is not None and group.priority_class_name in classes:
            priority = classes[group.priority_class_name]
        else:
            priority = max(i.priority for i in infos)
        gang = Gang(
            idx=len(gangs),
            key=key,
            members=members,
            min_member=group.min_member if group is not None else 1,
            queue=infos[0].queue,
            priority=priority,
            preemptible=all(i.preemptible for i in infos),
            ours=True,
            creation=min(i.pod.creation_time for i in infos),
            topology_required=group.topology_required if group else None,
            topology_preferred=group.topology_preferred if group else None,
            group=group,
            name_rank=rank,
        )
        gang.members_by_size = members if len(members) == 1 else sorted(
            members,
            key=lambda m: (-pods[m].whole, -(pods[m].blocks or 0), -int(pods[m].res.sum()), m),
        )
        for m in members:
            pods[m].gang = gang.idx
        gangs.append(gang)
    return gangs


def quota_request(info: PodInfo, managed: list[str], blocks: int | None) -> list[int]:
    """What a pod counts against quota, over the managed resources."""
    vec = [0] * len(managed)
    for j, r in enumerate(managed):
        if r == GPU:
            if info.fractional:
                vec[j] = (blocks or 0) * MILLI_PER_BLOCK
            else:
                vec[j] = info.whole * MILLI
        else:
            vec[j] = info.pod.requests.get(r, 0)
    return vec
