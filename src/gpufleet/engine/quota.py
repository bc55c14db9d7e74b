"""What work counts against its queues, the queue gates a gang must pass before placement, and
the warnings about quotas that promise more than there is.

A pod's quota request is over the forest's *managed* resources (see queues.py); a fractional
pod counts its blocks (bound, annotated, or on the smallest GPU that holds its memory). The gates
(limits, quota for non-preemptible work, capacity reserved by lending limits) are checked before
any placement, by admission and by every victim check alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from gpufleet.domain import GPU, MILLI, MILLI_PER_BLOCK
from gpufleet.engine.cluster import ClusterState
from gpufleet.engine.flavors import FlavorBook
from gpufleet.engine.queues import NONE, QueueForest, fmt_amount, unit
from gpufleet.engine.workload import Gang, PodInfo

__all__ = ["QuotaGates", "overcommit_warnings"]


class QuotaGates:
    """Quota requests of pods and gangs, and the queue rules' verdict on them, on the live state."""

    def __init__(self, forest: QueueForest, cluster: ClusterState, pods: Sequence[PodInfo],
                 flavors: FlavorBook | None = None) -> None:
        self.forest = forest
        self.flavors = flavors  # GPU-model quotas (engine/flavors.py): None when no queue lists one
        self.cluster = cluster
        self.pods = pods
        self.managed = forest.managed
        mib = cluster.gpu_memory_mib
        # gang_request's last row of whole-GPU pods by (GPUs, leaf, flavor, unbound): (request mapping, quota_vec)
        self._rows: dict[tuple[int, int, int, bool], tuple[Mapping[str, int], list[int]]] = {}
        self._smallest_gpu_mib: list[int] = np.unique(mib[mib > 0]).tolist()  # ascending, no repeats

    def counted_blocks(self, info: PodInfo) -> int | None:
        """The blocks a fractional pod counts against GPU quota (None for a whole-GPU pod): those it
        holds, else those it asks for, else (gpu-memory, no GPU) those it takes on the smallest GPU
        that holds it."""
        if not info.fractional:
            return None
        blocks = info.bound_blocks
        if blocks is None:
            blocks = info.blocks
        if blocks is None:
            blocks = next((b for m in self._smallest_gpu_mib if (b := info.blocks_on(m)) is not None), 0)
        return blocks

    def gpu_milli(self, info: PodInfo) -> int:
        """What one pod counts against GPU quota, in milli-GPU (the GPU entry of :meth:`quota_vec`)."""
        blocks = self.counted_blocks(info)
        return info.whole * MILLI if blocks is None else blocks * MILLI_PER_BLOCK

    def quota_vec(self, info: PodInfo) -> list[int]:
        """What one pod counts against quota, over the managed resources."""
        requests = info.pod.requests
        milli = self.gpu_milli(info)
        vec = [milli if r == GPU else requests.get(r, 0) for r in self.managed]
        flavors = self.flavors
        if flavors is not None and info.queue in flavors.leaf_flavors:
            return flavors.move(info, vec, milli)
        return vec

    def gang_request(self, members: list[int]) -> list[int]:
        """What ``members`` (pod indices) count against quota together."""
        total = [0] * len(self.managed)
        pods = self.pods
        # Members alike in a row count alike: one quota_vec for the row, which reads only these of a
        # whole-GPU pod (its request mapping, the same or an equal one; its GPUs, leaf and flavor;
        # whether it is bound in the snapshot, with flavors), added times the row's length.
        last: Mapping[str, int] | None = None  # the row's request mapping (None: no row a pod may join)
        whole = queue = flavor = 0
        unbound = False
        vec: list[int] = []
        count = 0
        for m in members:
            info = pods[m]
            pod = info.pod
            requests = pod.requests
            if info.blocks is None and info.gpu_mem_bytes is None:  # not fractional
                if last is not None and info.whole == whole and info.queue == queue and info.flavor == flavor \
                        and (pod.node_name is None) == unbound and (requests is last or requests == last):
                    count += 1
                    continue
                key: Mapping[str, int] | None = requests
            else:
                key = None
            if count:
                for j, v in enumerate(vec):
                    total[j] += v * count
            last, count = key, 1
            whole, queue, flavor, unbound = info.whole, info.queue, info.flavor, pod.node_name is None
            row = self._rows.get((whole, queue, flavor, unbound)) if key is not None else None
            if row is not None and (row[0] is key or row[0] == key):
                vec = row[1]  # as for the last gang with such a row: gangs alike ask alike
            else:
                vec = self.quota_vec(info)
                if key is not None:
                    self._rows[whole, queue, flavor, unbound] = (key, vec)  # read, never changed
        if count:
            for j, v in enumerate(vec):
                total[j] += v * count
        return total

    def gate(self, gang: Gang, request: list[int]) -> str:
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
        """Free capacity of schedulable nodes over the managed resources, in milli-units."""
        c = self.cluster
        out = [0] * len(self.managed)
        sched = c.schedulable
        for j, r in enumerate(self.managed):
            if r == GPU:
                cells = c.gpu_free[sched]
                whole = c.gpu_whole[sched]
                out[j] = int(np.where((cells > 0) & ~whole, cells, 0).sum()) * MILLI_PER_BLOCK
            elif r in c.res_index:
                out[j] = sum(c.free[sched, c.res_index[r]].tolist())  # Python ints: no int64 overflow
        return out


def overcommit_warnings(forest: QueueForest) -> list[str]:
    """Quotas that promise more than there is: children over their parent, top level over the cluster.

    Legal (quota is a guarantee only as far as capacity allows), but worth saying once per call.
    """
    f = forest
    warnings: list[str] = []
    for j, r in enumerate(f.managed):
        for i in range(len(f.queues)):
            kids = f.children[i]
            if not kids or f.explicit_quota[i][j] == NONE:
                continue
            total = sum(f.quota[c][j] for c in kids)
            if total > f.quota[i][j]:
                warnings.append(
                    f"queue {f.name(i)}: children's {r} quotas add up to {fmt_amount(r, total)}, "
                    f"more than its quota of {fmt_amount(r, f.quota[i][j])} (over-committed)"
                )
        top = sum(f.quota[q][j] for q in f.roots)
        cap = f.capacity[j]
        if top > cap:
            warnings.append(
                f"top-level {r} quotas add up to {fmt_amount(r, top)}, more than the cluster's "
                f"{fmt_amount(r, cap)} (over-committed)"
            )
    return warnings
