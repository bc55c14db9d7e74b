"""Pods and gangs as the engine sees them: resolved priority, queue, preemptibility, requests."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import is_
from typing import cast

import numpy as np

from gpufleet.domain import (
    GPU,
    MILLI,
    PODS,
    SCHEDULER_NAME,
    Pod,
    PodGroup,
    PodKey,
    QueueName,
    Snapshot,
)
from gpufleet.domain.queues import gang_key, pod_group_of, resolve_queue
from gpufleet.domain.units import blocks_for_gpu_memory
from gpufleet.engine.cluster import ClusterState, IntArray


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
    flavor: int = -1  # the ResourceFlavor it takes (engine/flavors.py); -1: none

    @property
    def fractional(self) -> bool:
        return self.blocks is not None or self.gpu_mem_bytes is not None

    def blocks_on(self, gpu_memory_mib: int) -> int | None:
        """Blocks this pod takes on a GPU of ``gpu_memory_mib`` (None: cannot go there)."""
        if self.blocks is not None:
            return self.blocks
        if self.gpu_mem_bytes is None:
            return None
        return blocks_for_gpu_memory(self.gpu_mem_bytes, gpu_memory_mib)


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
    gates: tuple[str, ...] = ()  # spec.schedulingGates of its pods: not a candidate while any is left
    taken_back_by: str = ""  # admitted by this call, then withdrawn to make room for this pod's gang
    missing_group: bool = False  # its label names a PodGroup that does not exist: it waits
    policy_reason: str = ""  # a pending member breaks a Project rule (engine/tenancy.py): it waits


def build_pods(snapshot: Snapshot, cluster: ClusterState, queue_of: dict[QueueName, int]) -> list[PodInfo]:
    """PodInfo for every pod that is ours or holds capacity, in pod-key order."""
    return build_pod_table(snapshot, cluster, queue_of)[0]


def effective_priority(pod: Pod, group: PodGroup | None, classes: Mapping[str, int], default_priority: int) -> int:
    """A pod's priority by the spec: its PodGroup's class, else its own class, else ``spec.priority``,
    else the global default class's value (``default_priority``; 0 without one)."""
    gcn = group.priority_class_name if group is not None else None
    if gcn is not None and gcn in classes:
        return classes[gcn]
    pcn = pod.priority_class_name
    if pcn is not None and pcn in classes:
        return classes[pcn]
    if pod.priority is not None:
        return pod.priority
    return default_priority


def pod_preemptible(pod: Pod, snapshot: Snapshot, groups: Mapping[str, PodGroup]) -> bool:
    """The spec's "preemptible or not" for one pod of ``snapshot`` (``groups``: its PodGroups by key):
    its ``gpufleet.dev/preemptible`` label, else its priority below ``nonPreemptiblePriority``."""
    if pod.preemptible_label is not None:
        return pod.preemptible_label
    classes = {pc.name: pc.value for pc in snapshot.priority_classes}
    defaults = [pc.value for pc in snapshot.priority_classes if pc.global_default]
    priority = effective_priority(pod, pod_group_of(pod, groups), classes, max(defaults) if defaults else 0)
    return priority < snapshot.config.non_preemptible_priority


