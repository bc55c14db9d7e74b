"""Pods and gangs as the engine sees them: resolved priority, queue, preemptibility, requests."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise, repeat
from operator import attrgetter, is_
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
from gpufleet.domain.queues import pod_group_of, resolve_queue
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
    request columns are filled per resource, the priority, preemptibility and queue are worked out
    once per distinct set of the pod fields they depend on (``_Resolver``), and PodInfo gets its
    fields positionally.
    """
    pods = sorted([p for p in snapshot.pods if p.phase not in _FINISHED], key=_name_order)
    matrix = np.zeros((len(pods), len(cluster.resources)), dtype=np.int64)
    requests = [p.requests for p in pods]
    for r, j in cluster.res_index.items():
        if r == PODS:
            matrix[:, j] = MILLI
        elif r != GPU:
            column = [q.get(r, 0) for q in requests]
            if any(column):
                matrix[:, j] = column
    keys = cast(list[PodKey], [f"{p.namespace}/{p.name}" for p in pods])
    resolve = _Resolver(snapshot, queue_of, default_queues)
    known = resolve.table.get
    rows = list(matrix)
    out: list[PodInfo] = []
    append = out.append
    fields = _resolver_key
    for i, pod in enumerate(pods):
        k = fields(pod)
        priority, preemptible, queue = known(k) or resolve(pod, k)
        blocks = pod.gpu_blocks
        start = pod.start_time
        append(PodInfo(
            i, pod, keys[i], rows[i], pod.requests.get(GPU, 0) // MILLI, blocks,
            pod.gpu_memory_bytes if blocks is None else None, priority, preemptible, queue, -1, None, (), None,
            pod.creation_time if start is None else start, i,
        ))
    return out, matrix


_FINISHED = ("Succeeded", "Failed")  # Pod.finished
_name_order = attrgetter("namespace", "name")
# The pod fields a row's priority, preemptibility and queue depend on (with the snapshot's context).
_resolver_key = attrgetter("priority_class_name", "priority", "preemptible_label", "scheduler_name",
                           "queue_label", "namespace", "group_label")


