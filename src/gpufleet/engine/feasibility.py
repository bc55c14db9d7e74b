"""Static feasibility: which nodes a pod may ever use, whatever is free on them.

Schedulability, taints against tolerations, nodeSelector and required node affinity depend only
on the node's labels and taints, so they are computed once per distinct set of pod constraints
as a boolean mask over all nodes (vectorised per label key), and cached. So is the static part of
a pod's soft node penalty (preferred node affinity, PreferNoSchedule taints), and so are the node pools
of a pod's Project (docs/semantics-notes.md, "Projects", rule 4): a mask per Project, and the
cache key of a pod of a Project with pools carries the Project's name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.domain import (
    LabelSelector,
    Node,
    Pod,
    Project,
    SelectorRequirement,
    SelectorTerm,
    Taint,
    TaintEffect,
    Toleration,
)
from gpufleet.engine.cluster import BoolArray, IntArray

BLOCKING_EFFECTS = (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)
# An untolerated PreferNoSchedule taint costs as much as the heaviest preferred term
# (docs/semantics-notes.md, "Soft scores").
PREFER_NO_SCHEDULE_PENALTY = 100
SOFT_CAP = (1 << 16) - 1  # node penalties are clipped below this, so that they rank nodes in int64 scores

PreferenceKey = tuple[tuple[tuple[int, SelectorTerm], ...], tuple[Toleration, ...]]

StaticKey = tuple[
    tuple[tuple[str, str], ...], tuple[SelectorTerm, ...], tuple[Toleration, ...], frozenset[str] | None
]


def static_key(pod: Pod) -> StaticKey:
    selector = pod.node_selector
    return (tuple(sorted(selector.items())) if selector else (), pod.affinity, pod.tolerations, pod.device_nodes)


def tolerates(tolerations: Sequence[Toleration], taint: Taint) -> bool:
    for t in tolerations:
        if t.effect is not None and t.effect != taint.effect:
            continue
        if t.key is None:  # empty key with Exists tolerates everything
            if t.operator == "Exists":
                return True
            continue
        if t.key != taint.key:
            continue
        if t.operator == "Exists" or t.value == taint.value:
            return True
    return False


def soft_normal(penalty: IntArray) -> IntArray:
    """A node penalty as it ranks nodes: less its minimum (the best node: 0), capped at SOFT_CAP."""
    out: IntArray = np.minimum(penalty - penalty.min(), SOFT_CAP) if len(penalty) else penalty
    return out


@dataclass
class StaticReport:
    """Why nodes are out for a pod, for pending reasons: counts per cause."""

    unschedulable: int
    taints: dict[str, int]
    selector: int
    pools: int = 0  # outside the node pools of ``project`` (counted after unschedulable)
    project: Project | None = None  # the pod's Project, when it has node pools
    devices: int = 0  # without devices for its DRA claims (counted last)


class StaticFeasibility:
    """Caches static node masks per distinct pod constraint set."""

    def __init__(self, nodes: Sequence[Node], schedulable: BoolArray,
                 pools: Mapping[str, Project] | None = None) -> None:
        """``pools``: namespace -> its Project, for the namespaces whose Project has node pools."""
        self.nodes = nodes
        self.schedulable = schedulable
        self.pools: Mapping[str, Project] = pools or {}
        self._pool_masks: dict[str, BoolArray] = {}
        self._labels: dict[str, tuple[np.ndarray, dict[str, int]]] = {}
        self._taints: dict[Taint, BoolArray] = {}
        self._soft_taints: dict[Taint, BoolArray] = {}  # PreferNoSchedule: scores, never filters
        for i, node in enumerate(nodes):
            for taint in node.taints:
                table = self._taints if taint.effect in BLOCKING_EFFECTS else self._soft_taints
                mask = table.setdefault(taint, np.zeros(len(nodes), dtype=np.bool_))
                mask[i] = True
        self._preferences: dict[PreferenceKey, IntArray | None] = {}
        self._cache: dict[object, BoolArray] = {}
        self._names = np.array([n.name for n in nodes], dtype=object)
        self._device_masks: dict[frozenset[str], BoolArray] = {}
        self._keys: dict[int, tuple[Pod, object]] = {}

    def _codes(self, key: str) -> tuple[np.ndarray, dict[str, int]]:
        """Label ``key`` of every node as integer codes (-1: no such label)."""
        got = self._labels.get(key)
        if got is None:
            vocab: dict[str, int] = {}
            codes = np.full(len(self.nodes), -1, dtype=np.int64)
            for i, node in enumerate(self.nodes):
                v = node.labels.get(key)
                if v is not None:
                    codes[i] = vocab.setdefault(v, len(vocab))
            got = (codes, vocab)
            self._labels[key] = got
        return got

    def _requirement(self, req: SelectorRequirement, field: bool) -> BoolArray:
        if field:  # matchFields: only metadata.name is supported by Kubernetes
            values = self._names
            present = np.ones(len(self.nodes), dtype=np.bool_)
            member = np.isin(values, list(req.values)) if req.key == "metadata.name" else ~present
        else:
            codes, vocab = self._codes(req.key)
            present = codes >= 0
            wanted = [vocab[v] for v in req.values if v in vocab]
            member = np.isin(codes, wanted) & present
        op = req.operator
        if op == "In":
            return member
        if op == "NotIn":
            return ~member
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return ~present
        if op in ("Gt", "Lt") and not field:
            codes, vocab = self._codes(req.key)
            bound = int(req.values[0])
            numbers = np.full(len(self.nodes), np.nan)
            for value, code in vocab.items():
                if value.lstrip("-").isdigit():  # a non-integer label value never satisfies Gt/Lt
                    numbers[codes == code] = int(value)
            with np.errstate(invalid="ignore"):
                return (numbers > bound) if op == "Gt" else (numbers < bound)
        return np.zeros(len(self.nodes), dtype=np.bool_)

    def _term(self, term: SelectorTerm) -> BoolArray:
        mask = np.ones(len(self.nodes), dtype=np.bool_)
        for req in term.expressions:
            mask &= self._requirement(req, False)
        for req in term.fields:
            mask &= self._requirement(req, True)
        return mask

    def terms_mask(self, terms: Sequence[SelectorTerm]) -> BoolArray:
        """Nodes matching any one of ``terms`` (a NodeSelector's terms, as node affinity reads
        them); every node when there are none."""
        if not terms:
            return np.ones(len(self.nodes), dtype=np.bool_)
        any_term = np.zeros(len(self.nodes), dtype=np.bool_)
        for term in terms:
            any_term |= self._term(term)
        return any_term

    def selector_mask(self, pod: Pod) -> BoolArray:
        mask = np.ones(len(self.nodes), dtype=np.bool_)
        for key, value in pod.node_selector.items():
            codes, vocab = self._codes(key)
            mask &= codes == vocab.get(value, -2)
        if pod.affinity:
            mask &= self.terms_mask(pod.affinity)
        return mask

    def device_mask(self, names: frozenset[str]) -> BoolArray:
        """Nodes named in ``names`` (a pod's ``device_nodes``), cached per distinct set."""
        got = self._device_masks.get(names)
        if got is None:
            got = np.isin(self._names, list(names)) if names else np.zeros(len(self.nodes), dtype=np.bool_)
            got.setflags(write=False)
            self._device_masks[names] = got
        return got

    def taint_mask(self, pod: Pod) -> BoolArray:
        mask = np.ones(len(self.nodes), dtype=np.bool_)
        for taint, has in self._taints.items():
            if not tolerates(pod.tolerations, taint):
                mask &= ~has
        return mask

    def project_of(self, pod: Pod) -> Project | None:
        """The pod's Project when it has node pools (None: every node)."""
        return self.pools.get(pod.namespace) if self.pools else None

    def key(self, pod: Pod) -> object:
        """What the pod's static mask depends on: its constraints, and its Project's pools
        (remembered per pod: placement, masks and failure memos ask for it on every attempt)."""
        got = self._keys.get(id(pod))
        if got is not None and got[0] is pod:
            return got[1]
        key = self._key(pod)
        self._keys[id(pod)] = (pod, key)  # the pod is kept alive with its entry: its id is not reused
        return key

    def key_once(self, pod: Pod) -> object:
        """:meth:`key`, not remembered when not already (for a pod most likely asked once: a gang's
        failure signature is made once per gang, and most gangs alike are answered by it)."""
        got = self._keys.get(id(pod))
        if got is not None and got[0] is pod:
            return got[1]
        return self._key(pod)

    def _key(self, pod: Pod) -> object:
        key = static_key(pod)
        if self.pools:
            project = self.pools.get(pod.namespace)
            if project is not None:
                return (key, project.name)
        return key

    def label_selector_mask(self, selector: LabelSelector) -> BoolArray:
        """Nodes whose labels satisfy ``selector`` (the vector form of ``selector_matches``)."""
        mask = np.ones(len(self.nodes), dtype=np.bool_)
        for key, value in selector.match_labels:
            codes, vocab = self._codes(key)
            mask &= codes == vocab.get(value, -2)
        for req in selector.match_expressions:
            mask &= self._requirement(req, False)
        return mask

    def pool_mask(self, project: Project) -> BoolArray:
        """Nodes in at least one of the Project's node pools (all nodes when it has none)."""
        got = self._pool_masks.get(project.name)
        if got is None:
            got = np.zeros(len(self.nodes), dtype=np.bool_) if project.node_pools else np.ones(
                len(self.nodes), dtype=np.bool_)
            for pool in project.node_pools:
                got |= self.label_selector_mask(pool.selector)
            got.setflags(write=False)
            self._pool_masks[project.name] = got
        return got

    def mask(self, pod: Pod) -> BoolArray:
        key = self.key(pod)
        got = self._cache.get(key)
        if got is None:
            got = self.schedulable & self.selector_mask(pod) & self.taint_mask(pod)
            project = self.project_of(pod)
            if project is not None:
                got &= self.pool_mask(project)
            if pod.device_nodes is not None:
                got &= self.device_mask(pod.device_nodes)
            got.setflags(write=False)
            self._cache[key] = got
        return got

    @property
    def has_soft_taints(self) -> bool:
        """Whether any node has a PreferNoSchedule taint (then every pod may have a preference)."""
        return bool(self._soft_taints)

    def preference(self, pod: Pod) -> IntArray | None:
        """The static part of the pod's node penalty: the weights of its preferred node-affinity
        terms each node does not match, plus ``PREFER_NO_SCHEDULE_PENALTY`` per untolerated
        PreferNoSchedule taint. None when it is the same on every node (it orders nothing).
        Cached per distinct (preferred terms, tolerations)."""
        if not pod.preferred_affinity and not self._soft_taints:
            return None
        key: PreferenceKey = (pod.preferred_affinity, pod.tolerations if self._soft_taints else ())
        if key in self._preferences:
            return self._preferences[key]
        total = np.zeros(len(self.nodes), dtype=np.int64)
        for weight, term in pod.preferred_affinity:
            total += np.where(self._term(term), 0, weight)
        for taint, has in self._soft_taints.items():
            if not tolerates(pod.tolerations, taint):
                total += has * PREFER_NO_SCHEDULE_PENALTY
        got: IntArray | None = None
        if len(total) and total.min() != total.max():
            got = soft_normal(total)
            got.setflags(write=False)
        self._preferences[key] = got
        return got

    def report(self, pod: Pod) -> StaticReport:
        """Counts of nodes ruled out per cause (each node counted for its first cause)."""
        out = ~self.schedulable
        project = self.project_of(pod)
        pools = 0
        if project is not None:
            outside = ~self.pool_mask(project) & ~out
            pools = int(outside.sum())
            out = out | outside
        taints: dict[str, int] = {}
        for taint, has in sorted(self._taints.items(), key=lambda t: (t[0].key, t[0].value, t[0].effect.value)):
            if not tolerates(pod.tolerations, taint):
                hit = has & ~out
                if hit.any():
                    text = f"{taint.key}={taint.value}:{taint.effect.value}" if taint.value else (
                        f"{taint.key}:{taint.effect.value}"
                    )
                    taints[text] = int(hit.sum())
                    out = out | has
        selector_out = ~self.selector_mask(pod) & ~out
        selector = int(selector_out.sum())
        devices = 0
        if pod.device_nodes is not None:
            devices = int((~self.device_mask(pod.device_nodes) & ~(out | selector_out)).sum())
        return StaticReport(int((~self.schedulable).sum()), taints, selector, pools, project, devices)
