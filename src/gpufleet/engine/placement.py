"""Placement of gangs, all-or-nothing, on the NumPy cluster state.

A pod's node is the argmin of a score over all feasible nodes (vectorised); nodes are in name
order so ties fall to the first name. Gangs place pod after pod on the live state and roll back
wholly when one pod does not fit. Topology-constrained gangs try whole domains, tightest first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from gpufleet.domain import CPU, MEMORY, Placement, VolumeBinding
from gpufleet.domain.selectors import NamespaceLabels
from gpufleet.engine.cluster import BoolArray, ClusterState, IntArray
from gpufleet.engine.feasibility import SOFT_CAP, StaticFeasibility, soft_normal
from gpufleet.engine.fit import ResourceFit, blocks_for_memory, gpu_fit, node_fit, share_cells
from gpufleet.engine.fragmentation import DefragScorer, TargetWorkload
from gpufleet.engine.interpod import InterPod, Narrowing
from gpufleet.engine.nodeindex import FALLBACK, DomainSums, FreeGpuIndex
from gpufleet.engine.ports import HostPorts, describe_port
from gpufleet.engine.volumes import VolumeBook
from gpufleet.engine.workload import Gang, PodInfo
from gpufleet.policy import no_pool_node_reason, outside_pools_reason

BIG = np.int64(1) << np.int64(40)
INF = np.iinfo(np.int64).max


@dataclass
class Assignment:
    pod: int
    node: int
    gpus: tuple[int, ...]
    blocks: int | None


@dataclass
class GangPlacement:
    ok: bool
    assignments: list[Assignment] = field(default_factory=list)
    reason: str = ""
    # Reasons cost a pass over all nodes: built only when one is shown (same state as at failure).
    explain: Callable[[], str] | None = None

    def why(self) -> str:
        return self.explain() if self.explain is not None else self.reason


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


class Placer:
    # Set False (on the class or an instance) to decide without the node indexes: the free-GPU
    # index, domain sums (engine/nodeindex.py) and passes over a domain's nodes only. The
    # decisions must be the same.
    USE_INDEX = True

    def __init__(self, cluster: ClusterState, feasibility: StaticFeasibility, pods: list[PodInfo],
                 policy: Placement, target: TargetWorkload | None = None,
                 volumes: VolumeBook | None = None, namespaces: NamespaceLabels | None = None) -> None:
        self.cluster = cluster
        self.feasibility = feasibility
        self.pods = pods
        self.spread = policy == Placement.SPREAD
        # defrag: built on first use; the target defaults to the shapes of the pods known then.
        self.defrag = policy == Placement.DEFRAG
        self._target = target
        self._scorer: DefragScorer | None = None
        self._domains: dict[str, tuple[IntArray, list[str]]] = {}
        self.nvlink = [n.nvlink_domains for n in cluster.nodes]
        self.node_of: IntArray = np.full(len(pods), -1, dtype=np.int64)
        # Host ports in use (NodePorts): built on the first pod that asks for one, from the pods
        # bound then, and kept up to date after; a snapshot without host ports never pays for it.
        self._ports: HostPorts | None = None
        # Claims, PV choices and ReadWriteOncePod users: None when no pod of ours names a claim.
        self.volumes = volumes
        # Inter-pod affinity, anti-affinity and topology spread: None when no pod has such a rule.
        self.interpod = InterPod.build(cluster.nodes, feasibility, pods, namespaces)
        # Soft node penalties (docs/semantics-notes.md, "Soft scores"): asked for only when some
        # pod or node can have one.
        self.soft = self.interpod is not None or feasibility.has_soft_taints or any(
            map(attrgetter("pod.preferred_affinity"), pods))
        # Nodes bucketed by free whole GPUs per feasibility class (engine/nodeindex.py): the
        # common whole-GPU placement without a pass over every node. Built on first use.
        self._index: FreeGpuIndex | None = None
        # Per topology label, the nodes of each domain; per (label, pod shape), domain sums.
        self._domain_nodes: dict[str, list[IntArray]] = {}
        self._sums: dict[tuple[object, ...], DomainSums] = {}
        # Per request vector, the nodes whose free resources cover it (fit.ResourceFit).
        self._fits: dict[bytes, ResourceFit] = {}

    # -- state changes --------------------------------------------------------------------

    def commit(self, a: Assignment) -> None:
        info = self.pods[a.pod]
        self.cluster.take(a.node, info.res, a.gpus, a.blocks)
        info.node, info.gpus, info.bound_blocks = a.node, a.gpus, a.blocks
        self.node_of[a.pod] = a.node
        if self._ports is not None and info.pod.host_ports:
            self._ports.change(a.node, info.pod.host_ports, 1)
        if self.interpod is not None:
            self.interpod.add(a.pod, a.node, 1)
        if self.volumes is not None:
            self.volumes.take(a.pod, a.node)

    def commit_many(self, pods: IntArray, nodes: IntArray, res: IntArray, whole: tuple[IntArray, IntArray],
                    shares: tuple[IntArray, IntArray, IntArray]) -> None:
        """``commit`` for pods bound in bulk (a snapshot's running pods): ``pods[i]`` is on
        ``nodes[i]``; ``res``, ``whole`` and ``shares`` are as for ``ClusterState.take_many``.
        The caller has set each PodInfo's node, GPUs and blocks while collecting them."""
        self.cluster.take_many(nodes, res, whole, shares)
        self.node_of[pods] = nodes
        # Host ports need nothing here: their table is built on the first query from the pods bound then.
        assert self._ports is None, "bulk binds come before any host-port query"
        if self.interpod is not None:
            self.interpod.add_many(pods, nodes)
        if self.volumes is not None:
            self.volumes.take_many(pods)

    def release(self, pod: int) -> None:
        info = self.pods[pod]
        assert info.node is not None
        self.cluster.give_back(info.node, info.res, info.gpus, info.bound_blocks)
        if self._ports is not None and info.pod.host_ports:
            self._ports.change(info.node, info.pod.host_ports, -1)
        if self.interpod is not None:
            self.interpod.add(pod, info.node, -1)
        if self.volumes is not None:
            self.volumes.give_back(pod)
        info.node, info.gpus, info.bound_blocks = None, (), None
        self.node_of[pod] = -1

    @property
    def ports(self) -> HostPorts:
        """Host ports in use per node, built from the pods bound now on first use."""
        if self._ports is None:
            self._ports = HostPorts(len(self.cluster.nodes))
            for info in self.pods:
                if info.node is not None and info.pod.host_ports:
                    self._ports.change(info.node, info.pod.host_ports, 1)
        return self._ports

    # -- one pod ----------------------------------------------------------------------------

    def _blocks_by_node(self, info: PodInfo) -> IntArray:
        """Blocks a fractional pod needs on each node (0: cannot go there)."""
        if info.blocks is not None:
            return np.full(len(self.cluster.nodes), info.blocks, dtype=np.int64)
        return blocks_for_memory(info.gpu_mem_bytes or 0, self.cluster.gpu_memory_mib)

    def fit_mask(self, info: PodInfo, within: BoolArray | None = None,
                 narrowed: Narrowing | None = None) -> BoolArray:
        """Nodes where the pod fits now (static feasibility and free capacity). ``narrowed``: the
        pod's node selection narrowed to those nodes (``within`` them too), for its inter-pod rules
        (InterPod.mask)."""
        c = self.cluster
        mask = self.feasibility.mask(info.pod)
        if within is not None:
            mask = mask & within
        if info.pod.host_ports:
            mask = mask & self.ports.free_mask(info.pod.host_ports)
        if self.interpod is not None:
            rules = self.interpod.mask(info.idx, narrowed)
            if rules is not None:
                mask = mask & rules
        if self.volumes is not None:
            claims = self.volumes.mask(info.idx)
            if claims is not None:
                mask = mask & claims
        if not self.USE_INDEX:
            return node_fit(c, mask, info.res, info.whole)
        # node_fit, with the resource test kept per request vector from the nodes changed since.
        key = info.res.tobytes()
        fit = self._fits.get(key)
        if fit is None:
            if len(self._fits) >= 64:
                return node_fit(c, mask, info.res, info.whole)
            fit = self._fits[key] = ResourceFit(c, info.res)
        mask = mask & fit.mask()
        if info.whole:
            mask &= gpu_fit(c, info.whole)
        return mask

    def best_node(self, info: PodInfo, within: BoolArray | None = None,
                  rank: IntArray | None = None, nodes: IntArray | None = None) -> Assignment | None:
        """Where the pod goes now (None: nowhere), among ``within`` (a mask) or ``nodes`` (the
        same nodes as ascending indexes: ``within`` may then be left None, and the choice costs
        a pass over those nodes only)."""
        if self.soft:
            rank = self._soft_rank(info, rank)
        if nodes is not None:
            if rank is None and not self.defrag and not info.fractional and self.USE_INDEX:
                return self._subset_node(info, nodes)
            if within is None:
                within = np.zeros(len(self.cluster.nodes), dtype=np.bool_)
                within[nodes] = True
        if self.defrag:
            return self._defrag_node(info, within, rank)
        c = self.cluster
        if info.whole and rank is None and within is None and not info.fractional and self.USE_INDEX:
            node = self._indexed_node(info)
            if node != FALLBACK:
                if node < 0:
                    return None
                gpus = c.whole_gpus_for(node, info.whole, self.nvlink[node], self.spread)
                return Assignment(info.idx, node, tuple(gpus), None)
        mask = self.fit_mask(info, within)
        if info.fractional:
            need = self._blocks_by_node(info)
            ok = share_cells(c, need) & mask[:, None]
            if not ok.any():
                return None
            width = c.gpu_free.shape[1] + 1
            score = c.gpu_free * width + c.free_whole[:, None]
            if self.spread:
                score = -score
            if rank is not None:
                score = score + rank[:, None] * BIG
            flat = int(np.argmin(np.where(ok, score, INF)))
            node, gpu = divmod(flat, c.gpu_free.shape[1])
            return Assignment(info.idx, node, (gpu,), int(need[node]))
        if not mask.any():
            return None
        if info.whole:
            score = -c.free_whole if self.spread else c.free_whole.copy()
        else:
            cpu = c.free[:, 0]
            score = c.gpu_count * BIG + (-cpu if self.spread else cpu)
        if rank is not None:
            score = score + rank * (BIG * 64)
        node = int(np.argmin(np.where(mask, score, INF)))
        gpus = c.whole_gpus_for(node, info.whole, self.nvlink[node], self.spread)
        return Assignment(info.idx, node, tuple(gpus), None)

    def _subset_node(self, info: PodInfo, nodes: IntArray) -> Assignment | None:
        """``best_node`` restricted to ``nodes`` (ascending) for a pod of whole GPUs or none, with
        no rank: the same masks and scores as the pass over all nodes, on those nodes only (the
        first index among equals is still the first node)."""
        c = self.cluster
        pod = info.pod
        mask = self.feasibility.mask(pod)[nodes]
        if pod.host_ports:
            mask &= self.ports.free_mask(pod.host_ports)[nodes]
        if self.interpod is not None:
            rules = self.interpod.mask(info.idx)
            if rules is not None:
                mask &= rules[nodes]
        if self.volumes is not None:
            claims = self.volumes.mask(info.idx)
            if claims is not None:
                mask &= claims[nodes]
        cols = np.flatnonzero(info.res)
        mask &= (c.free[nodes][:, cols] >= info.res[cols]).all(axis=1)
        free_whole = c.free_whole[nodes]
        if info.whole:
            mask &= free_whole >= info.whole
        if not mask.any():
            return None
        if info.whole:
            score = -free_whole if self.spread else free_whole
        else:
            cpu = c.free[nodes, 0]
            score = c.gpu_count[nodes] * BIG + (-cpu if self.spread else cpu)
        node = int(nodes[int(np.argmin(np.where(mask, score, INF)))])
        gpus = c.whole_gpus_for(node, info.whole, self.nvlink[node], self.spread)
        return Assignment(info.idx, node, tuple(gpus), None)

    def domain_nodes(self, label: str) -> list[IntArray]:
        """The nodes of each domain of a topology label (as coded by ``domains``), ascending."""
        got = self._domain_nodes.get(label)
        if got is None:
            codes, names = self.domains(label)
            order = np.argsort(codes, kind="stable")
            bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
            got = [order[bounds[d]:bounds[d + 1]] for d in range(len(names))]
            self._domain_nodes[label] = got
        return got

    def _indexed_node(self, info: PodInfo) -> int:
        """The node of a whole-GPU pod from the free-GPU index (-1: none fits), or ``FALLBACK``
        when the pod has a rule the index does not know (host ports, inter-pod rules, claims)."""
        pod = info.pod
        if pod.host_ports or (pod.claims and self.volumes is not None):
            return FALLBACK
        if self.interpod is not None and self.interpod.rules(info.idx):
            return FALLBACK
        index = self._index
        if index is None:
            index = self._index = FreeGpuIndex(self.cluster)
        feas = self.feasibility
        return index.choose(feas.key(pod), lambda: feas.mask(pod), info.whole, info.res, self.spread)

    def indexed_as(self, info: PodInfo, key: object, static: Callable[[], BoolArray]) -> tuple[bool, Assignment | None]:
        """:meth:`best_node` of the pod with its static mask replaced by ``static()`` (a narrowing
        of its own, named ``key``: GPU-model quotas' flavors, engine/flavors.py), from the free-GPU
        index: (True, the answer), or (False, None) where the index cannot give it (then place a
        pod whose own static mask is that one)."""
        if self.defrag or self.soft or not self.USE_INDEX or not info.whole or info.fractional:
            return False, None
        pod = info.pod
        if pod.host_ports or (pod.claims and self.volumes is not None):
            return False, None
        if self.interpod is not None and self.interpod.rules(info.idx):
            return False, None
        index = self._index
        if index is None:
            index = self._index = FreeGpuIndex(self.cluster)
        node = index.choose(key, static, info.whole, info.res, self.spread)
        if node == FALLBACK:
            return False, None
        if node < 0:
            return True, None
        gpus = self.cluster.whole_gpus_for(node, info.whole, self.nvlink[node], self.spread)
        return True, Assignment(info.idx, node, tuple(gpus), None)

    def narrowed_node(self, info: PodInfo, key: object, nodes: BoolArray) -> tuple[bool, Assignment | None]:
        """:meth:`best_node` of a copy of the pod whose node selector adds the labels that select
        exactly ``nodes`` (named ``key``: a flavor's, engine/flavors.py), answered from the pod itself:
        its static mask within ``nodes``, its inter-pod rules narrowed to them (``InterPod.mask``);
        neither its soft rank nor anything else of the placement depends on its node selector.
        (True, the answer) for a whole-GPU pod, not fractional, under the binpack or spread score;
        (False, None) otherwise (then place the copy)."""
        pod = info.pod
        if self.defrag or not info.whole or info.fractional or (pod.claims and self.volumes is not None):
            return False, None
        rank = self._soft_rank(info, None) if self.soft else None
        mask = self.fit_mask(info, nodes, (key, nodes))
        if not mask.any():
            return True, None
        c = self.cluster
        score = -c.free_whole if self.spread else c.free_whole.copy()
        if rank is not None:
            score = score + rank * (BIG * 64)
        node = int(np.argmin(np.where(mask, score, INF)))
        gpus = c.whole_gpus_for(node, info.whole, self.nvlink[node], self.spread)
        return True, Assignment(info.idx, node, tuple(gpus), None)

    def _soft_rank(self, info: PodInfo, rank: IntArray | None) -> IntArray | None:
        """``rank`` refined by the pod's node penalty (docs/semantics-notes.md, "Soft scores"):
        the static part (preferred node affinity, PreferNoSchedule taints) plus the inter-pod part
        (preferred terms both ways, ScheduleAnyway). The given rank first, then the penalty; the
        placement strategy breaks ties."""
        penalty = self.feasibility.preference(info.pod)
        if self.interpod is not None:
            pod_part = self.interpod.penalty(info.idx)
            if pod_part is not None:
                penalty = soft_normal(pod_part if penalty is None else penalty + pod_part)
        if penalty is None:
            return rank
        if rank is None:
            return penalty
        combined = rank * (int(penalty.max()) + 1) + penalty
        dense: IntArray = np.unique(combined, return_inverse=True)[1].astype(np.int64).reshape(-1)
        return np.minimum(dense, SOFT_CAP)

    def scorer(self) -> DefragScorer:
        if self._scorer is None:
            target = self._target or TargetWorkload.of_pods(p.pod for p in self.pods)
            self._scorer = DefragScorer(self.cluster, self.feasibility, target)
        return self._scorer

    def _defrag_node(self, info: PodInfo, within: BoolArray | None, rank: IntArray | None) -> Assignment | None:
        """``defrag``: least growth of the target workload's fragmentation (engine/fragmentation.py)."""
        mask = self.fit_mask(info, within)
        cpu, mem = int(info.pod.requests.get(CPU, 0)), int(info.pod.requests.get(MEMORY, 0))
        if info.fractional:
            need = self._blocks_by_node(info)
            share = self.scorer().choose_share(cpu, mem, info.blocks, info.gpu_mem_bytes, need, mask, rank)
            if share is None:
                return None
            node, gpu = share
            return Assignment(info.idx, node, (gpu,), int(need[node]))
        chosen = self.scorer().choose_whole(cpu, mem, info.whole, mask, rank)
        if chosen is None:
            return None
        gpus = self.cluster.whole_gpus_for(chosen, info.whole, self.nvlink[chosen], False)
        return Assignment(info.idx, chosen, tuple(gpus), None)

    def pod_reason(self, info: PodInfo, within: BoolArray | None = None, scope: str = "nodes") -> str:
        """Why a pod fits no node: per cause, how many nodes it rules out."""
        c = self.cluster
        n = len(c.nodes) if within is None else int(within.sum())
        if n == 0:
            return f"no {scope}"
        if self.volumes is not None:
            waiting = self.volumes.wait_reason(info.idx) or self.volumes.in_use(info.idx)
            if waiting:
                return waiting
        report = self.feasibility.report(info.pod)
        project = report.project
        if project is not None and not self.feasibility.pool_mask(project).any():
            return no_pool_node_reason(project)
        static = self.feasibility.mask(info.pod)
        if within is not None:
            static = static & within
        causes: list[str] = []
        if report.unschedulable:
            causes.append(f"{report.unschedulable} unschedulable")
        if project is not None and report.pools:
            causes.append(outside_pools_reason(project, report.pools))
        only_taint = None
        for taint, count in report.taints.items():
            causes.append(f"{count} with untolerated taint {taint}")
            if count == len(c.nodes) - report.unschedulable and not report.pools:
                only_taint = taint
        if report.selector:
            causes.append(f"{report.selector} not matching nodeSelector/affinity")
        if report.devices:
            causes.append(f"{report.devices} without devices for its resource claims")
        left = static.copy()
        for port in info.pod.host_ports:
            taken = left & self.ports.conflicts(port)
            if taken.any():
                causes.append(f"{int(taken.sum())} with host port {describe_port(port)} in use")
                left &= ~taken
        for j in np.flatnonzero(info.res):
            short = left & (c.free[:, j] < info.res[j])
            if short.any():
                causes.append(f"{int(short.sum())} short of {c.resources[j]}")
                left &= ~short
        if info.whole:
            short = left & (c.free_whole < info.whole)
            if short.any():
                best = int(c.free_whole[left].max()) if left.any() else 0
                causes.append(
                    f"{int(short.sum())} without {plural(info.whole, 'free GPU')} (most free on one node: {best})"
                )
                left &= ~short
        if info.fractional:
            need = self._blocks_by_node(info)
            no_mem = left & (need == 0)
            if no_mem.any():
                causes.append(f"{int(no_mem.sum())} without a GPU memory label or big enough GPU")
                left &= ~no_mem
            short = left & ~share_cells(c, need).any(axis=1)
            if short.any():
                causes.append(f"{int(short.sum())} without a GPU with {int(need[short].max())} free blocks")
                left &= ~short
        if self.interpod is not None:
            more, left = self.interpod.explain(info.idx, left)
            causes.extend(more)
        if self.volumes is not None:
            more, left = self.volumes.explain(info.idx, left)
            causes.extend(more)
        if only_taint is not None and not report.selector and not report.devices:
            return f"no node tolerates taint {only_taint}"
        fits = int(left.sum())
        head = f"0/{n} {scope} fit" if fits == 0 else f"{fits}/{n} {scope} fit"
        return head + (": " + ", ".join(causes) if causes else "")

    def volume_wait(self, members: Sequence[int]) -> str:
        """Why a gang waits for its pods' claims ("" when none waits): the first member's claim,
        a device claim (``Pod.device_wait``) before a volume claim."""
        for m in members:
            reason = self.pods[m].pod.device_wait or ""
            if reason:
                return reason if len(members) == 1 else f"{self.pods[m].key}: {reason}"
        if self.volumes is None:
            return ""
        for m in members:
            reason = self.volumes.wait_reason(m)
            if reason:
                return reason if len(members) == 1 else f"{self.pods[m].key}: {reason}"
        return ""

    def volume_choices(self) -> dict[int, tuple[VolumeBinding, ...]]:
        """The volumes chosen for each pod bound in this pass, by pod index."""
        return {} if self.volumes is None else self.volumes.choices

    def rule_signature(self, info: PodInfo) -> tuple[object, ...]:
        """What the pod's inter-pod rules depend on besides the state (empty: it has none)."""
        return () if self.interpod is None else self.interpod.signature(info.idx)

    # -- gangs ------------------------------------------------------------------------------

    def domains(self, label: str) -> tuple[IntArray, list[str]]:
        """Domain code of each node for a topology label (-1: no such label) and domain names."""
        got = self._domains.get(label)
        if got is None:
            names = sorted({n.labels[label] for n in self.cluster.nodes if label in n.labels})
            code = {v: i for i, v in enumerate(names)}
            arr = np.array([code.get(n.labels.get(label, ""), -1) if label in n.labels else -1
                            for n in self.cluster.nodes], dtype=np.int64)
            got = (arr, names)
            self._domains[label] = got
        return got

    def _rollback(self, placed: list[Assignment]) -> None:
        for a in reversed(placed):
            self.release(a.pod)

    def _try(self, members: Sequence[int], required: int, within: BoolArray | None,
             rank: IntArray | None, nodes: IntArray | None = None) -> tuple[list[Assignment] | None, int]:
        """Place pods one after another on the live state; keep them when at least ``required``
        fit, else roll all of them back. Also returns how many fitted."""
        placed: list[Assignment] = []
        for m in members:
            a = self.best_node(self.pods[m], within, rank, nodes)
            if a is not None:
                self.commit(a)
                placed.append(a)
        if len(placed) >= required:
            return placed, len(placed)
        self._rollback(placed)
        return None, len(placed)

    def gang_need(self, members: Sequence[int]) -> int:
        """GPUs (whole, or one per fractional pod) a set of pods needs, for domain pre-filters."""
        return sum(self.pods[m].whole or (1 if self.pods[m].fractional else 0) for m in members)

    def _domain_sums(self, codes: IntArray, n_domains: int, what: tuple[object, ...],
                     value: Callable[[IntArray], IntArray]) -> IntArray:
        """Per domain of ``codes``, the sum of ``value`` over its nodes, kept up to date between
        calls under ``what`` (what the value depends on besides the nodes' state)."""
        key = (id(codes), *what)
        got = self._sums.get(key)
        if got is None:
            if len(self._sums) >= 256 or not self.USE_INDEX:  # many shapes: no longer kept
                ok = codes >= 0
                everything = np.flatnonzero(ok)
                return np.bincount(codes[ok], weights=value(everything), minlength=n_domains).astype(np.int64)
            got = self._sums[key] = DomainSums(self.cluster, codes, n_domains, value)
        return got.get(value)

    def _domain_free(self, codes: IntArray, n_domains: int, members: Sequence[int]) -> IntArray:
        """Free whole GPUs per domain on the nodes the first member may use."""
        pod = self.pods[members[0]].pod
        static = self.feasibility.mask(pod)
        cluster = self.cluster

        def free(nodes: IntArray) -> IntArray:
            out: IntArray = np.where(static[nodes], cluster.free_whole[nodes], 0)
            return out

        return self._domain_sums(codes, n_domains, ("free", self.feasibility.key(pod)), free)

    def place_gang(self, gang: Gang, members: Sequence[int], required: int) -> GangPlacement:
        """Place at least ``required`` of ``members`` (all when possible), committing on success,
        with the gang's own strategy (its PodGroup's ``placement``) where it has one."""
        own = gang.group.placement if gang.group is not None else None
        if own is None:
            return self._place_gang(gang, members, required)
        policy = self.spread, self.defrag
        self.spread, self.defrag = own == Placement.SPREAD, False
        try:
            return self._place_gang(gang, members, required)
        finally:
            self.spread, self.defrag = policy

    def _place_gang(self, gang: Gang, members: Sequence[int], required: int) -> GangPlacement:
        if gang.topology_required:
            return self._place_required(gang, members, required)
        if gang.topology_preferred:
            return self._place_preferred(gang, members, required, None)
        placed, count = self._try(members, required, None, None)
        if placed is not None:
            return GangPlacement(True, placed)
        if len(members) == 1:
            info = self.pods[members[0]]
            return GangPlacement(False, explain=lambda: self.pod_reason(info))
        first_fail = self._first_unplaceable(members)
        detail = f"; {first_fail}" if first_fail else ""
        return GangPlacement(
            False, reason=f"gang of {required} does not fit: {count} of {required} placeable{detail}"
        )

    def _first_unplaceable(self, members: Sequence[int]) -> str:
        for m in members:
            if not self.fit_mask(self.pods[m]).any() and not self.pods[m].fractional:
                return f"{self.pods[m].key}: {self.pod_reason(self.pods[m])}"
        return ""

    def copies_per_node(self, info: PodInfo, nodes: IntArray | None = None) -> IntArray:
        """How many more copies of this pod each node (of ``nodes``, default all) could take now
        (0 where infeasible)."""
        c = self.cluster
        rows = slice(None) if nodes is None else nodes
        copies: IntArray = np.where(self.feasibility.mask(info.pod)[rows], np.int64(1) << np.int64(30), 0)
        for j in np.flatnonzero(info.res):
            copies = np.minimum(copies, c.free[rows, j] // info.res[j])
        if info.whole:
            copies = np.minimum(copies, c.free_whole[rows] // info.whole)
        if info.pod.host_ports:  # two copies never share a host port
            copies = np.minimum(copies, self.ports.free_mask(info.pod.host_ports)[rows].astype(np.int64))
        return copies

    def _ordered_domains(self, codes: IntArray, names: list[str], members: Sequence[int],
                         need: int, count: int | None = None) -> list[int]:
        free = self._domain_free(codes, len(names), members)
        cands: IntArray = np.flatnonzero(free >= need)
        first = self.pods[members[0]]
        same = all(
            self.pods[m].whole == first.whole and not self.pods[m].fractional
            and np.array_equal(self.pods[m].res, first.res) and self.pods[m].pod.tolerations == first.pod.tolerations
            and self.pods[m].pod.node_selector == first.pod.node_selector
            and self.pods[m].pod.affinity == first.pod.affinity
            for m in members
        )
        if same and len(cands):
            # Identical pods: a domain must hold that many copies, counted node by node.
            if first.pod.host_ports:  # the host-port table is not part of a node's own state
                ok = codes >= 0
                copies = np.bincount(codes[ok], weights=self.copies_per_node(first)[ok], minlength=len(names))
            else:
                copies = self._domain_sums(
                    codes, len(names), ("copies", self.feasibility.key(first.pod), first.res.tobytes(), first.whole),
                    lambda nodes: self.copies_per_node(first, nodes))
            cands = cands[copies[cands] >= (count if count is not None else len(members))]
        # Tightest (binpack) or loosest (spread) first; names are sorted, so ties by name are by code.
        order = np.argsort(-free[cands] if self.spread else free[cands], kind="stable")
        out: list[int] = cands[order].tolist()
        return out

    def _place_required(self, gang: Gang, members: Sequence[int], required: int) -> GangPlacement:
        assert gang.topology_required is not None
        label = gang.topology_required
        codes, names = self.domains(label)
        need = self.gang_need(members[:required]) if required < len(members) else self.gang_need(members)
        level = label.rsplit("/", 1)[-1]
        # Members already running fix the domain: pods added to a running gang join them.
        running = {int(codes[self.pods[m].node]) for m in gang.members
                   if self.pods[m].node is not None and m not in members}
        # All pending members when some domain holds them all, else at least `required` of them.
        for count in dict.fromkeys((len(members), required)):
            domains = self._ordered_domains(codes, names, members, self.gang_need(members[:count]), count)
            if running:
                domains = [d for d in domains if d in running][:1]
            if gang.topology_preferred:
                # As few preferred domains as possible decides first, then the tightest required domain.
                for single_only in (True, False):
                    for d in domains:
                        result = self._place_preferred(gang, members, count, codes == d, single_only)
                        if result.ok:
                            return result
            else:
                for d in domains:
                    placed, _ = self._try(members, count, None, None, self.domain_nodes(label)[d])
                    if placed is not None:
                        return GangPlacement(True, placed)
        if not names:
            return GangPlacement(False, reason=f"no node has the topology label {label}")
        free = self._domain_free(codes, len(names), members)
        best = int(free.max()) if len(free) else 0
        return GangPlacement(
            False,
            reason=(f"gang of {required} needs one {level} with {plural(need, 'free GPU')}; "
                    f"best {level} has {best}" if need else
                    f"gang of {required} fits in no single {level}"),
        )

    def _place_preferred(self, gang: Gang, members: Sequence[int], required: int,
                         within: BoolArray | None, single_only: bool = False) -> GangPlacement:
        assert gang.topology_preferred is not None
        codes, names = self.domains(gang.topology_preferred)
        # One domain when any can hold the gang: tightest first.
        need = self.gang_need(members)
        for d in self._ordered_domains(codes, names, members, need):
            nodes = self.domain_nodes(gang.topology_preferred)[d]
            if within is not None:
                nodes = nodes[within[nodes]]
            placed, _ = self._try(members, len(members), None, None, nodes)
            if placed is not None:
                return GangPlacement(True, placed)
        if single_only:
            return GangPlacement(False, reason="no single domain holds the gang")
        # Else as few domains as possible: fill the domains with the most free GPUs first.
        free = self._domain_free(codes, len(names), members)
        if within is not None:
            inside = np.bincount(codes[within & (codes >= 0)], minlength=len(names)) > 0
            free = np.where(inside, free, -1)
        order = sorted(range(len(names)), key=lambda d: (-free[d], names[d]))
        dom_rank = np.full(len(names) + 1, len(names), dtype=np.int64)
        for r, d in enumerate(order):
            dom_rank[d] = r
        rank = dom_rank[codes]  # nodes without the label (code -1) come last
        placed, count = self._try(members, required, within, rank)
        if placed is not None:
            return GangPlacement(True, placed)
        return GangPlacement(False, reason=f"gang of {required} does not fit: {count} of {required} placeable")


__all__ = ["Assignment", "GangPlacement", "Placer"]
