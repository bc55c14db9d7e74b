"""Inter-pod rules: required pod affinity and anti-affinity (both ways) and DoNotSchedule topology
spread, as boolean node masks (docs/semantics-notes.md, "Inter-pod affinity" and "Topology spread").

A **set** is a predicate over pods whose bound members are counted: the pods matching one term's
selector in its namespaces, or the pods carrying one required anti-affinity term or preferred term
(for the symmetric rule and scores). Membership depends only on a pod's namespace and labels, so it is decided
once per call. Counts per domain of each topology key a rule asks about (a hostname's domain is
its node) are NumPy arrays updated by the Placer's commit and release, so trial placements of the
victim search roll back exactly; at most ``MAX_COUNT_CELLS`` of them are kept at once, the others
built again from the bound members' nodes when asked for (memory bounded for hostile rule sets).
A pod's rules are built on first use; a pod with none costs one list lookup, and a snapshot where
no pod has any rule builds nothing at all (``InterPod.build`` returns None).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from gpufleet.domain import LabelSelector, Node, Pod, PodAffinityTerm, SpreadConstraint
from gpufleet.domain.selectors import NamespaceLabels, selector_matches, selector_text, term_namespaces_match
from gpufleet.engine.cluster import BoolArray, IntArray
from gpufleet.engine.feasibility import StaticFeasibility
from gpufleet.engine.workload import PodInfo

__all__ = ["InterPod", "Narrowing"]

AFFINITY, ANTI, SYMMETRIC, SPREAD = "affinity", "anti", "symmetric", "spread"
PREFER, AVOID, SOFT_SPREAD = "prefer", "avoid", "soft-spread"  # preferred terms, ScheduleAnyway
# Other pods' preferred terms matching the pod (symmetric scoring): affinity lowers, anti raises.
THEIR_PREFER, THEIR_AVOID = "their-prefer", "their-avoid"
MATCH, CARRY, CARRY_PREFERRED = 0, 1, 2  # kinds of sets
# The most counts (per set and domain of a key) kept at once, whatever the number of distinct
# sets and nodes (docs/semantics-notes.md, "Cluster state the engine does not trust"): 32 MiB.
MAX_COUNT_CELLS = 1 << 22

# A set: ("match", selector, owner namespace, namespaces, namespace selector), ("carry", term, owner
# namespace) for a required anti-affinity term, or ("carry-preferred", kind, term, owner namespace)
SetKey = tuple[object, ...]
# A narrowing of a pod's node selection: (its name, the nodes it keeps).
Narrowing = tuple[object, BoolArray]


@dataclass(frozen=True, slots=True)
class Rule:
    kind: str  # AFFINITY | ANTI | SYMMETRIC | SPREAD
    set_id: int
    key: str
    selector: LabelSelector | None
    spread: SpreadConstraint | None = None
    self_match: int = 0  # spread: 1 when the pod matches the constraint's selector itself
    weight: int = 0  # preferred terms: their weight

    @property
    def text(self) -> str:
        """The rule as a pending reason names it."""
        what = selector_text(self.selector)
        if self.spread is not None:
            return f"topology spread (maxSkew {self.spread.max_skew}, {self.key}, {what})"
        name = {AFFINITY: "pod affinity", ANTI: "pod anti-affinity", SYMMETRIC: "anti-affinity of running pods"}
        return f"{name[self.kind]} ({what}, {self.key})"


def _match_key(term: PodAffinityTerm, owner_ns: str) -> SetKey:
    return ("match", term.selector, owner_ns, term.namespaces, term.namespace_selector)


def _carried_key(anti: bool, term: PodAffinityTerm, owner_ns: str) -> SetKey:
    """The set of pods carrying a preferred term (for other pods' symmetric scores)."""
    return ("carry-preferred", anti, term, owner_ns)


def _spread_term(c: SpreadConstraint) -> PodAffinityTerm:
    """The pods a spread constraint counts: its selector, in the pod's own namespace."""
    return PodAffinityTerm(topology_key=c.topology_key, selector=c.selector)


def _required(terms: Sequence[PodAffinityTerm]) -> list[PodAffinityTerm]:
    return [t for t in terms if t.weight == 0]


def _hard(pod: Pod) -> list[SpreadConstraint]:
    return [c for c in pod.spread_constraints if c.hard]


class InterPod:
    """Counts of bound pods per set, node and domain, and each pod's inter-pod node mask."""

    @staticmethod
    def build(nodes: Sequence[Node], feasibility: StaticFeasibility, pods: Sequence[PodInfo],
              namespaces: NamespaceLabels | None = None) -> InterPod | None:
        """None when no pod of the snapshot has an inter-pod rule: nothing to keep. ``namespaces``:
        the labels of the snapshot's Namespace objects (for namespaceSelector)."""
        if not any(any(map(attrgetter(f"pod.{rules}"), pods))
                   for rules in ("anti_affinity_terms", "affinity_terms", "spread_constraints")):
            return None
        return InterPod(nodes, feasibility, pods, namespaces)

    def __init__(self, nodes: Sequence[Node], feasibility: StaticFeasibility, pods: Sequence[PodInfo],
                 namespaces: NamespaceLabels | None = None) -> None:
        self.namespaces = namespaces
        self.nodes = nodes
        self.n = len(nodes)
        self.feasibility = feasibility
        self.pods = pods
        self._codes: dict[str, tuple[IntArray, int]] = {}
        self._per_node_keys: set[str] = set()
        self._selector_masks: dict[object, BoolArray] = {}
        self.set_index: dict[SetKey, int] = {}
        self.set_terms: list[tuple[PodAffinityTerm, str]] = []  # per set: its term and the owner's namespace
        self.set_kind: list[int] = []  # MATCH | CARRY | CARRY_PREFERRED
        self.carry_anti: list[bool] = []  # per set: a carried preferred anti-affinity term (else affinity)
        # Every set a rule may ask about: the pods' own terms and constraints, and the carried anti terms.
        for info in pods:
            pod = info.pod
            if not (pod.affinity_terms or pod.anti_affinity_terms or pod.spread_constraints):
                continue
            for t in pod.affinity_terms + pod.anti_affinity_terms:  # preferred terms too (scores)
                self._set(_match_key(t, pod.namespace), t, pod.namespace, MATCH)
            for c in pod.spread_constraints:
                t = _spread_term(c)
                self._set(_match_key(t, pod.namespace), t, pod.namespace, MATCH)
            for t in _required(pod.anti_affinity_terms):
                self._set(("carry", t, pod.namespace), t, pod.namespace, CARRY)
            for anti, terms in ((False, pod.affinity_terms), (True, pod.anti_affinity_terms)):
                for t in terms:
                    if t.weight:
                        self._set(_carried_key(anti, t, pod.namespace), t, pod.namespace, CARRY_PREFERRED, anti)
        self.has_carried_preferred = CARRY_PREFERRED in self.set_kind
        n_sets = len(self.set_kind)
        # Sets whose selector names a label pair can only hold pods with that pair: each pod is
        # matched against those of its own pairs and the sets naming none.
        by_pair: dict[tuple[str, str], list[int]] = {}
        anywhere: list[int] = []
        for s_id, (term, _) in enumerate(self.set_terms):
            pairs = term.selector.match_labels if term.selector is not None else ()
            if pairs:
                by_pair.setdefault(pairs[0], []).append(s_id)
            else:
                anywhere.append(s_id)
        # Membership by (namespace, labels): pods alike share the verdicts.
        by_labels: dict[tuple[str, frozenset[tuple[str, str]]], tuple[list[int], list[int], list[int]]] = {}
        self.members: list[list[int]] = []  # per pod: the sets it belongs to
        self.symmetric: list[list[int]] = []  # per pod: the carry sets whose term it matches
        self.their_preferred: list[list[int]] = []  # per pod: the carried preferred sets it matches
        self.sigs: list[tuple[str, frozenset[tuple[str, str]]]] = []
        rows: list[int] = []
        cols: list[int] = []
        for info in pods:
            pod = info.pod
            sig = (pod.namespace, frozenset(pod.labels.items()))
            self.sigs.append(sig)
            got = by_labels.get(sig)
            if got is None:
                candidates = list(anywhere)
                for pair in pod.labels.items():
                    candidates.extend(by_pair.get(pair, ()))
                candidates.sort()
                hits = [s for s in candidates if self._matches(self.set_terms[s], pod)]
                kinds = self.set_kind
                got = ([s for s in hits if kinds[s] == MATCH], [s for s in hits if kinds[s] == CARRY],
                       [s for s in hits if kinds[s] == CARRY_PREFERRED])
                by_labels[sig] = got
            own = got[0]
            if pod.anti_affinity_terms:
                own = own + [self.set_index[("carry", t, pod.namespace)] for t in _required(pod.anti_affinity_terms)]
            if self.has_carried_preferred and (pod.affinity_terms or pod.anti_affinity_terms):
                own = own + [self.set_index[_carried_key(anti, t, pod.namespace)]
                             for anti, terms in ((False, pod.affinity_terms), (True, pod.anti_affinity_terms))
                             for t in terms if t.weight]
            self.members.append(own)
            self.symmetric.append(got[1])
            self.their_preferred.append(got[2])
            if own:
                rows.extend(own)
                cols.extend([info.idx] * len(own))
        # Memberships as (set, pod) pairs, grouped by set: memory grows with memberships only.
        pair_sets = np.array(rows, dtype=np.int64)
        order = np.argsort(pair_sets, kind="stable")
        self.pair_sets: IntArray = pair_sets[order]
        self.pair_pods: IntArray = np.array(cols, dtype=np.int64)[order]
        self.set_start: IntArray = np.searchsorted(self.pair_sets, np.arange(n_sets + 1)).astype(np.int64)
        self.where: IntArray = np.full(len(pods), -1, dtype=np.int64)  # each pod's node (-1: not bound)
        self.total: list[int] = [0] * n_sets
        # Counts of bound members per set and domain of a key, built when asked for and kept up to
        # date; at most MAX_COUNT_CELLS of them at once (the oldest built are dropped first, and
        # built again from the members' nodes when asked for again).
        self.doms: list[dict[str, IntArray]] = [{} for _ in range(n_sets)]
        self._kept: dict[tuple[int, str], int] = {}  # (set, key) -> cells, oldest first
        self._cells = 0
        self._rules: dict[int, list[Rule]] = {}
        self._rules_alike: dict[object, list[Rule]] = {}
        self._soft: dict[int, list[Rule]] = {}
        self._soft_alike: dict[object, list[Rule]] = {}
        self._eligible_cache: dict[object, tuple[BoolArray, BoolArray]] = {}
        self._domain_cache: dict[tuple[int, str], tuple[BoolArray, bool]] = {}
        self._all_cache: dict[int, bool] = {}  # keyed by id() of masks kept in _eligible_cache
        # Spread counts over the eligible nodes only (a constraint whose eligible nodes are not every
        # labelled node): per set, (key, id() of an eligible mask kept in _eligible_cache) -> (the
        # mask, bound members per domain on its nodes), built when asked for and kept up to date by
        # ``add`` like ``doms``; dropped all at once past MAX_COUNT_CELLS.
        self._eligible_doms: list[dict[tuple[str, int], tuple[BoolArray, IntArray]]] = [{} for _ in range(n_sets)]
        self._eligible_cells = 0

    def _set(self, key: SetKey, term: PodAffinityTerm, owner_ns: str, kind: int, anti: bool = False) -> None:
        if key not in self.set_index:
            self.set_index[key] = len(self.set_kind)
            self.set_terms.append((term, owner_ns))
            self.set_kind.append(kind)
            self.carry_anti.append(anti)

    def _matches(self, term_owner: tuple[PodAffinityTerm, str], pod: Pod) -> bool:
        term, owner_ns = term_owner
        return term_namespaces_match(term, owner_ns, pod.namespace, self.namespaces) and selector_matches(
            term.selector, pod.labels)

    # -- domains ------------------------------------------------------------------------------

    def codes(self, key: str) -> tuple[IntArray, int]:
        """Domain of each node for label ``key`` and the number of domains D; a node without the
        label has code D (a slot no count ever reaches)."""
        got = self._codes.get(key)
        if got is None:
            vocab: dict[str, int] = {}
            values = [n.labels.get(key) for n in self.nodes]
            for v in sorted({v for v in values if v is not None}):
                vocab[v] = len(vocab)
            d = len(vocab)
            got = (np.array([vocab[v] if v is not None else d for v in values], dtype=np.int64), d)
            self._codes[key] = got
            if d == self.n and bool((got[0] == np.arange(self.n)).all()):
                self._per_node_keys.add(key)  # hostnames, usually: a domain is one node, in node order
        return got

    def per_node(self, s: int, key: str) -> IntArray:
        """Bound members of set ``s`` in each node's domain of ``key`` (0 where it has no label)."""
        codes, _ = self.codes(key)
        out: IntArray = self.dom(s, key)[:self.n] if key in self._per_node_keys else self.dom(s, key)[codes]
        return out  # per node: no gather needed when the domain is the node

    def member_nodes(self, s: int) -> IntArray:
        """The nodes of the bound members of set ``s`` (one entry per member)."""
        nodes = self.where[self.pair_pods[self.set_start[s]:self.set_start[s + 1]]]
        out: IntArray = nodes[nodes >= 0]
        return out

    def node_counts(self, s: int) -> IntArray:
        """Bound members of set ``s`` on each node (built on demand, not kept)."""
        out: IntArray = np.bincount(self.member_nodes(s), minlength=self.n).astype(np.int64)
        return out

    def dom(self, s: int, key: str) -> IntArray:
        """Bound members of set ``s`` per domain of ``key`` (kept up to date once asked for)."""
        arr = self.doms[s].get(key)
        if arr is None:
            codes, d = self.codes(key)
            arr = np.bincount(codes[self.member_nodes(s)], minlength=d + 1).astype(np.int64)
            arr[d] = 0
            self._keep(s, key, arr)
        return arr

    def _keep(self, s: int, key: str, arr: IntArray) -> None:
        """Keep ``arr`` as set ``s``'s counts for ``key``, dropping the oldest kept over the bound."""
        self.doms[s][key] = arr
        self._kept[s, key] = len(arr)
        self._cells += len(arr)
        while self._cells > MAX_COUNT_CELLS and len(self._kept) > 1:
            old = next(iter(self._kept))
            if old == (s, key):  # pragma: no cover - the newest is last in the order
                break
            self._cells -= self._kept.pop(old)
            del self.doms[old[0]][old[1]]

    # -- changes ------------------------------------------------------------------------------

    def add(self, pod: int, node: int, delta: int) -> None:
        self.where[pod] = node if delta > 0 else -1
        for s in self.members[pod]:
            self.total[s] += delta
            for key, arr in self.doms[s].items():
                codes, d = self._codes[key]
                c = codes[node]
                if c != d:
                    arr[c] += delta
            for (key, _), (eligible, arr) in self._eligible_doms[s].items():
                if eligible[node]:
                    codes, d = self._codes[key]
                    c = codes[node]
                    if c != d:
                        arr[c] += delta

    def add_many(self, pods: IntArray, nodes: IntArray) -> None:
        """``add`` for pods bound in bulk (the snapshot's running pods)."""
        was = self.where[self.pair_pods] >= 0
        self.where[pods] = nodes
        now = self.where[self.pair_pods] >= 0
        sets = self.pair_sets[now & ~was]
        for s, count in zip(*np.unique(sets, return_counts=True), strict=True):
            self.total[int(s)] += int(count)
            for key in list(self.doms[int(s)]):  # built again from the members' nodes when asked for
                self._cells -= self._kept.pop((int(s), key))
                del self.doms[int(s)][key]
            for _, arr in self._eligible_doms[int(s)].values():
                self._eligible_cells -= len(arr)
            self._eligible_doms[int(s)].clear()

    # -- rules of a pod ---------------------------------------------------------------------------

    def rules(self, idx: int) -> list[Rule]:
        got = self._rules.get(idx)
        if got is None:
            pod = self.pods[idx].pod
            # Pods alike (namespace, labels, terms) have the same rules: built once for all of them.
            alike = (self.sigs[idx], pod.affinity_terms, pod.anti_affinity_terms, pod.spread_constraints)
            got = self._rules_alike.get(alike)
            if got is None:
                got = self._build_rules(pod, idx)
                self._rules_alike[alike] = got
            self._rules[idx] = got
        return got

    def _build_rules(self, pod: Pod, idx: int) -> list[Rule]:
        out: list[Rule] = []
        ns = pod.namespace
        for t in _required(pod.affinity_terms):
            out.append(Rule(AFFINITY, self.set_index[_match_key(t, ns)], t.topology_key, t.selector))
        for t in _required(pod.anti_affinity_terms):
            out.append(Rule(ANTI, self.set_index[_match_key(t, ns)], t.topology_key, t.selector))
        for s in self.symmetric[idx]:
            t, _ = self.set_terms[s]
            out.append(Rule(SYMMETRIC, s, t.topology_key, t.selector))
        for c in _hard(pod):
            t = _spread_term(c)
            out.append(Rule(SPREAD, self.set_index[_match_key(t, ns)], c.topology_key, c.selector,
                            c, int(selector_matches(c.selector, pod.labels))))
        return out

    def soft_rules(self, idx: int) -> list[Rule]:
        """Preferred terms and ScheduleAnyway constraints of the pod (scores, never filters)."""
        got = self._soft.get(idx)
        if got is None:
            pod = self.pods[idx].pod
            # Other pods' preferred terms depend on the pod's labels too, when there are any.
            sig = self.sigs[idx] if self.has_carried_preferred else self.sigs[idx][0]
            alike = (sig, pod.affinity_terms, pod.anti_affinity_terms, pod.spread_constraints)
            got = self._soft_alike.get(alike)
            if got is None:
                ns = pod.namespace
                got = [Rule(PREFER, self.set_index[_match_key(t, ns)], t.topology_key, t.selector, weight=t.weight)
                       for t in pod.affinity_terms if t.weight]
                got += [Rule(AVOID, self.set_index[_match_key(t, ns)], t.topology_key, t.selector, weight=t.weight)
                        for t in pod.anti_affinity_terms if t.weight]
                got += [Rule(SOFT_SPREAD, self.set_index[_match_key(_spread_term(c), ns)], c.topology_key,
                             c.selector, c) for c in pod.spread_constraints if not c.hard]
                for s_id in self.their_preferred[idx]:
                    t, _ = self.set_terms[s_id]
                    got.append(Rule(THEIR_AVOID if self.carry_anti[s_id] else THEIR_PREFER, s_id, t.topology_key,
                                    t.selector, weight=t.weight))
                self._soft_alike[alike] = got
            self._soft[idx] = got
        return got

    def penalty(self, idx: int) -> IntArray | None:
        """How much each node goes against the pod's soft rules (lower: better; None: it has none),
        before the Placer adds the static part and normalises (docs/semantics-notes.md, "Soft scores").

        A preferred affinity term costs its weight on nodes whose domain holds no matching pod, a
        preferred anti-affinity term its weight where the domain holds one; another pod's preferred
        anti-affinity (affinity) term the pod matches adds (subtracts) its weight where the domain
        holds a pod carrying it; a ScheduleAnyway constraint costs the number of matching pods in
        the node's domain (nodes without its key: one more than the most)."""
        soft = self.soft_rules(idx)
        if not soft:
            return None
        total = np.zeros(self.n, dtype=np.int64)
        for r in soft:
            codes, d = self.codes(r.key)
            counts = self.dom(r.set_id, r.key)[codes]
            if r.kind is PREFER:
                total += np.where(counts > 0, 0, r.weight)
            elif r.kind is AVOID or r.kind is THEIR_AVOID:
                total += np.where(counts > 0, r.weight, 0)
            elif r.kind is THEIR_PREFER:
                total -= np.where(counts > 0, r.weight, 0)
            else:
                worst = int(counts.max(initial=0)) + 1
                total += np.where(codes == d, worst, counts)
        return total

    def signature(self, idx: int) -> tuple[object, ...]:
        """What this pod's rules depend on besides the counts (for the engine's failure memo)."""
        if not self.rules(idx):
            return ()
        pod = self.pods[idx].pod
        return (pod.namespace, tuple(sorted(pod.labels.items())), pod.affinity_terms, pod.anti_affinity_terms,
                pod.spread_constraints)

    # -- masks ----------------------------------------------------------------------------------

    def _affinity_waived(self, idx: int, rules: list[Rule]) -> bool:
        """The first pod of a co-located group: no counted pod matches any of its affinity terms,
        and it matches all of them itself."""
        pod = self.pods[idx].pod
        if any(self.total[r.set_id] > 0 for r in rules if r.kind == AFFINITY):
            return False
        return all(self._matches(self.set_terms[r.set_id], pod) for r in rules if r.kind == AFFINITY)

    def _selector_mask(self, pod: Pod) -> BoolArray:
        key = (tuple(sorted(pod.node_selector.items())), pod.affinity)
        got = self._selector_masks.get(key)
        if got is None:
            got = self.feasibility.selector_mask(pod)
            self._selector_masks[key] = got
        return got

    def _eligible(self, pod: Pod, c: SpreadConstraint, spread_keys: tuple[str, ...],
                  narrowed: Narrowing | None = None) -> tuple[BoolArray, BoolArray]:
        """Nodes carrying every key of the pod's hard constraints, and among them the eligible ones
        (the pod's node affinity honoured, narrowed to ``narrowed``'s nodes as well, taints when the
        constraint says so); cached."""
        affinity_key = (tuple(sorted(pod.node_selector.items())), pod.affinity) \
            if c.node_affinity_policy == "Honor" else None
        if affinity_key is None:
            narrowed = None
        taint_key = pod.tolerations if c.node_taints_policy == "Honor" else None
        key = (spread_keys, affinity_key, taint_key, None if narrowed is None else narrowed[0])
        got = self._eligible_cache.get(key)
        if got is None:
            has_keys = np.ones(self.n, dtype=np.bool_)
            for k in spread_keys:
                codes_k, d_k = self.codes(k)
                has_keys &= codes_k != d_k
            eligible = has_keys
            if affinity_key is not None:
                eligible = eligible & self._selector_mask(pod)
                if narrowed is not None:
                    eligible = eligible & narrowed[1]
            if taint_key is not None:
                eligible = eligible & self.feasibility.taint_mask(pod)
            got = (has_keys, eligible)
            self._eligible_cache[key] = got
        return got

    def _domains_of(self, eligible: BoolArray, key: str) -> tuple[BoolArray, bool]:
        """Domains of ``key`` with an eligible node, and whether every labelled node is eligible."""
        got = self._domain_cache.get((id(eligible), key))
        if got is None:
            codes, d = self.codes(key)
            present = np.bincount(codes[eligible], minlength=d + 1)[:d] > 0
            full = bool(np.array_equal(eligible, codes != d))
            got = (present, full)
            self._domain_cache[(id(eligible), key)] = got
        return got

    def _spread_allowed(self, idx: int, rule: Rule, spread_keys: tuple[str, ...],
                        narrowed: Narrowing | None = None) -> BoolArray:
        c = rule.spread
        assert c is not None
        has_keys, eligible = self._eligible(self.pods[idx].pod, c, spread_keys, narrowed)
        codes, d = self.codes(rule.key)
        present, full = self._domains_of(eligible, rule.key)
        if full:  # the common case: the counts kept per domain are the ones to use
            counts = self.dom(rule.set_id, rule.key)
            by_node = self.per_node(rule.set_id, rule.key)
        else:
            counts = self._eligible_counts(rule.set_id, rule.key, eligible)
            by_node = counts[codes]
        n_domains = int(present.sum())
        least = 0
        if n_domains and n_domains >= (c.min_domains or 1):
            least = int(counts[:d].min() if full else counts[:d][present].min())
        allowed: BoolArray = by_node <= c.max_skew + least - rule.self_match
        if not self._all_true(has_keys):
            allowed &= has_keys
        return allowed

    def _eligible_counts(self, s: int, key: str, eligible: BoolArray) -> IntArray:
        """Bound members of set ``s`` per domain of ``key``, counting only those on ``eligible``
        nodes (a mask kept in ``_eligible_cache``: its id names it); kept up to date by ``add``. The
        caller does not change it."""
        kept = self._eligible_doms[s]
        got = kept.get((key, id(eligible)))
        if got is not None:
            return got[1]
        codes, d = self.codes(key)
        counts: IntArray = np.bincount(codes[eligible], weights=self.node_counts(s)[eligible],
                                       minlength=d + 1).astype(np.int64)
        if self._eligible_cells + len(counts) > MAX_COUNT_CELLS:
            for other in self._eligible_doms:
                other.clear()
            self._eligible_cells = 0
        kept[(key, id(eligible))] = (eligible, counts)
        self._eligible_cells += len(counts)
        return counts

    def _all_true(self, mask: BoolArray) -> bool:
        got = self._all_cache.get(id(mask))
        if got is None:
            got = bool(mask.all())
            self._all_cache[id(mask)] = got
        return got

    def _rule_mask(self, idx: int, rule: Rule, spread_keys: tuple[str, ...],
                   narrowed: Narrowing | None = None) -> BoolArray | None:
        """Nodes ``rule`` allows now; None when it excludes no node."""
        kind = rule.kind
        if kind is SPREAD:
            return self._spread_allowed(idx, rule, spread_keys, narrowed)
        if kind is AFFINITY:
            out: BoolArray = self.per_node(rule.set_id, rule.key) > 0
            return out
        if self.total[rule.set_id] == 0:
            return None  # anti-affinity with nothing counted excludes no node
        out = self.per_node(rule.set_id, rule.key) == 0
        return out

    def _rule_masks(self, idx: int) -> list[tuple[Rule, BoolArray]]:
        rules = self.rules(idx)
        waived = self._waived(idx, rules)
        spread_keys = self._spread_keys(rules)
        out: list[tuple[Rule, BoolArray]] = []
        for r in rules:
            if waived and r.kind is AFFINITY:
                continue
            m = self._rule_mask(idx, r, spread_keys)
            if m is not None:
                out.append((r, m))
        return out

    def _waived(self, idx: int, rules: list[Rule]) -> bool:
        return any(r.kind is AFFINITY for r in rules) and self._affinity_waived(idx, rules)

    @staticmethod
    def _spread_keys(rules: list[Rule]) -> tuple[str, ...]:
        return tuple(r.key for r in rules if r.kind is SPREAD)

    def mask(self, idx: int, narrowed: Narrowing | None = None) -> BoolArray | None:
        """Nodes the pod's inter-pod rules allow now; None when they exclude none (or it has none).
        ``narrowed``: (a name, nodes): the rules of the pod with its node selection narrowed to those
        nodes (a flavor's, engine/flavors.py), as those of a copy of it whose node selector adds the
        labels that select them: only the eligible nodes of its spread constraints that honour its
        node affinity depend on its node selection."""
        rules = self.rules(idx)
        if not rules:
            return None
        if len(rules) == 1 and rules[0].kind is not AFFINITY:  # the common case, kept short
            return self._rule_mask(idx, rules[0], (rules[0].key,), narrowed)
        waived = self._waived(idx, rules)
        spread_keys = self._spread_keys(rules)
        allowed: BoolArray | None = None
        for r in rules:
            if waived and r.kind is AFFINITY:
                continue
            m = self._rule_mask(idx, r, spread_keys, narrowed)
            if m is not None:
                allowed = m if allowed is None else allowed & m
        return allowed

    def explain(self, idx: int, left: BoolArray) -> tuple[list[str], BoolArray]:
        """Causes for a pending reason: how many of the ``left`` nodes each rule rules out."""
        causes: list[str] = []
        if not self.rules(idx):
            return causes, left
        for rule, m in self._rule_masks(idx):
            out = left & ~m
            if out.any():
                causes.append(f"{int(out.sum())} excluded by {rule.text}")
                left = left & m
        return causes, left
