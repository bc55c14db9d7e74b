"""Inter-pod rules: required pod affinity and anti-affinity (both ways) and DoNotSchedule topology
spread, as boolean node masks (docs/semantics-notes.md, "Inter-pod affinity" and "Topology spread").

A **set** is a predicate over pods whose bound members are counted per node: the pods matching
one term's selector in its namespaces, or the pods carrying one required anti-affinity term (for
the symmetric rule). Membership depends only on a pod's namespace and labels, so it is decided
once per call. Counts per node, and per domain of each topology key a rule asks about, are NumPy
arrays updated by the Placer's commit and release, so trial placements of the victim search roll
back exactly. A pod's rules are built on first use; a pod with none costs one list lookup, and a
snapshot where no pod has any rule builds nothing at all (``InterPod.build`` returns None).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.domain import Node, Pod, PodAffinityTerm, SpreadConstraint
from gpufleet.domain.selectors import selector_matches, selector_text, term_namespaces_match
from gpufleet.engine.cluster import BoolArray, IntArray
from gpufleet.engine.feasibility import StaticFeasibility
from gpufleet.engine.workload import PodInfo

__all__ = ["InterPod"]

AFFINITY, ANTI, SYMMETRIC, SPREAD = "affinity", "anti", "symmetric", "spread"

# A set: ("match", selector, owner namespace, namespaces, namespace selector) or ("carry", term, owner namespace)
SetKey = tuple[object, ...]


@dataclass(frozen=True, slots=True)
class Rule:
    kind: str  # AFFINITY | ANTI | SYMMETRIC | SPREAD
    set_id: int
    key: str
    text: str
    spread: SpreadConstraint | None = None
    self_match: int = 0  # spread: 1 when the pod matches the constraint's selector itself


def _match_key(term: PodAffinityTerm, owner_ns: str) -> SetKey:
    return ("match", term.selector, owner_ns, term.namespaces, term.namespace_selector)


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
    def build(nodes: Sequence[Node], feasibility: StaticFeasibility, pods: Sequence[PodInfo]) -> InterPod | None:
        """None when no pod of the snapshot has a required inter-pod rule: nothing to keep."""
        if not any(p.pod.anti_affinity_terms or p.pod.affinity_terms or p.pod.spread_constraints for p in pods):
            return None
        if not any(_required(p.pod.anti_affinity_terms) or _required(p.pod.affinity_terms) or _hard(p.pod)
                   for p in pods):
            return None
        return InterPod(nodes, feasibility, pods)

    def __init__(self, nodes: Sequence[Node], feasibility: StaticFeasibility, pods: Sequence[PodInfo]) -> None:
        self.nodes = nodes
        self.n = len(nodes)
        self.feasibility = feasibility
        self.pods = pods
        self._codes: dict[str, tuple[IntArray, int]] = {}
        self._selector_masks: dict[object, BoolArray] = {}
        self.set_index: dict[SetKey, int] = {}
        self.set_terms: list[tuple[PodAffinityTerm, str]] = []  # per set: its term and the owner's namespace
        self.set_is_carry: list[bool] = []
        # Every set a rule may ask about: the pods' own terms and constraints, and the carried anti terms.
        for info in pods:
            pod = info.pod
            for t in _required(pod.affinity_terms) + _required(pod.anti_affinity_terms):
                self._set(_match_key(t, pod.namespace), t, pod.namespace, False)
            for c in _hard(pod):
                t = _spread_term(c)
                self._set(_match_key(t, pod.namespace), t, pod.namespace, False)
            for t in _required(pod.anti_affinity_terms):
                self._set(("carry", t, pod.namespace), t, pod.namespace, True)
        n_sets = len(self.set_is_carry)
        # Membership by (namespace, labels): pods alike share the verdicts.
        by_labels: dict[tuple[str, frozenset[tuple[str, str]]], tuple[list[int], list[int]]] = {}
        self.members: list[list[int]] = []  # per pod: the sets it belongs to
        self.symmetric: list[list[int]] = []  # per pod: the carry sets whose term it matches
        member_rows = np.zeros((n_sets, len(pods)), dtype=np.bool_)
        for info in pods:
            pod = info.pod
            sig = (pod.namespace, frozenset(pod.labels.items()))
            got = by_labels.get(sig)
            if got is None:
                matched = [s for s in range(n_sets) if not self.set_is_carry[s]
                           and self._matches(self.set_terms[s], pod)]
                sym = [s for s in range(n_sets) if self.set_is_carry[s] and self._matches(self.set_terms[s], pod)]
                got = (matched, sym)
                by_labels[sig] = got
            own = list(got[0])
            for t in _required(pod.anti_affinity_terms):
                own.append(self.set_index[("carry", t, pod.namespace)])
            self.members.append(own)
            self.symmetric.append(got[1])
            member_rows[own, info.idx] = True
        self.member_rows = member_rows
        self.node_count: IntArray = np.zeros((n_sets, self.n), dtype=np.int64)
        self.total: list[int] = [0] * n_sets
        self.doms: list[dict[str, IntArray]] = [{} for _ in range(n_sets)]
        self._rules: dict[int, list[Rule]] = {}

    def _set(self, key: SetKey, term: PodAffinityTerm, owner_ns: str, carry: bool) -> None:
        if key not in self.set_index:
            self.set_index[key] = len(self.set_is_carry)
            self.set_terms.append((term, owner_ns))
            self.set_is_carry.append(carry)

    @staticmethod
    def _matches(term_owner: tuple[PodAffinityTerm, str], pod: Pod) -> bool:
        term, owner_ns = term_owner
        return term_namespaces_match(term, owner_ns, pod.namespace) and selector_matches(term.selector, pod.labels)

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
        return got

    def dom(self, s: int, key: str) -> IntArray:
        """Bound members of set ``s`` per domain of ``key`` (kept up to date once asked for)."""
        arr = self.doms[s].get(key)
        if arr is None:
            codes, d = self.codes(key)
            arr = np.bincount(codes, weights=self.node_count[s], minlength=d + 1).astype(np.int64)
            arr[d] = 0
            self.doms[s][key] = arr
        return arr

    # -- changes ------------------------------------------------------------------------------

    def add(self, pod: int, node: int, delta: int) -> None:
        for s in self.members[pod]:
            self.node_count[s, node] += delta
            self.total[s] += delta
            for key, arr in self.doms[s].items():
                codes, d = self._codes[key]
                c = codes[node]
                if c != d:
                    arr[c] += delta

    def add_many(self, pods: IntArray, nodes: IntArray) -> None:
        """``add`` for pods bound in bulk (the snapshot's running pods)."""
        for s in range(len(self.set_is_carry)):
            hit = self.member_rows[s, pods]
            if hit.any():
                np.add.at(self.node_count[s], nodes[hit], 1)
                self.total[s] += int(hit.sum())
                self.doms[s].clear()

    # -- rules of a pod ---------------------------------------------------------------------------

    def rules(self, idx: int) -> list[Rule]:
        got = self._rules.get(idx)
        if got is None:
            got = self._build_rules(self.pods[idx].pod, idx)
            self._rules[idx] = got
        return got

    def _build_rules(self, pod: Pod, idx: int) -> list[Rule]:
        out: list[Rule] = []
        ns = pod.namespace
        for t in _required(pod.affinity_terms):
            out.append(Rule(AFFINITY, self.set_index[_match_key(t, ns)], t.topology_key,
                            f"pod affinity ({selector_text(t.selector)}, {t.topology_key})"))
        for t in _required(pod.anti_affinity_terms):
            out.append(Rule(ANTI, self.set_index[_match_key(t, ns)], t.topology_key,
                            f"pod anti-affinity ({selector_text(t.selector)}, {t.topology_key})"))
        for s in self.symmetric[idx]:
            t, _ = self.set_terms[s]
            out.append(Rule(SYMMETRIC, s, t.topology_key,
                            f"anti-affinity of running pods ({selector_text(t.selector)}, {t.topology_key})"))
        for c in _hard(pod):
            t = _spread_term(c)
            out.append(Rule(SPREAD, self.set_index[_match_key(t, ns)], c.topology_key,
                            f"topology spread (maxSkew {c.max_skew}, {c.topology_key}, {selector_text(c.selector)})",
                            c, int(selector_matches(c.selector, pod.labels))))
        return out

    def constrained(self, idx: int) -> bool:
        return bool(self.rules(idx))

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

    def _spread_allowed(self, idx: int, rule: Rule, spread_keys: list[str]) -> BoolArray:
        c = rule.spread
        assert c is not None
        pod = self.pods[idx].pod
        has_keys = np.ones(self.n, dtype=np.bool_)
        for key in spread_keys:
            codes_k, d_k = self.codes(key)
            has_keys &= codes_k != d_k
        eligible = has_keys
        if c.node_affinity_policy == "Honor":
            eligible = eligible & self._selector_mask(pod)
        if c.node_taints_policy == "Honor":
            eligible = eligible & self.feasibility.taint_mask(pod)
        codes, d = self.codes(rule.key)
        counts = np.bincount(codes[eligible], weights=self.node_count[rule.set_id][eligible], minlength=d + 1)
        present = np.bincount(codes[eligible], minlength=d + 1)[:d] > 0
        n_domains = int(present.sum())
        least = 0.0
        if n_domains and n_domains >= (c.min_domains or 1):
            least = float(counts[:d][present].min())
        allowed: BoolArray = has_keys & (counts[codes] + rule.self_match - least <= c.max_skew)
        return allowed

    def _rule_masks(self, idx: int) -> list[tuple[Rule, BoolArray]]:
        rules = self.rules(idx)
        out: list[tuple[Rule, BoolArray]] = []
        waived = any(r.kind == AFFINITY for r in rules) and self._affinity_waived(idx, rules)
        spread_keys = [r.key for r in rules if r.kind == SPREAD]
        for r in rules:
            if r.kind == AFFINITY:
                if waived:
                    continue
                codes, _ = self.codes(r.key)
                out.append((r, self.dom(r.set_id, r.key)[codes] > 0))
            elif r.kind in (ANTI, SYMMETRIC):
                if self.total[r.set_id] == 0:
                    continue  # nothing counted: excludes no node
                codes, _ = self.codes(r.key)
                out.append((r, self.dom(r.set_id, r.key)[codes] == 0))
            else:
                out.append((r, self._spread_allowed(idx, r, spread_keys)))
        return out

    def mask(self, idx: int) -> BoolArray | None:
        """Nodes the pod's inter-pod rules allow now; None when it has no rule."""
        if not self.rules(idx):
            return None
        allowed: BoolArray | None = None
        for _, m in self._rule_masks(idx):
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
