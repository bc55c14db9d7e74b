"""The scheduling loop: admission order, quota gates, placement and preemption, cycle after cycle.

``schedule(snapshot)`` is a pure function: it builds array state from the snapshot, runs cycles
until one changes nothing, and returns the decisions. The simulator and the Kubernetes
controller call this same function.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

import numpy as np

from gpufleet.domain import (
    BLOCKS_PER_GPU,
    GPU,
    PODS,
    Binding,
    Decisions,
    Eviction,
    EvictionReason,
    NodeName,
    PendingPod,
    PodKey,
    Queue,
    QueueName,
    Snapshot,
)
from gpufleet.engine.cluster import BoolArray, ClusterState, IntArray
from gpufleet.engine.feasibility import StaticFeasibility, static_key
from gpufleet.engine.placement import Assignment, GangPlacement, Placer
from gpufleet.engine.preemption import find_victims
from gpufleet.engine.queues import NONE, QueueForest, fmt_amount, unit
from gpufleet.engine.workload import Gang, PodInfo, build_gangs, build_pod_table, quota_request


@dataclass
class Attempt:
    ok: bool
    reason: str = ""


class Engine:
    """Working state of one replay. Built from a snapshot; ``run`` decides."""

    MEMO_FAILURES = True  # reuse the failure of an identical lone pod while the state is unchanged

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        config = snapshot.config
        queues = list(snapshot.queues)
        if config.default_queue not in {q.name for q in queues}:
            queues.append(Queue(name=QueueName(config.default_queue)))
        extra = {r for p in snapshot.pods for r in p.requests}
        self.cluster = ClusterState(snapshot.nodes, sorted(extra))
        capacity = {r: self.cluster.capacity(r) for r in {GPU} | set(self.cluster.resources)}
        self.forest = QueueForest(queues, capacity)
        self.feasibility = StaticFeasibility(self.cluster.nodes, self.cluster.schedulable)
        self.pods, self.requests = build_pod_table(snapshot, self.cluster, self.forest.index)
        classes = {pc.name: pc.value for pc in snapshot.priority_classes}
        self.gangs: list[Gang] = build_gangs(snapshot, self.pods, classes)
        self.placer = Placer(self.cluster, self.feasibility, self.pods, config.placement)
        self.managed = self.forest.managed
        self.gpu_j = self.managed.index(GPU) if GPU in self.managed else -1
        self.bindings: dict[int, Assignment] = {}
        self.evictions: dict[int, Eviction] = {}
        self.warnings: list[str] = []
        self.cycles = 0
        self.version = 0  # bumped by every change of bindings, so remembered failures expire
        self.committed = 0  # bumped by every admission and eviction (queue usage changed)
        self._pick_state = (-1, -1)
        self._in_quota: dict[int, bool] = {}
        self._share_keys: dict[tuple[int, bool], float] = {}
        self.failed: dict[tuple[object, ...], tuple[int, str]] = {}
        self._smallest_gpu_mib = self._smallest_gpu_memory()
        self._bind_running()
        # Gangs with a member not running: the only ones that can be candidates or end pending
        # (a gang running whole only becomes pending again by eviction, and is then done).
        self.open_gangs = [g.idx for g in self.gangs if g.alive < len(g.members)]
        self._build_victim_arrays()
        self._check_overcommit()

    # -- building ------------------------------------------------------------------------------

    def _smallest_gpu_memory(self) -> list[int]:
        return sorted({int(m) for m in self.cluster.gpu_memory_mib if m > 0})

    def quota_vec(self, info: PodInfo, blocks: int | None = None) -> list[int]:
        if info.fractional and blocks is None:
            blocks = info.bound_blocks
            if blocks is None:
                blocks = info.blocks
            if blocks is None:  # gpu-memory, pending: blocks on the smallest GPU that holds it
                blocks = next((b for m in self._smallest_gpu_mib if (b := info.blocks_on(m)) is not None), 0)
        return quota_request(info, self.managed, blocks)

    def _bind_running(self) -> None:
        """Running pods hold their capacity; those without gpu-index get the lowest free GPUs.

        Pods whose gpu-index annotation is complete are applied in bulk with NumPy; the others
        follow one by one, in order of start time, then name.
        """
        c = self.cluster
        width = c.gpu_free.shape[1]
        index = c.index
        running = [p for p in self.pods if p.pod.node_name in index and not p.pod.finished]
        rest: list[PodInfo] = []
        # One pass sorts pods into the bulk (complete gpu-index) and the rest, and collects the
        # bulk's cells; the pass is flat Python because every running pod goes through it.
        b_pods: list[int] = []
        b_nodes: list[int] = []
        w_nodes: list[int] = []
        w_gpus: list[int] = []
        f_nodes: list[int] = []
        f_gpus: list[int] = []
        f_blocks: list[int] = []
        for info in running:
            pod = info.pod
            idx = pod.gpu_index
            n = len(idx)
            if info.blocks is not None or info.gpu_mem_bytes is not None:  # fractional
                if not (n == 1 and 0 <= idx[0] < width and info.blocks is not None):
                    rest.append(info)
                    continue
                node = index[pod.node_name or ""]
                f_nodes.append(node)
                f_gpus.append(idx[0])
                f_blocks.append(info.blocks)
                info.bound_blocks = info.blocks
            else:
                if n != info.whole or (n and not (min(idx) >= 0 and max(idx) < width
                                                  and (n == 1 or len(set(idx)) == n))):
                    rest.append(info)
                    continue
                node = index[pod.node_name or ""]
                if n == 1:
                    w_nodes.append(node)
                    w_gpus.append(idx[0])
                elif n:
                    w_nodes.extend([node] * n)
                    w_gpus.extend(idx)
            info.node, info.gpus = node, idx
            b_pods.append(info.idx)
            b_nodes.append(node)
        if b_pods:
            nodes = np.array(b_nodes, dtype=np.int64)
            order = np.argsort(nodes, kind="stable")
            touched, starts = np.unique(nodes[order], return_index=True)
            c.free[touched] -= np.add.reduceat(self.requests[np.array(b_pods)[order]], starts, axis=0)
            if w_nodes:
                cells = (np.array(w_nodes), np.array(w_gpus))
                keep = c.healthy[cells]
                cells = (cells[0][keep], cells[1][keep])
                c.gpu_whole[cells] = True
                c.gpu_free[cells] = 0
            if f_nodes:
                cells = (np.array(f_nodes), np.array(f_gpus))
                keep = c.healthy[cells]
                np.subtract.at(c.gpu_free, (cells[0][keep], cells[1][keep]), np.array(f_blocks)[keep])
            c.free_whole[:] = (c.gpu_free == BLOCKS_PER_GPU).sum(axis=1)
            c.dirty.extend(touched.tolist())
            self.placer.node_of[b_pods] = nodes
        rest.sort(key=lambda p: (0 if p.pod.gpu_index else 1, p.start, p.key))
        for info in rest:
            node = c.index[info.pod.node_name or ""]
            blocks: int | None = None
            if info.fractional:
                blocks = info.blocks if info.blocks is not None else info.blocks_on(int(c.gpu_memory_mib[node]))
                blocks = blocks or 1
                gpus = tuple(g for g in info.pod.gpu_index[:1] if 0 <= g < width)
                if not gpus:
                    g = c.fractional_gpu_on(node, blocks, False)
                    gpus = (g,) if g is not None else ()
                if not gpus:
                    blocks = None  # nowhere to put it: holds cpu/memory only
            else:
                gpus = tuple(g for g in info.pod.gpu_index if 0 <= g < width)
                if len(gpus) != info.whole:
                    gpus = tuple(c.whole_gpus_for(node, info.whole, (), False))
            self.placer.commit(Assignment(info.idx, node, gpus, blocks))
        ours = [info for info in running if info.gang >= 0]
        gangs = self.gangs
        for info in ours:
            gangs[info.gang].alive += 1
        if ours and self.managed:
            # Queue usage of everything running, summed per leaf with NumPy, then added once per leaf.
            rows = np.array([i.idx for i in ours], dtype=np.int64)
            leaves = np.array([i.queue for i in ours], dtype=np.int64)
            usage = np.zeros((len(ours), len(self.managed)), dtype=np.int64)
            for j, r in enumerate(self.managed):
                if r == GPU:
                    usage[:, j] = [i.whole * 1000 + ((i.bound_blocks or i.blocks or 0) * 10 if i.fractional else 0)
                                   for i in ours]
                elif r in c.res_index and r != PODS:
                    usage[:, j] = self.requests[rows, c.res_index[r]]
            order = np.argsort(leaves, kind="stable")
            by_leaf, starts = np.unique(leaves[order], return_index=True)
            sums = np.add.reduceat(usage[order], starts, axis=0).tolist()
            for leaf, total in zip(by_leaf.tolist(), sums, strict=True):
                if leaf >= 0:
                    self.forest.add(leaf, total)

    def _build_victim_arrays(self) -> None:
        """Per-gang and per-pod arrays the victim search filters with NumPy.

        Only gangs running in the snapshot can be victims: work bound by this same replay is
        never evicted again by it (no flip-flop, and every pending pod ends bound or pending).
        """
        gangs, pods = self.gangs, self.pods
        self.g_queue = np.array([g.queue for g in gangs], dtype=np.int64)
        self.g_prio = np.array([g.priority for g in gangs], dtype=np.int64)
        self.g_rank = np.array([g.name_rank for g in gangs], dtype=np.int64)
        self.g_live = np.array([g.alive > 0 and g.preemptible for g in gangs], dtype=np.bool_)
        self.p_gang = np.array([p.gang for p in pods], dtype=np.int64)
        self.p_res = self.requests
        self.p_whole = np.array([p.whole for p in pods], dtype=np.int64)
        # GPUs a pod's eviction may turn back into whole free GPUs: a fractional pod may free one.
        self.p_gpus_freed = self.p_whole + np.array([1 if p.fractional else 0 for p in pods], dtype=np.int64)
        self.p_gang_clipped = np.maximum(self.p_gang, 0)
        bound = np.array([p.node is not None and p.gang >= 0 for p in pods], dtype=np.bool_)
        milli = np.array([p.whole * 1000 + (p.bound_blocks or 0) * 10 for p in pods], dtype=np.int64)
        start = np.array([p.start for p in pods], dtype=np.float64)
        self.g_cap = np.bincount(self.p_gang[bound], weights=milli[bound], minlength=len(gangs)).astype(np.int64)
        self.g_start = np.full(len(gangs), np.inf)
        np.minimum.at(self.g_start, self.p_gang[bound], start[bound])
        self.g_start[np.isinf(self.g_start)] = 0.0
        self.g_all = np.arange(len(gangs), dtype=np.int64)
        self.g_size = np.array([len(g.members) for g in gangs], dtype=np.int64)
        self.g_first_pod = np.array([g.members[0] for g in gangs], dtype=np.int64)
        self.q_live_count = np.bincount(
            np.maximum(self.g_queue[self.g_live], 0), minlength=len(self.forest.queues)
        ).astype(np.int64)
        self._g_quota: dict[int, list[int]] = {}
        self.g_queue_clipped = np.maximum(self.g_queue, 0)
        self.priorities = sorted(set(self.g_prio[self.g_live].tolist()))
        # Victim preference keys are fixed per gang: rank all gangs once.
        self.g_sorted_small = np.lexsort((self.g_rank, -self.g_start, self.g_cap))
        self.g_sorted_large = np.lexsort((self.g_rank, -self.g_start, -self.g_cap))
        self._small_cursor = 0
        self.g_order_small = np.empty(len(gangs), dtype=np.int64)
        self.g_order_small[self.g_sorted_small] = np.arange(len(gangs))
        self.g_order_large = np.empty(len(gangs), dtype=np.int64)
        self.g_order_large[self.g_sorted_large] = np.arange(len(gangs))

    def first_live_small(self) -> int:
        """Position in ``g_sorted_small`` of the first gang that may still be a victim.

        Gangs only ever stop being victims in a replay (evicted, or grown by it), so the walk
        resumes where the last one stopped instead of rescanning the dead prefix.
        """
        order, live = self.g_sorted_small, self.g_live
        at = self._small_cursor
        while at < len(order):
            window = live[order[at:at + 4096]]
            hit = int(np.argmax(window))
            if window[hit]:
                at += hit
                break
            at += len(window)
        self._small_cursor = at
        return at

    def gang_quota(self, g: int) -> list[int]:
        got = self._g_quota.get(g)
        if got is None:
            got = self.gang_request([m for m in self.gangs[g].members if self.pods[m].node is not None])
            self._g_quota[g] = got
        return got

    def live_pods_of(self, pool: BoolArray) -> IntArray:
        """Indices of bound pods belonging to the gangs of ``pool`` (a mask over gangs)."""
        return np.flatnonzero(pool[self.p_gang_clipped] & (self.p_gang >= 0) & (self.placer.node_of >= 0))

    def _check_overcommit(self) -> None:
        f = self.forest
        for j, r in enumerate(f.managed):
            for i in range(len(f.queues)):
                kids = f.children[i]
                if not kids or f.explicit_quota[i][j] == NONE:
                    continue
                total = sum(f.quota[c][j] for c in kids)
                if total > f.quota[i][j]:
                    self.warnings.append(
                        f"queue {f.name(i)}: children's {r} quotas add up to {fmt_amount(r, total)}, "
                        f"more than its quota of {fmt_amount(r, f.quota[i][j])} (over-committed)"
                    )
            top = sum(f.quota[q][j] for q in f.roots)
            cap = f.capacity[j]
            if top > cap:
                self.warnings.append(
                    f"top-level {r} quotas add up to {fmt_amount(r, top)}, more than the cluster's "
                    f"{fmt_amount(r, cap)} (over-committed)"
                )

    # -- gang facts --------------------------------------------------------------------------

    def pending_members(self, gang: Gang) -> list[int]:
        return [m for m in gang.members_by_size if self.pods[m].node is None and m not in self.evictions]

    def required(self, gang: Gang) -> int:
        """Pods that must start together now: minMember less the members already running."""
        return max(1, gang.min_member - gang.alive)

    def gang_request(self, members: list[int]) -> list[int]:
        total = [0] * len(self.managed)
        for m in members:
            for j, v in enumerate(self.quota_vec(self.pods[m])):
                total[j] += v
        return total

    # -- quota gates ------------------------------------------------------------------------

    def quota_gate(self, gang: Gang, request: list[int]) -> str:
        """Empty when the queue rules admit ``request`` now, else the reason."""
        leaf = gang.queue
        f = self.forest
        verdict = f.limit_verdict(leaf, request)
        if not verdict.ok:
            return verdict.reason
        if not gang.preemptible and not f.in_quota(leaf, request):
            j = next((j for j, v in enumerate(request) if v > 0), 0)
            left, quota, qname = f.quota_left(leaf, j)
            r = self.managed[j] if self.managed else GPU
            return (f"non-preemptible work must fit in quota: {qname} has {fmt_amount(r, max(left, 0))} "
                    f"of {unit(r, quota)} left, gang needs {fmt_amount(r, int(request[j]))}")
        if f.has_lending:
            held = f.reserved_against(leaf)
            free = self.free_capacity()
            for j, r in enumerate(self.managed):
                if request[j] > 0 and request[j] + held[j] > free[j]:
                    return (f"capacity lent out: other queues reserve {fmt_amount(r, int(held[j]))} of "
                            f"the {fmt_amount(r, int(max(free[j], 0)))} {r} free (lendingLimit)")
        return ""

    def free_capacity(self) -> list[int]:
        c = self.cluster
        out = [0] * len(self.managed)
        sched = c.schedulable
        for j, r in enumerate(self.managed):
            if r == GPU:
                cells = c.gpu_free[sched]
                whole = c.gpu_whole[sched]
                out[j] = int(np.where((cells > 0) & ~whole, cells, 0).sum()) * 10
            elif r in c.res_index:
                out[j] = sum(c.free[sched, c.res_index[r]].tolist())  # Python ints: no int64 overflow
        return out

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> Decisions:
        while True:
            self.cycles += 1
            if not self.cycle():
                break
        return self.decisions()

    def candidates(self) -> dict[int, list[int]]:
        """Candidate gangs per leaf queue, in the queue's own order."""
        per_leaf: dict[int, list[int]] = {}
        for g in self.open_gangs:
            gang = self.gangs[g]
            if gang.evicted or gang.queue < 0:
                continue
            pending = self.pending_members(gang)
            if not pending:
                continue
            total = len(gang.members)
            if gang.alive == 0 and total < gang.min_member:
                gang.pending_reason = (f"gang {gang.key} has {total} of minMember {gang.min_member} pods")
                continue
            per_leaf.setdefault(gang.queue, []).append(gang.idx)
        for leaf, lst in per_leaf.items():
            lst.sort(key=lambda g: (-self.gangs[g].priority, self.gangs[g].creation, self.gangs[g].key))
            per_leaf[leaf] = lst
        return per_leaf

    def cycle(self) -> bool:
        per_leaf = self.candidates()
        pointer = dict.fromkeys(per_leaf, 0)
        changed = False
        requests: dict[int, list[int]] = {}
        while True:
            heads = {leaf: lst[pointer[leaf]] for leaf, lst in per_leaf.items() if pointer[leaf] < len(lst)}
            if not heads:
                break
            for g in heads.values():
                if g not in requests:
                    requests[g] = self.gang_request(self.pending_members(self.gangs[g]))
            chosen = self.pick(heads, requests)
            gang = self.gangs[chosen]
            pointer[gang.queue] += 1
            request = requests.pop(chosen)
            sig = self.failure_signature(gang, request)
            known = self.failed.get(sig) if sig is not None else None
            if known is not None and known[0] == self.version:
                result = Attempt(False, known[1])  # same pod, same state: the same failure
            else:
                result = self.attempt(gang, request)
                if not result.ok and sig is not None:
                    self.failed[sig] = (self.version, result.reason)
            if result.ok:
                changed = True
                self.gangs[chosen].pending_reason = ""
            else:
                self.gangs[chosen].pending_reason = result.reason
        return changed

    def failure_signature(self, gang: Gang, request: list[int]) -> tuple[object, ...] | None:
        """What an attempt of a lone pod depends on, besides the state; None for other gangs.

        Backlogs are mostly many pods alike (same queue, priority, requests, constraints). Once
        one fails, the others fail the same way until the state changes (``version``), so they
        reuse its reason instead of repeating the placement and victim search.
        """
        if not self.MEMO_FAILURES or gang.group is not None or gang.alive or len(gang.members) != 1:
            return None
        info = self.pods[gang.members[0]]
        return (gang.queue, gang.priority, gang.preemptible, static_key(info.pod), info.res.tobytes(),
                info.whole, info.blocks, info.gpu_mem_bytes, tuple(request))

    def pick(self, heads: dict[int, int], requests: dict[int, list[int]]) -> int:
        """The next gang to try: in-quota heads first, then fair order level by level."""
        f = self.forest
        if self._pick_state != (self.committed, self.cycles):
            # Usage only changes when something is admitted or evicted: until then the in-quota
            # tests and fair-order keys of earlier picks still hold.
            self._pick_state = (self.committed, self.cycles)
            self._in_quota.clear()
            self._share_keys.clear()
        in_quota_of = self._in_quota
        in_quota: dict[int, bool] = {}
        for leaf, g in heads.items():
            got = in_quota_of.get(g)
            if got is None:
                got = in_quota_of[g] = f.in_quota(leaf, requests[g])
            in_quota[leaf] = got
        pool = {leaf: g for leaf, g in heads.items() if in_quota[leaf]} or heads
        borrowing = not any(in_quota.values())
        contains: dict[int, int] = {}  # queue -> best head below it

        def tiebreak(g: int) -> tuple[int, float, str]:
            gang = self.gangs[g]
            return (-gang.priority, gang.creation, gang.key)

        keys = self._share_keys

        def key(q: int) -> float:
            got = keys.get((q, borrowing))
            if got is None:
                got = keys[(q, borrowing)] = f.borrowed_share(q) if borrowing else f.dominant_usage(q)
            return got

        def best(q: int) -> int | None:
            if q in contains:
                return contains[q]
            if f.is_leaf(q):
                rep = pool.get(q)
            else:
                options = [(c, b) for c in f.children[q] if (b := best(c)) is not None]
                rep = min(options, key=lambda cb: (key(cb[0]), tiebreak(cb[1])))[1] if options else None
            if rep is not None:
                contains[q] = rep
            return rep

        roots = [(r, b) for r in f.roots if (b := best(r)) is not None]
        return min(roots, key=lambda rb: (key(rb[0]), tiebreak(rb[1])))[1]

    # -- one attempt ---------------------------------------------------------------------------

    def try_place(self, gang: Gang, members: list[int], request: list[int]) -> GangPlacement:
        """Quota gates, then placement on what is free now (committed on success)."""
        reason = self.quota_gate(gang, request)
        if reason:
            return GangPlacement(False, reason=reason)
        return self.placer.place_gang(gang, members, self.required(gang))

    def attempt(self, gang: Gang, request: list[int]) -> Attempt:
        members = self.pending_members(gang)
        placed = self.try_place(gang, members, request)
        if placed.ok:
            self.record(gang, placed)
            return Attempt(True)
        victims, why, verified = find_victims(self, gang, members, request)
        if victims is None:
            return Attempt(False, placed.why() + (f"; {why}" if why else ""))
        by = self.pods[min(members, key=lambda m: self.pods[m].key)].key
        for v in victims:
            self.evict_gang(self.gangs[v], gang, by)
        if verified is not None:  # the state now is the one the victim check placed the gang on
            for a in verified.assignments:
                self.placer.commit(a)
            placed = verified
        else:
            placed = self.try_place(gang, members, request)
        assert placed.ok, "victim set was checked to make the gang fit"
        self.record(gang, placed)
        return Attempt(True)

    def record(self, gang: Gang, placed: GangPlacement) -> None:
        if self.g_live[gang.idx]:
            # A gang that gained pods in this replay is not evicted by it again: no flip-flop,
            # and every pod that was pending ends bound or pending, never bound-then-evicted.
            self.g_live[gang.idx] = False
            self.q_live_count[max(gang.queue, 0)] -= 1
        self.version += 1
        self.committed += 1
        for a in placed.assignments:
            info = self.pods[a.pod]
            self.bindings[a.pod] = a
            gang.alive += 1
            self.forest.add(info.queue, self.quota_vec(info))

    def unbind(self, pod: int) -> None:
        self.version += 1
        info = self.pods[pod]
        self.forest.add(info.queue, self.quota_vec(info), -1)
        self.placer.release(pod)
        self.gangs[info.gang].alive -= 1

    def rebind(self, pod: int, node: int, gpus: tuple[int, ...], blocks: int | None) -> None:
        self.version += 1
        self.placer.commit(Assignment(pod, node, gpus, blocks))
        info = self.pods[pod]
        self.gangs[info.gang].alive += 1
        self.forest.add(info.queue, self.quota_vec(info))

    def evict_gang(self, victim: Gang, by_gang: Gang, by: PodKey) -> None:
        reason = EvictionReason.PREEMPT if victim.queue == by_gang.queue else EvictionReason.RECLAIM
        for m in victim.members:
            if self.pods[m].node is not None:
                self.unbind(m)
                self.evictions[m] = Eviction(self.pods[m].key, reason, by)
                self.bindings.pop(m, None)
        victim.evicted = True
        self.committed += 1
        if self.g_live[victim.idx]:
            self.g_live[victim.idx] = False
            self.q_live_count[max(victim.queue, 0)] -= 1

    # -- output ------------------------------------------------------------------------------

    def decisions(self) -> Decisions:
        bindings = []
        for m, a in self.bindings.items():
            node = self.cluster.nodes[a.node].name
            bindings.append(Binding(self.pods[m].key, NodeName(node), tuple(sorted(a.gpus)), a.blocks))
        pending = []
        for g in self.open_gangs:
            gang = self.gangs[g]
            for m in gang.members:
                info = self.pods[m]
                if info.pod.bound or m in self.bindings or m in self.evictions:
                    continue
                pending.append(PendingPod(info.key, gang.pending_reason or "not tried"))
        return Decisions(
            bindings=tuple(sorted(bindings, key=lambda b: b.pod)),
            evictions=tuple(sorted(self.evictions.values(), key=lambda e: e.pod)),
            pending=tuple(sorted(pending, key=lambda p: p.pod)),
            warnings=tuple(self.warnings),
            cycles=self.cycles,
        )


def schedule(snapshot: Snapshot) -> Decisions:
    """Decide admission, placement and preemption for every pending pod of ours."""
    # The engine builds tens of thousands of small objects that die by reference counting; the
    # cyclic collector would rescan all of them many times over (~10% of a large call) for
    # nothing, so it is paused for the call. Outputs do not depend on it.
    paused = gc.isenabled()
    gc.disable()
    try:
        return Engine(snapshot).run()
    finally:
        if paused:
            gc.enable()