def build_pod_table(snapshot: Snapshot, cluster: ClusterState, queue_of: dict[QueueName, int],
                    default_queues: Mapping[str, QueueName] | None = None) -> tuple[list[PodInfo], IntArray]:
    """PodInfo for every pod that is ours or holds capacity, in pod-key order, and the request
    matrix (pods x ClusterState.resources) whose rows are the PodInfo ``res`` views.

    ``default_queues``: namespace -> the queue of its pods that name none, where it is not the
    config's (a Project's ``defaultQueue``); the rule that picks the queue stays ``resolve_queue``.

    Tens of thousands of running pods pass through here on every call, so the loop is kept flat:
    request columns are filled per resource, and PodInfo gets its fields positionally.
    """
    classes = {pc.name: pc.value for pc in snapshot.priority_classes}
    defaults = [pc.value for pc in snapshot.priority_classes if pc.global_default]
    default_priority = max(defaults) if defaults else 0
    groups: dict[str, PodGroup] = {g.key: g for g in snapshot.pod_groups}
    threshold = snapshot.config.non_preemptible_priority
    default_queue = snapshot.config.default_queue
    pods = sorted((p for p in snapshot.pods if not p.finished), key=lambda p: (p.namespace, p.name))
    keys = cast(list[PodKey], [f"{p.namespace}/{p.name}" for p in pods])
    matrix = np.zeros((len(pods), len(cluster.resources)), dtype=np.int64)
    for r, j in cluster.res_index.items():
        if r == PODS:
            matrix[:, j] = MILLI
        elif r != GPU:
            column = [p.requests.get(r, 0) for p in pods]
            if any(column):
                matrix[:, j] = column
    out: list[PodInfo] = []
    append = out.append
    for i, pod in enumerate(pods):
        group = pod_group_of(pod, groups) if groups else None  # no call per pod in the common case
        priority = effective_priority(pod, group, classes, default_priority)
        preemptible = pod.preemptible_label if pod.preemptible_label is not None else priority < threshold
        queue = -1
        if pod.scheduler_name == SCHEDULER_NAME:
            fallback = default_queues.get(pod.namespace, default_queue) if default_queues else default_queue
            queue = queue_of.get(resolve_queue(pod, group, fallback), -1)
        blocks = pod.gpu_blocks
        append(PodInfo(
            i, pod, keys[i], matrix[i], pod.requests.get(GPU, 0) // MILLI, blocks,
            pod.gpu_memory_bytes if blocks is None else None, priority, preemptible, queue, -1, None, (),
            None, pod.start_time if pod.start_time is not None else pod.creation_time, i,
        ))
    return out, matrix


@dataclass(slots=True)
class KeptGangs:
    """Gangs built by earlier calls, for an engine that keeps state between calls: a gang whose
    member rows (the same PodInfo objects) and PodGroup are those it was built with is used
    again, its per-call fields set as a new gang's."""

    alone: dict[int, tuple[PodInfo, Gang]] = field(default_factory=dict)  # id(row) -> (row, its gang of one)
    # gang key -> (its member rows, its PodGroup, the gang, members_by_size as positions in members)
    labelled: dict[str, tuple[list[PodInfo], PodGroup | None, Gang, list[int]]] = field(default_factory=dict)

    def prune(self, pods: list[PodInfo], gangs: list[Gang]) -> None:
        """Forget the gangs of rows gone (now and then: when there are many)."""
        if len(self.alone) > 2 * len(pods) + 64:
            self.alone = {id(i): one for i in pods if (one := self.alone.get(id(i))) is not None}
        if len(self.labelled) > 2 * len(gangs) + 64:
            self.labelled = {g.key: got for g in gangs if (got := self.labelled.get(g.key)) is not None}


def _reuse(gang: Gang, idx: int, rank: int, members: list[int], by_size: list[int]) -> Gang:
    """``gang`` as ``build_gangs`` makes it anew at ``idx``: its place, members, nothing bound."""
    gang.idx, gang.name_rank, gang.members, gang.members_by_size = idx, rank, members, by_size
    gang.alive, gang.evicted, gang.missing_group = 0, False, False
    gang.pending_reason = gang.taken_back_by = gang.policy_reason = ""
    return gang