class _Resolver:
    """A pod's priority, preemptibility and leaf queue (-1: not ours), worked out once per distinct
    ``_resolver_key`` of the pods: pods alike in those fields get the same."""

    def __init__(self, snapshot: Snapshot, queue_of: dict[QueueName, int],
                 default_queues: Mapping[str, QueueName] | None) -> None:
        self.classes = {pc.name: pc.value for pc in snapshot.priority_classes}
        defaults = [pc.value for pc in snapshot.priority_classes if pc.global_default]
        self.default_priority = max(defaults) if defaults else 0
        self.groups: dict[str, PodGroup] = {g.key: g for g in snapshot.pod_groups}
        self.threshold = snapshot.config.non_preemptible_priority
        self.default_queue = snapshot.config.default_queue
        self.queue_of = queue_of
        self.default_queues = default_queues
        self.table: dict[tuple[object, ...], tuple[int, bool, int]] = {}

    def __call__(self, pod: Pod, key: tuple[object, ...]) -> tuple[int, bool, int]:
        group = pod_group_of(pod, self.groups)
        priority = effective_priority(pod, group, self.classes, self.default_priority)
        preemptible = pod.preemptible_label if pod.preemptible_label is not None else priority < self.threshold
        queue = -1
        if pod.scheduler_name == SCHEDULER_NAME:
            fallback = self.default_queue
            if self.default_queues:
                fallback = self.default_queues.get(pod.namespace, fallback)
            queue = self.queue_of.get(resolve_queue(pod, group, fallback), -1)
        got = self.table[key] = (priority, preemptible, queue)
        return got


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
    (the gangs built here are added to it).

    Gang ``i`` is the ``i``-th of the gang keys in sorted order. The gangs of one pod without a
    PodGroup (most of them: every pod of its own) are made together by one ``map`` over their
    columns; the others one by one."""
    groups: dict[str, PodGroup] = {g.key: g for g in snapshot.pod_groups}
    # Pods of their own and labelled gangs are kept apart (gang_id): a pod named like a label of
    # its namespace is not merged into that gang. In the sorted keys such a clash shows twice:
    # first the labelled gang, then the pod alone.
    ours = [i for i in pods if i.queue >= 0 or i.pod.scheduler_name == SCHEDULER_NAME]
    grouped = [i for i in ours if i.pod.group_label]
    labelled: dict[str, list[int]] = {}  # gangs named by a pod-group label
    for info, key in zip(grouped, [f"{i.pod.namespace}/{i.pod.group_label}" for i in grouped], strict=True):
        same = labelled.get(key)  # key: gang_key(info.pod)
        if same is None:
            labelled[key] = [info.idx]
        else:
            same.append(info.idx)
    alone: dict[str, list[int]] = {i.key: [i.idx] for i in ours if not i.pod.group_label} if grouped \
        else {i.key: [i.idx] for i in ours}
    keys = sorted([*labelled, *alone]) if labelled else sorted(alone)
    if not labelled and kept is None:  # pods of their own only: all together
        ones = [alone[k] for k in keys]
        return _gangs_of_one(pods, list(range(len(keys))), keys, ones, [None] * len(keys))
    sums = _request_sums(pods, labelled) if kept is not None else []
    out: list[Gang | None] = []
    append = out.append
    one_ranks: list[int] = []
    one_keys: list[str] = []
    one_members: list[list[int]] = []
    many: list[tuple[int, str, list[int], PodGroup | None]] = []
    for rank, key in enumerate(keys):
        got = labelled.get(key) if labelled else None
        if got is not None and (rank == 0 or keys[rank - 1] != key):
            members, group = got, groups.get(key) if groups else None
        else:
            members, group = alone[key], None
        if group is None and len(members) == 1:  # a pod of its own: the common case, kept cheap
            if kept is None:
                one_ranks.append(rank)
                one_keys.append(key)
                one_members.append(members)
                append(None)  # made below, with the others of one pod
                continue
            info = pods[members[0]]
            info.gang = rank
            pair = kept.alone.get(id(info))
            if pair is not None and pair[0] is info:  # the same row: its gang, as _reuse sets it
                gang = pair[1]
                gang.idx, gang.name_rank, gang.members, gang.members_by_size = rank, rank, members, members
                gang.alive, gang.evicted, gang.missing_group = 0, False, False
                gang.pending_reason = gang.taken_back_by = gang.policy_reason = ""
                append(gang)
                continue
            gang = Gang(rank, key, members, 1, info.queue, info.priority, info.preemptible, True,
                        info.pod.creation_time, None, None, None, rank, 0, False, "", members,
                        info.pod.scheduling_gates)
            kept.alone[id(info)] = (info, gang)
            append(gang)
            continue
        if kept is None:
            many.append((rank, key, members, group))
            append(None)  # made below, with the other gangs of a PodGroup
            continue
        infos = [pods[m] for m in members]
        if kept is not None:
            was = kept.labelled.get(key)
            if was is not None and was[1] is group and len(was[0]) == len(infos) and all(map(is_, was[0], infos)):
                gang = _reuse(was[2], rank, rank, members, [members[k] for k in was[3]])
                for m in members:
                    pods[m].gang = rank
                append(gang)
                continue
        gang = _gang_of(rank, key, members, infos, group, classes, sums)
        append(gang)
        if kept is not None:
            at = {m: k for k, m in enumerate(members)}
            kept.labelled[key] = (infos, group, gang, [at[m] for m in gang.members_by_size])
    if one_ranks:
        groupless: list[PodGroup | None] = [None] * len(one_ranks)
        for rank, gang in zip(one_ranks, _gangs_of_one(pods, one_ranks, one_keys, one_members, groupless),
                              strict=True):
            out[rank] = gang
    if many:
        for (rank, *_), gang in zip(many, _gangs_of_groups(pods, many, classes), strict=True):
            out[rank] = gang
    gangs = cast(list[Gang], out)
    for key in labelled.keys() - groups.keys():  # a label naming no PodGroup: the gang waits for it (api.md)
        gangs[bisect_left(keys, key)].missing_group = True  # gang i is the i-th key (a labelled one first)
    return gangs


def _gangs_of_one(pods: list[PodInfo], ranks: list[int], keys: list[str], members: list[list[int]],
                  groups: list[PodGroup | None]) -> list[Gang]:
    """The gangs of one pod and no PodGroup at ``ranks`` (gang ``ranks[k]`` is ``members[k]``,
    named ``keys[k]``), made by columns; each pod is given its gang."""
    infos = [pods[m[0]] for m in members]
    n = len(infos)
    for info, rank in zip(infos, ranks, strict=True):
        info.gang = rank
    return list(map(Gang, ranks, keys, members, repeat(1, n), [i.queue for i in infos],
                    [i.priority for i in infos], [i.preemptible for i in infos], repeat(True, n),
                    [i.pod.creation_time for i in infos], groups, groups, groups, ranks, repeat(0, n),
                    repeat(False, n), repeat("", n), members, [i.pod.scheduling_gates for i in infos]))


def _gangs_of_groups(pods: list[PodInfo], many: list[tuple[int, str, list[int], PodGroup | None]],
                     classes: dict[str, int]) -> list[Gang]:
    """The gangs ``many`` ((rank, key, members, PodGroup) each, members in index order): what
    ``_gang_of`` makes of each, by columns over all their members with NumPy (segment maxima,
    minima and ands); only gangs whose members differ in size, or that have scheduling gates, are
    looked at one by one."""
    members = [m for _, _, m, _ in many]
    flat = [m for ms in members for m in ms]
    infos = [pods[m] for m in flat]
    sizes = list(map(len, members))
    starts = np.zeros(len(many), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    try:
        priority = np.fromiter([i.priority for i in infos], dtype=np.int64, count=len(infos))
        created = np.fromiter([i.pod.creation_time for i in infos], dtype=np.float64, count=len(infos))
        whole = np.fromiter([i.whole for i in infos], dtype=np.int64, count=len(infos))
        if np.isnan(created).any():
            raise OverflowError("no order of NaN")
    except OverflowError:  # values NumPy does not hold as Python compares them: gang by gang
        return [_gang_of(rank, key, ms, [pods[m] for m in ms], group, classes, _request_sums(pods, {key: ms}))
                for rank, key, ms, group in many]
    top: list[int] = np.maximum.reduceat(priority, starts).tolist()
    first: list[float] = np.minimum.reduceat(created, starts).tolist()
    preemptible: list[bool] = np.logical_and.reduceat(
        np.fromiter([i.preemptible for i in infos], dtype=bool, count=len(infos)), starts).tolist()
    gated: list[bool] = np.logical_or.reduceat(
        np.fromiter([bool(i.pod.scheduling_gates) for i in infos], dtype=bool, count=len(infos)), starts).tolist()
    # Members alike in size (whole GPUs, blocks, request sum) keep their order in members_by_size.
    blocks = np.fromiter([i.blocks or 0 for i in infos], dtype=np.int64, count=len(infos))
    sums = np.array([i.res for i in infos], dtype=np.int64).reshape(len(infos), -1).sum(axis=1)
    lead = np.repeat(starts, sizes)
    alike: list[bool] = np.logical_and.reduceat(
        (whole == whole[lead]) & (blocks == blocks[lead]) & (sums == sums[lead]), starts).tolist()
    at_sums: list[int] = []
    out: list[Gang] = []
    for k, (rank, key, ms, group) in enumerate(many):
        by_size = ms
        if len(ms) > 1:
            if alike[k]:
                by_size = ms[:]
            else:
                if not at_sums:
                    at_sums = _request_sums(pods, {"": flat})
                by_size = _by_size(ms, [pods[m] for m in ms], at_sums)
        gates: tuple[str, ...] = ()
        if gated[k]:
            gates = tuple(sorted({name for m in ms for name in pods[m].pod.scheduling_gates}))
        queue = pods[ms[0]].queue
        if group is None:
            out.append(Gang(rank, key, ms, 1, queue, top[k], preemptible[k], True, first[k], None, None, None,
                            rank, 0, False, "", by_size, gates))
            continue
        pcn = group.priority_class_name
        created_at = first[k] if group.queued_at is None else min(first[k], group.queued_at)
        out.append(Gang(rank, key, ms, group.min_member, queue, classes[pcn] if pcn in classes else top[k],
                        preemptible[k], True, created_at, group.topology_required, group.topology_preferred,
                        group, rank, 0, False, "", by_size, gates))
    for info, rank in zip(infos, np.repeat([r for r, _, _, _ in many], sizes).tolist(), strict=True):
        info.gang = rank
    return out


def _request_sums(pods: list[PodInfo], labelled: dict[str, list[int]]) -> list[int]:
    """Per pod index, the sum of its request row (``res``) for the members of labelled gangs of
    more than one pod (0 for the others): summed for all of them at once."""
    multi = [m for members in labelled.values() if len(members) > 1 for m in members]
    if not multi:
        return []
    totals = np.zeros(len(pods), dtype=np.int64)
    totals[multi] = np.array([pods[m].res for m in multi], dtype=np.int64).reshape(len(multi), -1).sum(axis=1)
    out: list[int] = totals.tolist()
    return out


def _gang_of(idx: int, key: str, members: list[int], infos: list[PodInfo], group: PodGroup | None,
             classes: dict[str, int], sums: list[int]) -> Gang:
    """The gang at ``idx`` of ``members`` (rows ``infos``, in name order) and ``group``; ``sums``:
    the members' request sums (``_request_sums``)."""
    if group is not None and group.priority_class_name in classes:
        priority = classes[group.priority_class_name]
    else:
        priority = max([i.priority for i in infos])
    by_size = members if len(members) == 1 else _by_size(members, infos, sums)
    gates: tuple[str, ...] = ()
    if any(i.pod.scheduling_gates for i in infos):
        gates = tuple(sorted({name for i in infos for name in i.pod.scheduling_gates}))
    for info in infos:
        info.gang = idx
    if group is None:
        return Gang(idx, key, members, 1, infos[0].queue, priority, all([i.preemptible for i in infos]), True,
                    _age(infos, None), None, None, None, idx, 0, False, "", by_size, gates)
    return Gang(idx, key, members, group.min_member, infos[0].queue, priority,
                all([i.preemptible for i in infos]), True, _age(infos, group), group.topology_required,
                group.topology_preferred, group, idx, 0, False, "", by_size, gates)


def _by_size(members: list[int], infos: list[PodInfo], sums: list[int]) -> list[int]:
    """``members`` largest first: by whole GPUs, GPU blocks, request sum, then pod index."""
    sizes = [(-i.whole, -(i.blocks or 0), -sums[m]) for m, i in zip(members, infos, strict=True)]
    if sizes.count(sizes[0]) == len(sizes) and all(a < b for a, b in pairwise(members)):
        return members[:]  # all alike, in index order: the order stays
    order = sorted(range(len(members)), key=lambda k: (sizes[k], members[k]))
    return [members[k] for k in order]


def _age(infos: list[PodInfo], group: PodGroup | None) -> float:
    """A gang's age: its pods' earliest creation, or its group's ``queued-at`` (kept across a drain,
    docs/semantics-notes.md, "Draining nodes and failed GPUs") when that is earlier."""
    created = min(i.pod.creation_time for i in infos)
    if group is not None and group.queued_at is not None:
        return min(created, group.queued_at)
    return created
