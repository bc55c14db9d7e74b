"""GPU-model quotas: ResourceFlavors as quota dimensions of their own, and the flavor fallback of an
attempt (docs/semantics.md, "GPU-model quotas (resource flavors)").

The mapping is done at the edges, so that the queue machinery (fair order, borrowing, lending,
reclaim, preemption) works per flavor unchanged: a Queue's ``spec.flavors`` entry (F, R) becomes the
managed resource ``R@F`` of the forest, whose capacity is R on the nodes of F; a pod that takes
flavor F counts R on ``R@F`` instead of R (:meth:`FlavorBook.move`); and a flavor's placement is the
member's placement with F's labels added to its node selector (:meth:`FlavorBook.applied`). Nothing
here runs for a snapshot whose queues list no flavor (the engine then holds no book).
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np

from gpufleet.domain import (
    GPU,
    MILLI,
    FlavorChoice,
    Pod,
    Queue,
    QueueResource,
    ResourceFlavor,
    SelectorRequirement,
    SelectorTerm,
)
from gpufleet.domain.flavors import flavored
from gpufleet.engine.cluster import BoolArray, ClusterState, IntArray
from gpufleet.engine.workload import Gang, PodInfo

if TYPE_CHECKING:
    from gpufleet.engine.feasibility import StaticFeasibility
    from gpufleet.engine.queues import QueueForest

__all__ = ["FlavorBook", "FlavorHost", "Outcome", "with_any_flavor", "with_flavor"]


# Pod's fields in order, read in one C call: a copy with one field changed is built positionally,
# as dataclasses.replace builds it (every field is an init field, and Pod has no __post_init__), at
# a third of its cost (a flavored copy is made per pod and flavor tried).
_POD_FIELDS = [f.name for f in dataclasses.fields(Pod)]
assert all(f.init for f in dataclasses.fields(Pod)) and not hasattr(Pod, "__post_init__")
_pod_values = operator.attrgetter(*_POD_FIELDS)
_SELECTOR_AT = _POD_FIELDS.index("node_selector")


def with_flavor(pod: Pod, labels: Mapping[str, str]) -> Pod | None:
    """``pod`` with a flavor's ``labels`` added to its node selector: its placement on the flavor's
    nodes (None: its selector names one of them with another value, so it excludes the flavor)."""
    selector = dict(pod.node_selector)
    for k, v in labels.items():
        if selector.setdefault(k, v) != v:
            return None
    values = list(_pod_values(pod))
    values[_SELECTOR_AT] = selector
    return Pod(*values)


def with_any_flavor(pod: Pod, flavors: Sequence[Mapping[str, str]]) -> Pod | None:
    """``pod`` placed on the nodes of any of ``flavors`` (each a flavor's labels): its required
    node affinity becomes each of its terms with each flavor's labels (None: it excludes them all)."""
    usable = [labels for labels in flavors if all(pod.node_selector.get(k, v) == v for k, v in labels.items())]
    if len(usable) <= 1:
        return with_flavor(pod, usable[0]) if usable else None
    terms = pod.affinity or (SelectorTerm(),)
    return dataclasses.replace(pod, affinity=tuple(
        SelectorTerm(t.expressions + tuple(SelectorRequirement(k, "In", (v,)) for k, v in sorted(labels.items())),
                     t.fields)
        for t in terms for labels in usable))


def _in_quota_knowing(in_quota: Callable[[int, list[int]], bool], known: tuple[list[int], bool], leaf: int,
                      request: list[int]) -> bool:
    """``in_quota(leaf, request)``, answered from ``known`` (a request and its verdict now) when equal."""
    return known[1] if request == known[0] else in_quota(leaf, request)


def _why_unplaced(host: FlavorHost, gang: Gang, members: list[int], request: list[int]) -> str:
    """Why the gang's placement on the flavor applied now fails (:meth:`FlavorBook.attempt`'s reason
    for a placement not tried, asked in the state it was known to fail in)."""
    placed = host.try_place(gang, members, request)
    assert not placed.ok, "admit_lone refused the placement in this state"
    return placed.why()


class Placed(Protocol):
    """A gang placement (engine/placement.py's GangPlacement, as this module reads it)."""

    @property
    def ok(self) -> bool: ...

    def why(self) -> str: ...


class FlavorHost(Protocol):
    """What an attempt over flavors calls back (the engine)."""

    forest: QueueForest

    def gang_request(self, members: list[int]) -> list[int]: ...

    def quota_gate(self, gang: Gang, request: list[int]) -> str: ...

    def try_place(self, gang: Gang, members: list[int], request: list[int]) -> Placed: ...

    def record_placed(self, gang: Gang, placed: Placed) -> None: ...

    def placed_node(self, placed: Placed) -> int: ...

    def preempt_for(self, gang: Gang, members: list[int], request: list[int],
                    failed: Callable[[], str]) -> tuple[bool, str]: ...

    @property
    def consolidating(self) -> bool: ...

    def consolidate(self, gang: Gang, members: list[int], request: list[int]) -> Placed | None: ...

    def may_consolidate(self, gang: Gang, members: list[int]) -> bool: ...


Outcome = tuple[bool, str]


class Chosen(Protocol):
    """A pod's placement (engine/placement.py's Assignment, as this module reads it)."""

    @property
    def node(self) -> int: ...


A = TypeVar("A", bound=Chosen, covariant=True)


class LonePlacer(Protocol[A]):
    """The placement (engine/placement.py's Placer) as the batch path's flavor choice calls it."""

    @property
    def feasibility(self) -> StaticFeasibility: ...

    def indexed_as(self, info: PodInfo, key: object, static: Callable[[], BoolArray]) -> tuple[bool, A | None]: ...

    def narrowed_node(self, info: PodInfo, key: object, nodes: BoolArray) -> tuple[bool, A | None]: ...

    def best_node(self, info: PodInfo) -> A | None: ...


class FlavorBook:
    """The flavors of one engine call: which node is of which flavor, each leaf's flavors in order,
    and the pods' flavored copies."""

    def __init__(self, flavors: Sequence[ResourceFlavor], queues: Sequence[Queue], cluster: ClusterState) -> None:
        nodes = cluster.nodes
        self.warnings: list[str] = []
        # Each flavor's nodes: one vector test per label (a flavor without labels: every node).
        values: dict[str, np.ndarray] = {}
        of_flavor: list[BoolArray] = []
        for f in flavors:
            mask = np.ones(len(nodes), dtype=np.bool_)
            for key, value in f.node_labels:
                got = values.get(key)
                if got is None:
                    got = values[key] = np.array([n.labels.get(key) for n in nodes], dtype=object)
                mask &= got == value
            of_flavor.append(mask)
        # Overlapping flavors (domain.flavors.overlapping_flavors): each flavor of a node of two or
        # more, with the first such node.
        bad: dict[str, str] = {}
        if len(flavors) > 1:
            shared = np.sum(of_flavor, axis=0) > 1
            for f, mask in zip(flavors, of_flavor, strict=True):
                both = np.flatnonzero(mask & shared)
                if len(both):
                    bad[f.name] = nodes[int(both[0])].name
        for name, node in sorted(bad.items()):
            self.warnings.append(f"ResourceFlavor {name}: node {node} is of another flavor too (overlapping "
                                 "flavors): the flavor is left out")
        usable = [f for f in flavors if f.name not in bad and f.node_labels]
        # Flavors a queue names that cannot be used (overlapping, without labels, unknown: the
        # controller's input; replay refuses them): they hold no node, and their pods wait.
        known = {f.name for f in flavors}
        self.unusable: dict[str, str] = {name: "overlapping flavors" for name in bad}
        self.unusable.update({f.name: "no node labels" for f in flavors if not f.node_labels})
        self.unusable.update({qf.name: "no such ResourceFlavor" for q in queues for qf in q.flavors
                              if qf.name not in known})
        self.names: list[str] = [f.name for f in usable] + sorted(self.unusable)
        self.labels: list[dict[str, str]] = [dict(f.node_labels) for f in usable] + [{} for _ in self.unusable]
        self.of: dict[str, int] = {name: i for i, name in enumerate(self.names)}
        # Node -> its flavor (-1: none).
        self.node_flavor: IntArray = np.full(len(nodes), -1, dtype=np.int64)
        self.masks: list[BoolArray] = [m for f, m in zip(flavors, of_flavor, strict=True)
                                       if f.name not in bad and f.node_labels]
        for i, mask in enumerate(self.masks):
            self.node_flavor[mask] = i
        self.masks += [np.zeros(len(nodes), dtype=np.bool_) for _ in self.unusable]
        # The flavors each queue lists (usable ones, in its order) and the resources they name.
        self.queue_flavors: dict[str, list[tuple[int, Mapping[str, QueueResource]]]] = {}
        self.best_named = {q.name for q in queues if q.flavor_choice is FlavorChoice.BEST_PLACEMENT}
        for q in queues:
            firsts = {qf.name: qf for qf in reversed(q.flavors)}  # a flavor listed twice: its first entry
            listed = [(self.of[qf.name], qf.resources) for qf in q.flavors if firsts[qf.name] is qf]
            if q.flavors:
                self.queue_flavors[q.name] = listed
        self.flavored_resources: set[str] = {r for listed in self.queue_flavors.values()
                                             for _, res in listed for r in res}
        self.leaf_resources: dict[int, tuple[str, ...]] = {}
        self.capacity: dict[str, int] = {}
        sched = cluster.schedulable
        for listed in self.queue_flavors.values():
            for k, res in listed:
                rows = sched & self.masks[k]
                for r in res:
                    if r == GPU:
                        amount = int(cluster.gpu_count[rows].sum()) * MILLI
                    else:
                        j = cluster.res_index.get(r)
                        amount = 0 if j is None else sum(cluster.alloc[rows, j].tolist())
                    self.capacity[flavored(r, self.names[k])] = amount
        # Set by :meth:`bind` once the forest is built.
        self.leaf_flavors: dict[int, list[int]] = {}
        self.best_leaves: set[int] = set()  # leaves whose flavorChoice is BestPlacement
        self._moves: dict[tuple[int, int], list[tuple[str, int, int]]] = {}
        self._pods: dict[tuple[int, int], Pod] = {}
        self._reach: dict[tuple[object, int], bool] = {}
        self._original: dict[int, Pod] = {}
        # The batch path (:meth:`admit_lone`): candidates per (leaf, static key), the last quota
        # request per (leaf, flavor) with the requests it was made of, masks per flavor set.
        self._lone: dict[tuple[int, object], list[int]] = {}
        self._last: dict[tuple[int, int], tuple[Mapping[str, int], int, list[int]]] = {}
        self._union: dict[tuple[int, ...], BoolArray] = {}
        # What the last :meth:`admit_lone` that refused its pod found: (pod, candidate flavors, the
        # pod's request on each, whether it is in quota there); None after any other outcome.
        self.refused: tuple[int, list[int], list[list[int]], list[bool]] | None = None

    @staticmethod
    def of_snapshot(flavors: Sequence[ResourceFlavor], queues: Sequence[Queue],
                    cluster: ClusterState) -> FlavorBook | None:
        """The book, or None when no queue lists a flavor (then nothing of this module runs)."""
        if not any(q.flavors for q in queues):
            return None
        return FlavorBook(flavors, queues, cluster)

    def queues(self, queues: Sequence[Queue]) -> list[Queue]:
        """``queues`` with each flavor entry (F, R) as the resource ``R@F`` of the queue."""
        out = []
        for q in queues:
            listed = self.queue_flavors.get(q.name)
            if not listed:
                out.append(q)
                continue
            resources = dict(q.resources)
            for f, res in listed:
                for r, spec in res.items():
                    resources[flavored(r, self.names[f])] = spec
            out.append(dataclasses.replace(q, resources=resources))
        return out

    def bind(self, forest: QueueForest, pods: Sequence[PodInfo], cluster: ClusterState) -> None:
        """Learn the forest's numbering; set each pod's flavor: its node's for a running pod that
        takes one, else none."""
        column = {r: j for j, r in enumerate(forest.managed)}
        for name, listed in self.queue_flavors.items():
            leaf = forest.index.get(name)  # type: ignore[call-overload]
            if leaf is None or not forest.is_leaf(leaf) or not listed:
                continue
            self.leaf_flavors[leaf] = [f for f, _ in listed]
            if name in self.best_named:
                self.best_leaves.add(leaf)
            self.leaf_resources[leaf] = tuple(sorted({r for _, res in listed for r in res}))
            for f, res in listed:
                self._moves[(leaf, f)] = [(r, column.get(r, -1), column[flavored(r, self.names[f])])
                                          for r in sorted(res) if flavored(r, self.names[f]) in column]
        # Every flavored dimension of every flavor a running pod's node can be of, for its leaf.
        for leaf in self.leaf_flavors:
            for f in range(len(self.names)):
                if (leaf, f) not in self._moves:
                    self._moves[(leaf, f)] = [(r, column.get(r, -1), column[flavored(r, self.names[f])])
                                              for r in sorted(self.flavored_resources)
                                              if flavored(r, self.names[f]) in column]
        index = cluster.index
        leaves = self.leaf_flavors
        node_flavor: list[int] = self.node_flavor.tolist()
        takes = self.takes
        # Leaves whose flavors name GPUs: there a pod taking GPUs takes a flavor without asking ``takes``.
        gpu_leaves = {leaf for leaf, names in self.leaf_resources.items() if GPU in names}
        for info in pods:
            f = -1
            leaf = info.queue
            if leaf in leaves:
                on = info.pod.node_name
                if on is not None and ((leaf in gpu_leaves and (info.whole or info.blocks is not None
                                                                  or info.gpu_mem_bytes is not None))
                                         or takes(info)):
                    node = index.get(on)
                    if node is not None:
                        f = node_flavor[node]
            info.flavor = f

    # -- what a pod counts ---------------------------------------------------------------------

    def takes(self, info: PodInfo) -> bool:
        """Whether the pod takes a flavor: its leaf lists flavors and it asks a resource they name."""
        names = self.leaf_resources.get(info.queue)
        if names is None:
            return False
        requests = info.pod.requests
        for r in names:
            if r == GPU:
                if info.whole or info.fractional:
                    return True
            elif requests.get(r, 0) > 0:
                return True
        return False

    def takes_gang(self, gang: Gang, members: Sequence[int], pods: Sequence[PodInfo]) -> bool:
        """Whether the gang is tried over flavors: a member takes one, and no member runs outside
        every flavor (such a gang is placed as without flavors)."""
        if gang.queue not in self.leaf_flavors or not any(self.takes(pods[m]) for m in members):
            return False
        return all(pods[m].flavor >= 0 for m in gang.members if pods[m].node is not None and self.takes(pods[m]))

    def move(self, info: PodInfo, vec: list[int], gpu_milli: int) -> list[int]:
        """``vec`` (the pod's quota vector over the managed resources) with what it asks of each
        flavored resource moved to its flavor's dimension (its flavor, else its leaf's first).
        ``gpu_milli``: what the pod counts of GPUs (``QuotaGates.gpu_milli``)."""
        f = info.flavor
        if f < 0:
            if info.pod.node_name is not None or not self.takes(info):
                return vec
            f = self.leaf_flavors[info.queue][0]
        moves = self._moves.get((info.queue, f))
        if not moves:
            return vec
        requests = info.pod.requests
        for r, plain, dim in moves:
            amount = gpu_milli if r == GPU else requests.get(r, 0)
            if plain >= 0:
                vec[plain] -= amount
            vec[dim] += amount
        return vec

    def flavor_moves(self, leaf: int, f: int) -> list[tuple[str, int, int]]:
        """What :meth:`move` moves for a pod of ``leaf`` on flavor ``f``: (resource, its plain
        dimension or -1, its flavored dimension)."""
        return self._moves.get((leaf, f)) or []

    # -- placement on a flavor -------------------------------------------------------------------

    def _flavored_pod(self, info: PodInfo, f: int) -> Pod | None:
        """The pod with flavor ``f``'s labels added to its node selector (None: its selector names
        one of them with another value). Kept per (pod, flavor): the static masks are cached by it."""
        key = (info.idx, f)
        got = self._pods.get(key)
        if got is None:
            got = with_flavor(self._original.get(info.idx, info.pod), self.labels[f])
            if got is None:
                return None
            self._pods[key] = got
        return got

    def candidates(self, gang: Gang, members: Sequence[int], pods: Sequence[PodInfo],
                   feasible: Callable[[Pod], BoolArray], key: Callable[[Pod], object]) -> tuple[list[int], list[str]]:
        """The gang's candidate flavors in its queue's order, and why each other one is out (a
        member's static mask meets no node of the flavor: the same as its selector with the
        flavor's labels added; answered once per distinct constraints and flavor)."""
        reach = self._reach
        listed = self.leaf_flavors[gang.queue]
        if gang.alive == 0 and len(members) == 1 and len(gang.members) == 1:
            # A lone pending pod: admit_lone's candidates (kept per leaf and static key), when they are
            # every listed flavor (nothing to say of the others)
            lone = self._lone.get((gang.queue, key(self._original.get(members[0], pods[members[0]].pod))))
            if lone is not None and len(lone) == len(listed):
                return list(lone), []
        running = next((pods[m].flavor for m in gang.members if pods[m].node is not None), None)
        out: list[int] = []
        why: list[str] = []
        for f in listed:
            name = self.names[f]
            if name in self.unusable:
                why.append(f"{name}: unusable ({self.unusable[name]})")
                continue
            if running is not None and f != running:
                why.append(f"{name}: the gang runs on another flavor")
                continue
            for m in members:
                pod = self._original.get(m, pods[m].pod)
                k = (key(pod), f)
                ok = reach.get(k)
                if ok is None:
                    ok = reach[k] = bool((feasible(pod) & self.masks[f]).any())
                if not ok:
                    why.append(f"{name}: excluded by the node selection of pod {pods[m].key}")
                    break
            else:
                out.append(f)
        return out, why

    @contextmanager
    def applied(self, members: Sequence[int], pods: Sequence[PodInfo], f: int) -> Iterator[None]:
        """Members as placed on flavor ``f``: flavored pods and flavor set. The pods are given back
        after; the flavor stays set (the caller clears it when the attempt fails)."""
        for m in members:
            info = pods[m]
            self._original.setdefault(m, info.pod)
            flavored_pod = self._flavored_pod(info, f)
            assert flavored_pod is not None
            info.pod = flavored_pod
            info.flavor = f
        try:
            yield
        finally:
            for m in members:
                pods[m].pod = self._original[m]

    def attempt(self, host: FlavorHost, gang: Gang, members: list[int], pods: Sequence[PodInfo],
                feasible: Callable[[Pod], BoolArray], key: Callable[[Pod], object],
                unplaced: bool = False) -> Outcome:
        """Try the gang on its candidate flavors: in quota, then borrowing, then by consolidation
        (when on), then with preemption (docs/semantics.md); commit on the first that admits it.
        ``unplaced``: the placement on each flavor is known to fail now (:meth:`admit_lone` refused the
        gang's lone pod, no hold applies): not tried again; its reason is asked only when shown."""
        cands, why = self.candidates(gang, members, pods, feasible, key)
        leaf = gang.queue
        if not cands:
            return False, f"no flavor of queue {host.forest.name(leaf)} fits: " + "; ".join(why)
        requests: dict[int, list[int]] = {}
        tried: dict[int, str] = {}
        inside: list[int] = []
        outside: list[int] = []
        refused = self.refused if unplaced else None
        if refused is not None and len(members) == 1 and refused[0] == members[0] and refused[1] == cands:
            # admit_lone's requests and verdicts, in this state: the same as asked again here
            for f, request, ok in zip(cands, refused[2], refused[3], strict=True):
                requests[f] = list(request)
                (inside if ok else outside).append(f)
            pods[members[0]].flavor = cands[-1]  # as the loop below leaves it
        else:
            for f in cands:
                for m in members:  # what the members count on flavor f (no placement: the pods stay)
                    pods[m].flavor = f
                requests[f] = host.gang_request(members)
                (inside if host.forest.in_quota(leaf, requests[f]) else outside).append(f)
        if leaf in self.best_leaves and len(members) == 1 and gang.alive == 0:
            for tier in (inside, outside):
                if self._best_placement(host, gang, members[0], pods, tier, requests, tried):
                    return True, ""
        # Why each flavor's placement failed, asked only when the victim search fails too (a
        # reason costs a pass over the nodes), with the members on that flavor again: the state is
        # the same (failed attempts and victim searches leave it as it was).
        whys: dict[int, Callable[[], str]] = {}
        if unplaced:  # each asked under its flavor, in the same state (a victim search that fails leaves it)
            whys = {f: partial(_why_unplaced, host, gang, members, requests[f]) for f in inside + outside}
        else:
            for f in inside + outside:
                with self.applied(members, pods, f):
                    placed = host.try_place(gang, members, requests[f])
                    if placed.ok:
                        host.record_placed(gang, placed)
                        return True, ""
                    whys[f] = placed.why
        # moves before victims, per flavor in the placement's order; none when hopeless (on any flavor)
        if host.consolidating and host.may_consolidate(gang, members):
            for f in inside + outside:
                with self.applied(members, pods, f):
                    planned = host.consolidate(gang, members, requests[f])
                    if planned is not None:
                        host.record_placed(gang, planned)
                        return True, ""
        for f in cands:
            with self.applied(members, pods, f):
                ok, reason = host.preempt_for(gang, members, requests[f], whys[f])
            if ok:
                return True, ""
            tried[f] = reason
        for m in members:
            pods[m].flavor = -1
        parts = [f"{self.names[f]}: {tried[f]}" for f in cands] + why
        return False, "tried " + "; ".join(parts)

    def _best_placement(self, host: FlavorHost, gang: Gang, m: int, pods: Sequence[PodInfo], tier: list[int],
                        requests: dict[int, list[int]], tried: dict[int, str]) -> bool:
        """A pod alone of a BestPlacement queue: placed on the best node over the flavors of ``tier``
        that its queue's gates admit, taking the flavor of that node (committed on success)."""
        admitted = []
        for f in tier:
            pods[m].flavor = f
            reason = host.quota_gate(gang, requests[f])
            if reason:
                tried[f] = reason
            else:
                admitted.append(f)
        if not admitted:
            return False
        info = pods[m]
        original = self._original.setdefault(m, info.pod)
        union = with_any_flavor(original, [self.labels[f] for f in admitted])
        if union is None:
            return False
        info.pod = union
        info.flavor = admitted[0]
        try:
            placed = host.try_place(gang, [m], requests[admitted[0]])
            if placed.ok:
                info.flavor = int(self.node_flavor[host.placed_node(placed)])
                host.record_placed(gang, placed)
                return True
        finally:
            info.pod = original
        info.flavor = -1
        return False

    # -- the batch path (engine/batch.py) ------------------------------------------------------

    def admit_lone(self, info: PodInfo, gang: Gang, placer: LonePlacer[A], in_quota: Callable[[int, list[int]], bool],
                   limits: Callable[[int, list[int]], bool] | None, quota_vec: Callable[[PodInfo], list[int]],
                   known: tuple[list[int], bool] | None = None,
                   hold: Callable[[bool], None] | None = None) -> tuple[A, list[int]] | None:
        """The batch path's admission of a lone whole-GPU pod (no member running) that takes a
        flavor, with no lending limits, user caps or claims: what :meth:`attempt` commits
        without preemption, as (its placement, its quota request on the flavor it takes: ``info``'s
        flavor is set), not committed; None (nothing changed but the holds that ``hold`` set, which
        every attempt sets again) where that attempt would not admit it there. ``limits``: whether
        the leaf's limits admit a request (None: no queue has limits);
        ``known``: a request of the pod whose in-quota verdict is known now (the fair order's);
        ``hold``: called before each placement with whether the request placed borrows (is not in
        quota): it sets the reservations' holds as the attempt's ``try_place`` on that flavor does
        (``Reservations.hold_for``); None: no hold applies."""
        leaf = gang.queue
        self.refused = None
        if known is not None:
            in_quota = partial(_in_quota_knowing, in_quota, known)
        feas = placer.feasibility
        key = feas.key(info.pod)
        cands = self._lone.get((leaf, key))
        if cands is None:
            cands = self._lone[(leaf, key)] = self._lone_candidates(leaf, info, feas.mask, key)
        if not cands:
            return None

        def admits(req: list[int], inside: bool) -> bool:  # QuotaGates.gate without lending limits
            return (limits is None or limits(leaf, req)) and (inside or gang.preemptible)

        # The in-quota test and the request of each candidate, as far as needed (pass 1 stops at
        # the first flavor that admits and places the pod).
        requests: list[list[int]] = []
        outside: list[int] = []
        if leaf in self.best_leaves:
            inside: list[int] = []
            for i, f in enumerate(cands):
                requests.append(req := self._request_on(info, f, quota_vec))
                (inside if in_quota(leaf, req) else outside).append(i)
            for tier, ok in ((inside, True), (outside, False)):
                admitted = [cands[i] for i in tier if admits(requests[i], ok)]
                if admitted and hold is not None:
                    hold(not ok)  # _best_placement's try_place with the first admitted flavor's request
                if admitted and (a := self._place_on(placer, info, key, admitted)) is not None:
                    f = int(self.node_flavor[a.node])
                    info.flavor = f
                    return a, requests[cands.index(f)]
        else:
            for i, f in enumerate(cands):
                requests.append(req := self._request_on(info, f, quota_vec))
                if not in_quota(leaf, req):
                    outside.append(i)
                elif admits(req, True):
                    if hold is not None:
                        hold(False)
                    if (a := self._place_on(placer, info, key, [f])) is not None:
                        info.flavor = f
                        return a, req
            for i in outside:
                if admits(requests[i], False):
                    if hold is not None:
                        hold(True)
                    if (a := self._place_on(placer, info, key, [cands[i]])) is not None:
                        info.flavor = cands[i]
                        return a, requests[i]
        info.flavor = -1
        inq = [True] * len(cands)
        for i in outside:
            inq[i] = False
        self.refused = (info.idx, cands, requests, inq)
        return None

    def _lone_candidates(self, leaf: int, info: PodInfo, feasible: Callable[[Pod], BoolArray],
                         key: object) -> list[int]:
        """:meth:`candidates` of a pending lone pod (no member running): its leaf's usable flavors,
        in order, that its static mask meets."""
        out = []
        for f in self.leaf_flavors[leaf]:
            if self.names[f] in self.unusable:
                continue
            ok = self._reach.get((key, f))
            if ok is None:
                ok = self._reach[(key, f)] = bool((feasible(info.pod) & self.masks[f]).any())
            if ok:
                out.append(f)
        return out

    def _request_on(self, info: PodInfo, f: int, quota_vec: Callable[[PodInfo], list[int]]) -> list[int]:
        """The pod's quota request on flavor ``f`` (kept per leaf and flavor for pods alike)."""
        last = self._last.get((info.queue, f))
        requests = info.pod.requests
        if last is not None and last[1] == info.whole and (last[0] is requests or last[0] == requests):
            return last[2]
        info.flavor = f
        vec = quota_vec(info)
        self._last[(info.queue, f)] = (requests, info.whole, vec)
        return vec

    def _place_on(self, placer: LonePlacer[A], info: PodInfo, key: object, flavors: list[int]) -> A | None:
        """Where the placement puts the pod on the nodes of ``flavors`` (one: that flavor's
        placement; more: BestPlacement's over all of them), as :meth:`applied` and
        :meth:`_best_placement` place it: from the free-GPU index with the pod's static mask
        narrowed to those nodes; else, on one flavor, from the pod with its static mask and its
        inter-pod rules narrowed to the flavor's nodes (``Placer.narrowed_node``); else on the
        flavored copy of the pod."""
        fs = tuple(flavors)
        feas = placer.feasibility
        pod = info.pod
        answered, a = placer.indexed_as(info, ("flavors", key, fs), lambda: feas.mask(pod) & self._nodes_of(fs))
        if answered:
            return a
        if len(fs) == 1:  # the index cannot answer (inter-pod rules, host ports): the pod narrowed
            answered, a = placer.narrowed_node(info, ("flavors", fs), self.masks[fs[0]])
            if answered:
                return a
        copy = self._flavored_pod(info, fs[0]) if len(fs) == 1 else \
            with_any_flavor(self._original.get(info.idx, pod), [self.labels[f] for f in fs])
        if copy is None:
            return None
        info.pod = copy
        try:
            return placer.best_node(info)
        finally:
            info.pod = pod

    def _nodes_of(self, flavors: tuple[int, ...]) -> BoolArray:
        """The nodes of any of ``flavors``."""
        if len(flavors) == 1:
            return self.masks[flavors[0]]
        got = self._union.get(flavors)
        if got is None:
            got = self._union[flavors] = np.logical_or.reduce([self.masks[f] for f in flavors])
        return got

    def name_of(self, info: PodInfo) -> str | None:
        """The flavor a pod took (None: none)."""
        return self.names[info.flavor] if info.flavor >= 0 else None