def build_gangs(snapshot: Snapshot, pods: list[PodInfo], classes: dict[str, int],
                kept: KeptGangs | None = None) -> list[Gang]:
    """Gangs of our pods (a PodGroup, named or existing, or a pod of its own); other schedulers'
    pods get none. ``kept``: gangs of earlier calls to use again where their rows are the same
    (the gangs built here are added to it)."""
    groups: dict[str, PodGroup] = {g.key: g for g in snapshot.pod_groups}
    # Pods of their own and labelled gangs are kept apart (gang_id): a pod named like a label of
    # its namespace is not merged into that gang. In the sorted keys such a clash shows twice:
    # first the labelled gang, then the pod alone.
    alone: dict[str, list[int]] = {}
    labelled: dict[str, list[int]] = {}  # gangs named by a pod-group label
    for info in pods:
        pod = info.pod
        if info.queue < 0 and pod.scheduler_name != SCHEDULER_NAME:
            continue
        if pod.group_label:  # most pods: no call
            key = gang_key(pod)
            same = labelled.get(key)
            if same is None:
                labelled[key] = [info.idx]
            else:
                same.append(info.idx)
        else:
            alone[info.key] = [info.idx]
    gangs: list[Gang] = []
    append = gangs.append
    keys = sorted([*labelled, *alone]) if labelled else sorted(alone)
    for rank, key in enumerate(keys):
        got = labelled.get(key) if labelled else None
        if got is not None and (rank == 0 or keys[rank - 1] != key):
            members, group = got, groups.get(key) if groups else None
        else:
            members, group = alone[key], None
        if group is None and len(members) == 1:  # a pod of its own: the common case, kept cheap
            info = pods[members[0]]
            g = info.gang = len(gangs)
            if kept is not None:
                pair = kept.alone.get(id(info))
                if pair is not None and pair[0] is info:  # the same row: its gang, as _reuse sets it
                    gang = pair[1]
                    gang.idx, gang.name_rank, gang.members, gang.members_by_size = g, rank, members, members
                    gang.alive, gang.evicted, gang.missing_group = 0, False, False
                    gang.pending_reason = gang.taken_back_by = gang.policy_reason = ""
                    append(gang)
                    continue
            gang = Gang(g, key, members, 1, info.queue, info.priority, info.preemptible, True,
                        info.pod.creation_time, None, None, None, rank, 0, False, "", members,
                        info.pod.scheduling_gates)
            if kept is not None:
                kept.alone[id(info)] = (info, gang)
            append(gang)
            continue
        infos = [pods[m] for m in members]
        if kept is not None:
            was = kept.labelled.get(key)
            if was is not None and was[1] is group and len(was[0]) == len(infos) and all(map(is_, was[0], infos)):
                gang = _reuse(was[2], len(gangs), rank, members, [members[k] for k in was[3]])
                for m in members:
                    pods[m].gang = gang.idx
                append(gang)
                continue
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
            creation=_age(infos, group),
            topology_required=group.topology_required if group else None,
            topology_preferred=group.topology_preferred if group else None,
            group=group,
            name_rank=rank,
        )
        gang.members_by_size = members if len(members) == 1 else sorted(
            members,
            key=lambda m: (-pods[m].whole, -(pods[m].blocks or 0), -int(pods[m].res.sum()), m),
        )
        gang.gates = tuple(sorted({name for i in infos for name in i.pod.scheduling_gates}))
        for m in members:
            pods[m].gang = gang.idx
        gangs.append(gang)
        if kept is not None:
            at = {m: k for k, m in enumerate(members)}
            kept.labelled[key] = (infos, group, gang, [at[m] for m in gang.members_by_size])
    for key in labelled.keys() - groups.keys():  # a label naming no PodGroup: the gang waits for it (api.md)
        gangs[bisect_left(keys, key)].missing_group = True  # gang i is the i-th key (a labelled one first)
    return gangs



def _age(infos: list[PodInfo], group: PodGroup | None) -> float:
    """A gang's age: its pods' earliest creation, or its group's ``queued-at`` (kept across a drain,
    docs/semantics-notes.md, "Draining nodes and failed GPUs") when that is earlier."""
    created = min(i.pod.creation_time for i in infos)
    if group is not None and group.queued_at is not None:
        return min(created, group.queued_at)
    return created
