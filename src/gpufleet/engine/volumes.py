"""Volumes: kube-scheduler's VolumeBinding, VolumeZone and VolumeRestrictions as node masks
(docs/semantics-notes.md, "Volumes").

A pod's claims either make it wait (a claim missing, being deleted, bound to a missing PV, or
unbound and not WaitForFirstConsumer), or restrict its nodes: a bound claim to its PV's nodes
(node affinity and zone labels), an unbound WaitForFirstConsumer claim to the nodes where a free
matching PV lies or where its class may provision. The PV chosen with the pod's node is held
while the pod is bound in the pass, and given back with it (the Placer's commit and release, so
trial placements of gangs and of the victim search roll back exactly). A ReadWriteOncePod claim
has at most one user among the bound pods.

Masks are NumPy over nodes. PVs are grouped by the claims they may serve (the same class, size,
access modes, selector and volume mode): per group, the count of free PVs on each node is kept up
to date, so a pod's mask is one comparison per group. A node's PV is found through per-node lists
for PVs pinned to a few nodes (local volumes) and a short scan of the others. A snapshot where no
pod of ours has a claim builds nothing (``VolumeBook.build`` returns None).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufleet.domain import (
    SCHEDULER_NAME,
    Node,
    PersistentVolume,
    SelectorRequirement,
    SelectorTerm,
    Snapshot,
    StorageClass,
    VolumeBinding,
    VolumeClaim,
)
from gpufleet.domain.selectors import selector_matches
from gpufleet.domain.wire import NO_PROVISIONER, VOLUME_ZONE_LABELS
from gpufleet.engine.cluster import BoolArray, IntArray
from gpufleet.engine.feasibility import StaticFeasibility
from gpufleet.engine.workload import PodInfo

__all__ = ["RWOP", "VolumeBook"]

RWOP = "ReadWriteOncePod"
NARROW = 16  # PVs on at most this many nodes are found through per-node lists


def claim_text(name: str) -> str:
    return f'persistentvolumeclaim "{name}"'


@dataclass(eq=False)
class _Group:
    """The PVs that may serve claims of one kind, smallest capacity then name first."""

    pvs: list[int]  # PV ids in preference order
    avail: IntArray  # per node: free PVs of the group that the node may use
    narrow: dict[int, list[int]] = field(default_factory=dict)  # node -> ranks into pvs
    wide: list[int] = field(default_factory=list)  # ranks of PVs on many nodes


@dataclass(eq=False)
class _Claim:
    """One claim as a pod of this pass sees it."""

    key: str
    name: str
    wait: str = ""  # non-empty: the pod waits for this reason
    rwop: bool = False
    fixed: BoolArray | None = None  # bound claim: its PV's nodes; selected node: that node
    selected: bool = False  # provisioning in progress on the selected node
    group: _Group | None = None  # unbound WaitForFirstConsumer: the PVs that may serve it
    provision: BoolArray | None = None  # nodes its class may provision on (None: it may not)


@dataclass(eq=False)
class _Chosen:
    """A claim's volume chosen in this pass, and how many bound pods rely on it."""

    pv: int | None  # None: provisioned on ``node``
    node: int
    refs: int = 1


@dataclass(eq=False)
class _PodClaims:
    claims: list[_Claim]
    wait: str  # the first waiting claim's reason ("" when none waits)
    shared: bool = False  # several groups of PVs that overlap: masks checked node by node


