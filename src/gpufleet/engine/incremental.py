"""An engine that keeps its state between calls (issue 13).

``IncrementalEngine`` is called like ``schedule``: ``engine(snapshot) -> Decisions``, with the
successive snapshots of one cluster (the controller's cycles, the simulator's steps). It decides
exactly what a fresh ``schedule(snapshot)`` decides for the same snapshot (a property test checks
it over random event sequences); what it keeps between calls only saves work.

Each call still builds an :class:`~gpufleet.engine.scheduler.Engine` and runs it, but the build
steps that cost the most answer from kept state (:class:`KeptSteps`):

- the node half of the intake screen, while the nodes are the same (identity, then equality);
- the nodes' capacity state with the snapshot's running pods bound: kept between calls and
  updated from the difference (pods that started since the last call are taken, pods that ended,
  were evicted or changed are given back), then copied for the call, which changes its copy;
- the static feasibility masks of the nodes (a pure cache);
- the pod-table rows of the pods unchanged since the last call (the same object, the same
  PodGroup), the running ones given their binding from the kept capacity state in the same pass,
  and the gangs of such rows (``KeptGangs``: a gang whose member rows and PodGroup are those it
  was built with), their per-call fields (place, members' places, running count, evicted,
  pending reasons) set as a fresh build sets them, so nothing of the last call's ``run()`` stays;
- the queue usage of the running pods, per leaf, changed by the pods that came and left.

The victim index is built on a call's first victim search (engine/victims.py), not per call.

What it cannot follow exactly is built fresh: other nodes or other resource names rebuild the
kept state; a running pod whose GPU annotation the engine does not take as it is (incomplete, or
a GPU held twice: the fresh build's warnings and repairs) makes the call a plain ``schedule``.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import cast

import numpy as np

from gpufleet.domain import (
    BLOCKS_PER_GPU,
    GPU,
    MILLI,
    PODS,
    Decisions,
    Pod,
    PodGroup,
    Project,
    QueueName,
    Snapshot,
)
from gpufleet.domain.queues import pod_group_of
from gpufleet.engine.cluster import ClusterState, IntArray
from gpufleet.engine.feasibility import StaticFeasibility
from gpufleet.engine.intake import Screened, ScreenedNodes, screen, screen_nodes
from gpufleet.engine.placement import Placer
from gpufleet.engine.quota import QuotaGates
from gpufleet.engine.scheduler import BuildSteps, Engine
from gpufleet.engine.workload import Gang, KeptGangs, PodInfo, build_gangs, build_pod_table

__all__ = ["IncrementalEngine", "KeptSteps"]

# ClusterState attributes no call changes (shared by the copies); the rest is copied per call.
_SHARED = frozenset({"nodes", "index", "resources", "res_index"})
# Calls after which the feasibility cache starts again (it grows with the distinct constraint sets).
FEASIBILITY_CALLS = 1024

_name_order = attrgetter("namespace", "name")  # build_pod_table's order of pods
_FINISHED = ("Succeeded", "Failed")  # Pod.finished
BULK = 32  # pods that started since the last call, from which they are bound with NumPy


class Rebuild(Exception):
    """The kept state cannot follow this snapshot exactly: the call is decided fresh."""


@dataclass(slots=True)
class _Held:
    """A running pod as the kept capacity state holds it (the fresh build's bulk binding)."""

    pod: Pod
    node: int
    gpus: tuple[int, ...]
    blocks: int | None  # GPU blocks of a fractional pod, None for whole GPUs
    res: IntArray  # its requests over ClusterState.resources
    usage: tuple[int, ...] = ()  # what it counts against its queue, over ``managed``
    managed: tuple[str, ...] | None = None  # the managed resources ``usage`` is for
    leaf: int = -1  # the leaf queue ``usage`` is counted on in the kept sums (-1: none)
    counted: int = -1  # the epoch of the kept sums that count it (-1: none)


def clone_cluster(cluster: ClusterState) -> ClusterState:
    """A copy of ``cluster`` that changes apart from it (arrays copied; the node list, indexes
    and resource names shared, since nothing changes them)."""
    out = ClusterState.__new__(ClusterState)
    state = out.__dict__
    for name, value in cluster.__dict__.items():
        if isinstance(value, np.ndarray):
            state[name] = value.copy()
        elif name in _SHARED:
            state[name] = value
        elif isinstance(value, list) and all(isinstance(v, int) for v in value[:1]):
            state[name] = list(value)
        else:
            state[name] = copy.deepcopy(value)
    return out


class KeptSteps(BuildSteps):
    """The build steps of :class:`~gpufleet.engine.scheduler.Engine`, answered from state kept
    between the calls of one :class:`IncrementalEngine`."""

    def __init__(self) -> None:
        self._nodes_in: tuple[object, ...] | None = None
        self._screened: ScreenedNodes | None = None
        self._extra: list[str] | None = None
        self._base: ClusterState | None = None  # nothing bound
        self._bound: ClusterState | None = None  # the held pods bound
        self._held: dict[int, _Held] = {}  # id(pod) -> what it holds
        self._whole: IntArray = np.zeros(0, dtype=np.int64)  # [node, gpu]: held whole how often
        self._shares: IntArray = np.zeros(0, dtype=np.int64)  # [node, gpu]: blocks held as shares
        self._feasibility: StaticFeasibility | None = None
        self._pools: Mapping[str, Project] | None = None
        self._feasibility_calls = 0
        self._managed: tuple[str, ...] = ()
        # Pod rows: id(pod) -> (its PodInfo as last built, the PodGroup it was built with); valid
        # while the context (priority classes, config, queues, default queues, resources) holds.
        self._rows: dict[int, tuple[PodInfo, PodGroup | None]] = {}
        self._context: tuple[object, ...] | None = None
        self._gangs = KeptGangs()  # gangs of kept rows
        # This call's running rows and what each holds (pod_table -> bind_running).
        self._running: list[tuple[PodInfo, _Held]] = []
        self._running_rows: list[int] = []
        self._running_nodes: list[int] = []
        # Queue usage of the held pods of ours: leaf -> [pods counted, usage over ``_managed``], kept
        # between calls and changed by the pods that came and left (None: summed afresh next time).
        self._sums: dict[int, list[int]] | None = None
        self._epoch = 0  # bumped when the sums are summed afresh (_Held.counted)

    def forget(self) -> None:
        """Drop the bound state (after a call it could not follow): the next call binds afresh."""
        self._bound = None
        self._held = {}
        self._sums = None

    # -- the steps ---------------------------------------------------------------------------

    def screen(self, snapshot: Snapshot) -> Screened:
        nodes = snapshot.nodes
        if self._screened is None or (nodes is not self._nodes_in and nodes != self._nodes_in):
            self._screened = screen_nodes(nodes)
            self._base = None
            self._feasibility = None
            self.forget()
        self._nodes_in = nodes
        return screen(snapshot, self._screened)

    def cluster(self, snapshot: Snapshot) -> ClusterState:
        extra = sorted({r for p in snapshot.pods for r in p.requests})
        if self._base is None or extra != self._extra:
            self._base = ClusterState(snapshot.nodes, extra)
            self._extra = extra
            self.forget()
        if self._bound is None:
            self._bound = clone_cluster(self._base)
            self._whole = np.zeros(self._base.gpu_free.shape, dtype=np.int64)
            self._shares = np.zeros(self._base.gpu_free.shape, dtype=np.int64)
        try:
            self._follow(snapshot.pods, self._bound)
        except Rebuild:
            self.forget()
            raise
        out = clone_cluster(self._bound)
        self._bound.dirty.clear()
        return out

    def feasibility(self, cluster: ClusterState, pools: Mapping[str, Project] | None) -> StaticFeasibility:
        base = self._base
        assert base is not None
        self._feasibility_calls += 1
        if (self._feasibility is None or pools != self._pools or self._feasibility_calls > FEASIBILITY_CALLS):
            self._feasibility = StaticFeasibility(base.nodes, base.schedulable, pools)
            self._pools = pools
            self._feasibility_calls = 0
        return self._feasibility

    def pod_table(self, snapshot: Snapshot, cluster: ClusterState, queue_of: dict[QueueName, int],
                  default_queues: Mapping[str, QueueName] | None) -> tuple[list[PodInfo], IntArray]:
        """The pod table, with the rows of pods unchanged since the last call (the same object,
        the same PodGroup) kept, and the others built by ``build_pod_table``; every row gets its
        place and the state of a fresh build (no gang), the running ones their binding as
        :meth:`cluster` holds it (what ``bind_running`` sets)."""
        # The config's time changes every cycle and no row depends on it: it is left out of the context.
        config = snapshot.config if snapshot.config.now is None else replace(snapshot.config, now=None)
        context = (snapshot.priority_classes, config, queue_of, default_queues, cluster.resources)
        if context != self._context:
            self._rows = {}
            self._gangs = KeptGangs()
            self._context = context
            self._sums = None  # leaf numbers may differ
        kept = self._rows
        get = kept.get
        held = self._held
        groups: dict[str, PodGroup] = {g.key: g for g in snapshot.pod_groups}
        pods = sorted((p for p in snapshot.pods if p.phase not in _FINISHED), key=_name_order)
        out: list[PodInfo | None] = []
        append = out.append
        missing: list[Pod] = []
        for pod in pods:
            row = get(id(pod))
            if row is None or row[0].pod is not pod or (pod.group_label and row[1] is not pod_group_of(pod, groups)):
                missing.append(pod)
                append(None)
            else:
                append(row[0])
        if missing:
            epoch = self._epoch
            if any((c := held.get(id(p))) is not None and c.counted == epoch for p in missing):
                self._sums = None  # a counted pod's row built again (its PodGroup changed): its queue may differ
            built, _ = build_pod_table(dataclasses.replace(snapshot, pods=tuple(missing)), cluster, queue_of,
                                       default_queues)
            fresh = iter(built)
            for i, got in enumerate(out):
                if got is None:
                    info = out[i] = next(fresh)
                    pod = info.pod
                    kept[id(pod)] = (info, pod_group_of(pod, groups) if pod.group_label else None)
        infos = cast(list[PodInfo], out)
        running: list[tuple[PodInfo, _Held]] = []
        keep = running.append
        rows: list[int] = []  # their places and nodes, for bind_running
        nodes: list[int] = []
        at, on = rows.append, nodes.append
        for i, info in enumerate(infos):
            info.idx = info.name_rank = i
            info.gang = -1
            if info.pod.node_name is not None:
                h = held[id(info.pod)]
                info.node, info.gpus, info.bound_blocks = h.node, h.gpus, h.blocks
                keep((info, h))
                at(i)
                on(h.node)
            else:
                info.node, info.gpus, info.bound_blocks = None, (), None
        if len(kept) > 2 * len(infos) + 64:  # rows of pods gone: dropped now and then
            self._rows = {id(i.pod): kept[id(i.pod)] for i in infos}
        # Rows keep their own request arrays (equal to the matrix's rows; nothing writes either).
        matrix = np.array([i.res for i in infos], dtype=np.int64).reshape(len(infos), len(cluster.resources))
        self._running = running
        self._running_rows, self._running_nodes = rows, nodes
        return infos, matrix

    def gangs(self, snapshot: Snapshot, pods: list[PodInfo], classes: dict[str, int]) -> list[Gang]:
        """``build_gangs``, the gangs of kept rows used again (their per-call fields set anew)."""
        out = build_gangs(snapshot, pods, classes, self._gangs)
        self._gangs.prune(pods, out)
        return out

    def bind_running(self, pods: list[PodInfo], requests: IntArray, placer: Placer, gangs: list[Gang],
                     quota: QuotaGates) -> list[str]:
        """The running pods as :meth:`cluster` bound them (their places set by :meth:`pod_table`):
        the placer's node array, inter-pod and volume counts, their gangs' counts and their
        queues' usage (no warnings: a running pod with one makes the call a fresh one)."""
        running = self._running
        ours: list[tuple[PodInfo, _Held]] = []
        if running:
            # In pod order but for the rows built this call (at the end): the order matters to none
            # of these but the volumes, which take them in pod order as the fresh build does.
            bulk = np.array(self._running_rows, dtype=np.int64)
            nodes = np.array(self._running_nodes, dtype=np.int64)
            placer.node_of[bulk] = nodes
            if placer.interpod is not None:
                placer.interpod.add_many(bulk, nodes)
            if placer.volumes is not None:
                placer.volumes.take_many(np.sort(bulk))
            for pair in running:
                g = pair[0].gang
                if g >= 0:
                    gangs[g].alive += 1
                    ours.append(pair)
        if ours and quota.forest.managed:
            self._count_usage(ours, quota, placer.cluster)
        return []

    # -- the kept capacity state -------------------------------------------------------------

    def _follow(self, pods: Sequence[Pod], bound: ClusterState) -> None:
        """Bring ``bound`` to the running pods of ``pods``: give back what left, take what came."""
        held = self._held
        running = {id(p): p for p in pods if p.node_name is not None and p.phase not in _FINISHED}
        sums = self._sums
        for key in [k for k in held if k not in running]:
            h = held.pop(key)
            bound.give_back(h.node, h.res, h.gpus, h.blocks)
            self._count_cells(h, -1)
            if sums is not None and h.counted == self._epoch and h.leaf >= 0:
                total = sums[h.leaf]
                total[0] -= 1
                for j, v in enumerate(h.usage, 1):
                    total[j] -= v
                if not total[0]:
                    del sums[h.leaf]
        came = [(key, self._hold(pod, bound)) for key, pod in running.items() if key not in held]
        if len(came) < BULK:
            for key, h in came:
                self._count_cells(h, 1)
                bound.take(h.node, h.res, h.gpus, h.blocks)
                held[key] = h
        elif came:  # many (the first call): with NumPy, as the fresh build binds them
            self._take_many([h for _, h in came], bound)
            held.update(came)

    def _take_many(self, came: list[_Held], bound: ClusterState) -> None:
        whole = [(h.node, g) for h in came if h.blocks is None for g in h.gpus]
        shares = [(h.node, h.gpus[0], h.blocks) for h in came if h.blocks is not None]
        w_nodes, w_gpus = (np.array(c, dtype=np.int64).reshape(-1) for c in zip(*whole, strict=True)) if whole \
            else (np.zeros(0, dtype=np.int64),) * 2
        s_nodes, s_gpus, s_blocks = (np.array(c, dtype=np.int64).reshape(-1) for c in zip(*shares, strict=True)) \
            if shares else (np.zeros(0, dtype=np.int64),) * 3
        np.add.at(self._whole, (w_nodes, w_gpus), 1)
        np.add.at(self._shares, (s_nodes, s_gpus), s_blocks)
        if ((self._whole[w_nodes, w_gpus] > 1).any() or (self._shares[w_nodes, w_gpus] > 0).any()
                or (self._whole[s_nodes, s_gpus] > 0).any() or (self._shares[s_nodes, s_gpus] > BLOCKS_PER_GPU).any()):
            raise Rebuild("a GPU held twice")
        res = np.stack([h.res for h in came])
        bound.take_many(np.array([h.node for h in came], dtype=np.int64), res, (w_nodes, w_gpus),
                        (s_nodes, s_gpus, s_blocks))

    def _hold(self, pod: Pod, bound: ClusterState) -> _Held:
        """What ``pod`` holds, as the fresh build's bulk binding takes it; Rebuild when the fresh
        build would bind it otherwise (its GPU annotation incomplete or outside its node)."""
        node = bound.index[pod.node_name or ""]
        count = int(bound.gpu_count[node])
        idx = pod.gpu_index
        n = len(idx)
        blocks: int | None = None
        if pod.gpu_blocks is not None or pod.gpu_memory_bytes is not None:  # fractional
            if not (n == 1 and 0 <= idx[0] < count and pod.gpu_blocks is not None):
                raise Rebuild(pod.key)
            blocks = pod.gpu_blocks
        elif n != pod.requests.get(GPU, 0) // MILLI or (n and not (min(idx) >= 0 and max(idx) < count
                                                                   and (n == 1 or len(set(idx)) == n))):
            raise Rebuild(pod.key)
        requests = pod.requests
        res = np.array([MILLI if r == PODS else requests.get(r, 0) for r in bound.resources], dtype=np.int64)
        return _Held(pod, node, idx, blocks, res)

    def _count_cells(self, h: _Held, sign: int) -> None:
        """Count the GPU cells ``h`` holds; Rebuild when one is then held twice (the fresh build
        takes such a GPU out of service, with a warning)."""
        node = h.node
        if h.blocks is not None:
            g = h.gpus[0]
            self._shares[node, g] += sign * h.blocks
            twice = self._whole[node, g] > 0 or self._shares[node, g] > BLOCKS_PER_GPU
        else:
            for g in h.gpus:
                self._whole[node, g] += sign
            twice = any(self._whole[node, g] > 1 or self._shares[node, g] > 0 for g in h.gpus)
        if sign > 0 and twice:
            raise Rebuild(h.pod.key)

    def _count_usage(self, ours: list[tuple[PodInfo, _Held]], quota: QuotaGates, cluster: ClusterState) -> None:
        """Add what the running pods of ours count against their leaf queues (bind_running's sums):
        kept per leaf between calls, so that only the pods not counted yet are summed here (all of
        them after the managed resources, the queue numbers or a running pod's row changed)."""
        forest = quota.forest
        managed = tuple(forest.managed)
        if managed != self._managed:
            self._managed = managed
            self._sums = None
        managed = self._managed
        res_index = cluster.res_index
        sums = self._sums
        if sums is None:
            sums = self._sums = {}
            self._epoch += 1
        epoch = self._epoch
        for info, h in ours:
            if h.counted == epoch:
                continue
            if info.flavor >= 0:  # counted on its flavor (engine/flavors.py): never kept
                h.usage = tuple(quota.quota_vec(info))
                h.managed = None
            elif h.managed is not managed:
                h.usage = tuple(quota.gpu_milli(info) if r == GPU else
                                int(h.res[res_index[r]]) if r in res_index and r != PODS else 0 for r in managed)
                h.managed = managed
            h.counted, h.leaf = epoch, info.queue
            if h.leaf < 0:
                continue
            total = sums.get(h.leaf)
            if total is None:
                sums[h.leaf] = [1, *h.usage]
            else:
                total[0] += 1
                for j, v in enumerate(h.usage, 1):
                    total[j] += v
        for leaf in sorted(sums):
            forest.add(leaf, sums[leaf][1:])


class IncrementalEngine:
    """``schedule`` over successive snapshots of one cluster, state kept between calls."""

    def __init__(self) -> None:
        self.steps = KeptSteps()
        self.fresh_calls = 0  # calls the kept state could not follow (decided by a fresh build)

    def __call__(self, snapshot: Snapshot) -> Decisions:
        # As schedule(): the cyclic collector is paused for the call (outputs do not depend on it).
        paused = gc.isenabled()
        gc.disable()
        try:
            try:
                engine = Engine(snapshot, self.steps)
            except Rebuild:
                self.fresh_calls += 1
                engine = Engine(snapshot)
            except BaseException:
                # Kept state half updated must not decide the next call: start again from nothing.
                self.steps = KeptSteps()
                raise
            return engine.run()
        finally:
            if paused:
                gc.enable()