class VolumeBook:
    """Claims, PVs and classes of the snapshot, the choices held by bound pods, and the users of
    ReadWriteOncePod claims; each pod's node mask."""

    @staticmethod
    def build(snapshot: Snapshot, nodes: Sequence[Node], feasibility: StaticFeasibility,
              pods: Sequence[PodInfo]) -> VolumeBook | None:
        """None when no pod of ours names a claim: nothing to keep."""
        claimers = [info for info in pods if info.pod.claims]
        if not any(info.pod.scheduler_name == SCHEDULER_NAME for info in claimers):
            return None
        return VolumeBook(snapshot, nodes, feasibility, pods, claimers)

    def __init__(self, snapshot: Snapshot, nodes: Sequence[Node], feasibility: StaticFeasibility,
                 pods: Sequence[PodInfo], claimers: Sequence[PodInfo]) -> None:
        self.n = len(nodes)
        self.node_index = {node.name: i for i, node in enumerate(nodes)}
        self.feasibility = feasibility
        self.pods = pods
        self.claims: dict[str, VolumeClaim] = {c.key: c for c in snapshot.claims}
        self.volumes: list[PersistentVolume] = sorted(snapshot.volumes, key=lambda v: v.name)
        self.pv_index = {v.name: i for i, v in enumerate(self.volumes)}
        self.classes: dict[str, StorageClass] = {c.name: c for c in snapshot.storage_classes}
        defaults = [c for c in snapshot.storage_classes if c.is_default]
        # The newest default class, then the first name.
        self.default_class = min(defaults, key=lambda c: (-c.creation_time, c.name)).name if defaults else None
        taken = {c.volume_name for c in snapshot.claims if c.volume_name}
        self.prebound: dict[str, list[int]] = {}  # claim key -> PVs whose claimRef names it
        self.free_pvs: list[int] = []  # PVs offered to any claim: Available, no claimRef, no claim's volumeName
        for i, v in enumerate(self.volumes):
            if v.claim is not None:
                self.prebound.setdefault(v.claim, []).append(i)
            elif v.phase == "Available" and v.name not in taken:
                self.free_pvs.append(i)
        self._pv_masks: list[tuple[BoolArray, IntArray] | None] = [None] * len(self.volumes)
        self._mask_cache: dict[object, tuple[BoolArray, IntArray]] = {}
        self._groups: dict[tuple[object, ...], _Group] = {}
        self._pv_groups: dict[int, list[_Group]] = {}
        self._claim_views: dict[tuple[str, str, bool], _Claim] = {}
        self._pod_views: dict[int, _PodClaims | None] = {}
        self.held: set[int] = set()
        self.chosen: dict[str, _Chosen] = {}
        self.holding: dict[int, list[str]] = {}  # pod -> claim keys whose choice it relies on
        self.choices: dict[int, tuple[VolumeBinding, ...]] = {}  # pod -> its volumes, sorted by claim
        self.users: dict[str, set[int]] = {}  # ReadWriteOncePod claim key -> bound pods naming it
        self._none = np.zeros(self.n, dtype=np.bool_)
        self._none.setflags(write=False)
        rwop = [info.idx for info in claimers
                if any(RWOP in c.access_modes for c in self._existing(info))]
        self.rwop_pods: IntArray = np.array(sorted(rwop), dtype=np.int64)

    def _existing(self, info: PodInfo) -> list[VolumeClaim]:
        ns = info.pod.namespace
        return [c for name in info.pod.claims if (c := self.claims.get(f"{ns}/{name}")) is not None]

    # -- node masks of PVs and classes ------------------------------------------------------------

    def _terms_mask(self, terms: tuple[SelectorTerm, ...], zone: SelectorTerm | None) -> tuple[BoolArray, IntArray]:
        key = (terms, zone)
        got = self._mask_cache.get(key)
        if got is None:
            mask = self.feasibility.terms_mask(terms)
            if zone is not None:
                mask = mask & self.feasibility.terms_mask((zone,))
            mask.setflags(write=False)
            got = (mask, np.flatnonzero(mask).astype(np.int64))
            self._mask_cache[key] = got
        return got

    def pv_nodes(self, pv: int) -> tuple[BoolArray, IntArray]:
        """The nodes PV ``pv`` may be used on (node affinity and zone labels): mask and indices."""
        got = self._pv_masks[pv]
        if got is None:
            v = self.volumes[pv]
            zone = tuple(SelectorRequirement(label, "In", tuple(v.labels[label].split("__")))
                         for label in VOLUME_ZONE_LABELS if label in v.labels)
            got = self._terms_mask(v.node_affinity, SelectorTerm(expressions=zone) if zone else None)
            self._pv_masks[pv] = got
        return got

    def _node_mask(self, node: int) -> BoolArray:
        mask = np.zeros(self.n, dtype=np.bool_)
        if node >= 0:
            mask[node] = True
        return mask

    # -- claims -----------------------------------------------------------------------------------

    def _class_of(self, claim: VolumeClaim) -> StorageClass | None:
        name = self.default_class if claim.storage_class is None else claim.storage_class
        return self.classes.get(name) if name else None

    def _claim(self, namespace: str, name: str, ephemeral: bool) -> _Claim:
        cache_key = (namespace, name, ephemeral)
        got = self._claim_views.get(cache_key)
        if got is None:
            got = self._claim_view(namespace, name, ephemeral)
            self._claim_views[cache_key] = got
        return got

    def _claim_view(self, namespace: str, name: str, ephemeral: bool) -> _Claim:
        key = f"{namespace}/{name}"
        text = claim_text(name)
        c = self.claims.get(key)
        if c is None:
            if ephemeral:
                return _Claim(key, name, f"waiting for the ephemeral volume controller to create {text}")
            return _Claim(key, name, f"{text} not found")
        rwop = RWOP in c.access_modes
        if c.deleting:
            return _Claim(key, name, f"{text} is being deleted", rwop)
        if c.volume_name:
            pv = self.pv_index.get(c.volume_name)
            if pv is None:
                return _Claim(key, name, f'{text} is bound to persistentvolume "{c.volume_name}", which does not exist',
                              rwop)
            return _Claim(key, name, rwop=rwop, fixed=self.pv_nodes(pv)[0])
        storage_class = self._class_of(c)
        if storage_class is None or not storage_class.wait_for_first_consumer:
            return _Claim(key, name, f"{text} is unbound and not WaitForFirstConsumer (waiting for it to be bound)",
                          rwop)
        if c.selected_node is not None:
            return _Claim(key, name, rwop=rwop, fixed=self._node_mask(self.node_index.get(c.selected_node, -1)),
                          selected=True)
        provision: BoolArray | None = None
        if storage_class.provisioner and storage_class.provisioner != NO_PROVISIONER:
            provision = self._terms_mask(storage_class.allowed_topologies, None)[0]
        return _Claim(key, name, rwop=rwop, group=self._group(c, storage_class.name), provision=provision)

    def _matches(self, v: PersistentVolume, c: VolumeClaim, class_name: str) -> bool:
        return (v.storage_class == class_name and v.capacity_bytes >= c.request_bytes
                and v.volume_mode == c.volume_mode and all(m in v.access_modes for m in c.access_modes)
                and (c.selector is None or selector_matches(c.selector, v.labels)))

    def _group(self, c: VolumeClaim, class_name: str) -> _Group:
        prebound = c.key if c.key in self.prebound else None
        key = (class_name, c.request_bytes, c.volume_mode, frozenset(c.access_modes), c.selector, prebound)
        got = self._groups.get(key)
        if got is not None:
            return got
        pool = self.free_pvs + self.prebound.get(c.key, [])
        ids = sorted((i for i in pool if self._matches(self.volumes[i], c, class_name)),
                     key=lambda i: (self.volumes[i].capacity_bytes, i))
        group = _Group(ids, np.zeros(self.n, dtype=np.int64))
        for rank, pv in enumerate(ids):
            nodes = self.pv_nodes(pv)[1]
            if len(nodes) <= NARROW:
                for node in nodes.tolist():
                    group.narrow.setdefault(node, []).append(rank)
            else:
                group.wide.append(rank)
            self._pv_groups.setdefault(pv, []).append(group)
        free = [self.pv_nodes(pv)[1] for pv in ids if pv not in self.held]
        if free:
            group.avail += np.bincount(np.concatenate(free), minlength=self.n)
        self._groups[key] = group
        return group

    def _pod(self, idx: int) -> _PodClaims | None:
        if idx in self._pod_views:
            return self._pod_views[idx]
        pod = self.pods[idx].pod
        view: _PodClaims | None = None
        if pod.claims:
            claims = [self._claim(pod.namespace, name, name in pod.ephemeral_claims) for name in pod.claims]
            wait = next((c.wait for c in claims if c.wait), "")
            groups = list(dict.fromkeys(c.group for c in claims if c.group is not None))
            shared = False
            if len(groups) > 1:
                seen: set[int] = set()
                for g in groups:
                    shared = shared or not seen.isdisjoint(g.pvs)
                    seen.update(g.pvs)
            view = _PodClaims(claims, wait, shared)
        self._pod_views[idx] = view
        return view

    # -- what a pod may do ------------------------------------------------------------------------

    def wait_reason(self, idx: int) -> str:
        """Why the pod waits for its claims ("" when it does not)."""
        view = self._pod(idx)
        return view.wait if view is not None else ""

    def in_use(self, idx: int) -> str:
        """The reason when a ReadWriteOncePod claim of the pod is used by another bound pod."""
        view = self._pod(idx)
        if view is None:
            return ""
        for c in view.claims:
            if c.rwop:
                others = self.users.get(c.key, set()) - {idx}
                if others:
                    user = min(self.pods[u].key for u in others)
                    return f"{claim_text(c.name)} is ReadWriteOncePod and in use by {user}"
        return ""

    def _claim_mask(self, c: _Claim, count: int = 1) -> BoolArray:
        chosen = self.chosen.get(c.key)
        if chosen is not None:
            return self.pv_nodes(chosen.pv)[0] if chosen.pv is not None else self._node_mask(chosen.node)
        if c.fixed is not None:
            return c.fixed
        assert c.group is not None
        mask = c.group.avail >= count
        return mask | c.provision if c.provision is not None else mask

    def mask(self, idx: int) -> BoolArray | None:
        """Nodes where the pod's claims can all be satisfied now; None when it names none."""
        view = self._pod(idx)
        if view is None:
            return None
        if view.wait or self.in_use(idx):
            return self._none
        counts: dict[int, tuple[_Claim, int]] = {}
        mask = np.ones(self.n, dtype=np.bool_)
        for c in view.claims:
            if c.group is not None and c.key not in self.chosen:
                first, k = counts.get(id(c.group), (c, 0))
                counts[id(c.group)] = (first, k + 1)
            else:
                mask &= self._claim_mask(c)
        for first, k in counts.values():
            mask &= self._claim_mask(first, k)
        if view.shared:  # claims whose PVs overlap: the greedy choice, node by node
            for node in np.flatnonzero(mask).tolist():
                if self._choose(view, node) is None:
                    mask[node] = False
        return mask

    def explain(self, idx: int, left: BoolArray) -> tuple[list[str], BoolArray]:
        """Causes for a pending reason: per claim, the nodes of ``left`` it rules out."""
        view = self._pod(idx)
        if view is None:
            return [], left
        causes: list[str] = []
        for c in view.claims:
            out = left & ~self._claim_mask(c)
            if out.any():
                causes.append(f"{int(out.sum())} without a volume for {claim_text(c.name)}")
                left = left & ~out
        full = self.mask(idx)
        rest = left & ~full if full is not None else self._none
        if rest.any():
            names = ", ".join(f'"{c.name}"' for c in view.claims if c.group is not None)
            causes.append(f"{int(rest.sum())} without a distinct volume for each of persistentvolumeclaims {names}")
            left = left & ~rest
        return causes, left

    # -- choices ----------------------------------------------------------------------------------

    def _first(self, group: _Group, node: int, taken: set[int]) -> int | None:
        """The group's preferred free PV on ``node`` (not in ``taken``), or None."""
        best: int | None = None
        for rank in group.narrow.get(node, ()):
            pv = group.pvs[rank]
            if pv not in self.held and pv not in taken:
                best = rank
                break
        for rank in group.wide:
            if best is not None and rank > best:
                break
            pv = group.pvs[rank]
            if pv not in self.held and pv not in taken and self.pv_nodes(pv)[0][node]:
                best = rank
                break
        return None if best is None else group.pvs[best]

    def _choose(self, view: _PodClaims, node: int) -> list[tuple[_Claim, int | None]] | None:
        """Per claim that needs a write, its PV (None: provision on ``node``); None when some
        claim cannot be satisfied on ``node``. Claims in the pod's order, each the first fit."""
        taken: set[int] = set()
        out: list[tuple[_Claim, int | None]] = []
        for c in view.claims:
            chosen = self.chosen.get(c.key)
            if chosen is not None:
                out.append((c, chosen.pv))
            elif c.selected:
                out.append((c, None))
            elif c.group is not None:
                pv = self._first(c.group, node, taken)
                if pv is not None:
                    taken.add(pv)
                    out.append((c, pv))
                elif c.provision is not None and c.provision[node]:
                    out.append((c, None))
                else:
                    return None
        return out

    def _hold(self, pv: int, delta: int) -> None:
        if delta > 0:
            self.held.add(pv)
        else:
            self.held.discard(pv)
        nodes = self.pv_nodes(pv)[1]
        for group in self._pv_groups.get(pv, ()):
            group.avail[nodes] -= delta

    def take(self, idx: int, node: int) -> None:
        """Pod ``idx`` is bound to ``node``: it uses its claims; a pod bound in this pass holds the
        volumes chosen for its unbound claims."""
        view = self._pod(idx)
        if view is None:
            return
        self._use(idx, view, 1)
        info = self.pods[idx]
        if info.pod.bound or view.wait:
            return
        chosen = self._choose(view, node)
        if chosen is None:  # the node came from this book's mask: cannot happen, nothing to hold
            return
        keys: list[str] = []
        out: list[VolumeBinding] = []
        for c, pv in chosen:
            out.append(VolumeBinding(c.name, None if pv is None else self.volumes[pv].name))
            if c.selected:
                continue
            keys.append(c.key)
            entry = self.chosen.get(c.key)
            if entry is not None:
                entry.refs += 1
            else:
                self.chosen[c.key] = _Chosen(pv, node)
                if pv is not None:
                    self._hold(pv, 1)
        self.holding[idx] = keys
        if out:
            self.choices[idx] = tuple(sorted(out, key=lambda b: b.claim))

    def take_many(self, pods: IntArray) -> None:
        """Pods of the snapshot bound in bulk: only their use of ReadWriteOncePod claims counts."""
        for idx in pods[np.isin(pods, self.rwop_pods)].tolist():
            view = self._pod(idx)
            if view is not None:
                self._use(idx, view, 1)

    def give_back(self, idx: int) -> None:
        """Pod ``idx`` leaves its node: its claims are free of it, its choices given back."""
        view = self._pod(idx)
        if view is None:
            return
        self._use(idx, view, -1)
        self.choices.pop(idx, None)
        for key in self.holding.pop(idx, ()):
            entry = self.chosen[key]
            entry.refs -= 1
            if entry.refs == 0:
                del self.chosen[key]
                if entry.pv is not None:
                    self._hold(entry.pv, -1)

    def _use(self, idx: int, view: _PodClaims, delta: int) -> None:
        for c in view.claims:
            if c.rwop:
                users = self.users.setdefault(c.key, set())
                if delta > 0:
                    users.add(idx)
                else:
                    users.discard(idx)
