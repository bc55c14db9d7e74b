"""An independent checker of the scheduler's invariants.

Given a ``Snapshot`` and the ``Decisions`` that ``gpufleet.engine.schedule`` returned for it, these
functions recompute the resulting cluster state from scratch with plain Python (dicts and sums, no
engine code) and return every violated invariant as a ``Violation``. An empty list means the
decisions are consistent with the rules of ``semantics.md`` that can be checked on the outcome
alone.

The checks are deliberately *necessary* conditions: wherever the engine's exact choices depend on
the order of admissions inside the replay, the check bounds the outcome instead of replaying it.

Only the resources that some Queue mentions take part in quota checks ("managed" resources,
``docs/semantics-notes.md``); ``nvidia.com/gpu`` usage counts a whole GPU as 1000 milli and a block
as 10 milli.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from gpufleet.domain import (
    GPU,
    MILLI,
    MILLI_PER_BLOCK,
    PODS,
    Binding,
    Decisions,
    EvictionReason,
    Node,
    PersistentVolume,
    Pod,
    PodGroup,
    PodKey,
    Queue,
    SelectorRequirement,
    Snapshot,
    StorageClass,
    TaintEffect,
    VolumeClaim,
    WithinQueue,
)
from gpufleet.domain.selectors import selector_matches, term_namespaces_match
from gpufleet.domain.wire import NO_PROVISIONER, VOLUME_ZONE_LABELS

BLOCKS = 100


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.message}"


# ---------------------------------------------------------------------------------------------
# Facts derived from a snapshot


class World:
    """Plain-Python facts about one snapshot: priorities, queues, gangs, quotas."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.nodes: dict[str, Node] = {n.name: n for n in snapshot.nodes}
        self.pods: dict[PodKey, Pod] = {p.key: p for p in snapshot.pods}
        self.classes: dict[str, int] = {c.name: c.value for c in snapshot.priority_classes}
        defaults = [c.value for c in snapshot.priority_classes if c.global_default]
        self.default_priority = defaults[0] if defaults else 0
        self.queues: dict[str, Queue] = {q.name: q for q in snapshot.queues}
        self.groups: dict[str, PodGroup] = {g.key: g for g in snapshot.pod_groups}
        self.children: dict[str, list[str]] = defaultdict(list)
        for q in snapshot.queues:
            if q.parent is not None:
                self.children[q.parent].append(q.name)
        self.managed: set[str] = {r for q in snapshot.queues for r in q.resources}
        self.threshold = snapshot.config.non_preemptible_priority
        self.members: dict[str, list[Pod]] = defaultdict(list)
        for p in snapshot.pods:
            if p.ours and not p.finished:
                self.members[self.gang_of(p)].append(p)

    # pods ------------------------------------------------------------------------------------

    def priority(self, pod: Pod) -> int:
        if pod.priority_class_name is not None and pod.priority_class_name in self.classes:
            return self.classes[pod.priority_class_name]
        if pod.priority is not None:
            return pod.priority
        return self.default_priority

    def preemptible(self, pod: Pod) -> bool:
        if pod.preemptible_label is not None:
            return pod.preemptible_label
        return self.priority(pod) < self.threshold

    def group(self, pod: Pod) -> PodGroup | None:
        if pod.group_label is None:
            return None
        return self.groups.get(f"{pod.namespace}/{pod.group_label}")

    def queue_of(self, pod: Pod) -> str:
        if pod.queue_label is not None:
            return pod.queue_label
        group = self.group(pod)
        if group is not None and group.queue is not None:
            return group.queue
        return self.snapshot.config.default_queue

    def gang_of(self, pod: Pod) -> str:
        if pod.group_label is not None:
            return f"group:{pod.namespace}/{pod.group_label}"
        return f"pod:{pod.key}"

    def gang_priority(self, gang: str) -> int:
        if gang.startswith("group:"):
            group = self.groups.get(gang[len("group:") :])
            if group is not None and group.priority_class_name in self.classes:
                return self.classes[group.priority_class_name]
        return max((self.priority(p) for p in self.members[gang]), default=self.default_priority)

    def elastic_floor(self, gang: str) -> int | None:
        """The pods a gang must keep running when it loses elastic members (its PodGroup's
        minMember); None when it may only be evicted whole (no PodGroup)."""
        if not gang.startswith("group:"):
            return None
        group = self.groups.get(gang[len("group:") :])
        return group.min_member if group is not None else None

    def gang_preemptible(self, gang: str) -> bool:
        return all(self.preemptible(p) for p in self.members[gang] if p.bound)

    @staticmethod
    def queue_amount(pod: Pod, resource: str, blocks: int | None = None) -> int:
        """What ``pod`` counts in its queue for ``resource`` (milli); ``blocks`` as bound."""
        if resource == GPU:
            held = blocks if blocks is not None else pod.gpu_blocks
            return pod.whole_gpus * MILLI + (held or 0) * MILLI_PER_BLOCK
        return pod.requests.get(resource, 0)

    # queues ----------------------------------------------------------------------------------

    def path(self, queue: str) -> list[str]:
        """``queue`` and its ancestors, bottom up."""
        out = [queue]
        seen = {queue}
        while (q := self.queues.get(out[-1])) is not None and q.parent is not None:
            if q.parent in seen:
                break
            out.append(q.parent)
            seen.add(q.parent)
        return out

    def subtree(self, queue: str) -> set[str]:
        out = {queue}
        todo = [queue]
        while todo:
            for child in self.children.get(todo.pop(), []):
                if child not in out:
                    out.add(child)
                    todo.append(child)
        return out

    def quota(self, queue: str, resource: str) -> int:
        q = self.queues.get(queue)
        if q is not None and resource in q.resources and q.resources[resource].quota is not None:
            value = q.resources[resource].quota
            assert value is not None
            return value
        return sum(self.quota(c, resource) for c in self.children.get(queue, []))

    def limit(self, queue: str, resource: str) -> int | None:
        q = self.queues.get(queue)
        if q is None or resource not in q.resources:
            return None
        return q.resources[resource].limit

    def lending_limit(self, queue: str, resource: str) -> int | None:
        q = self.queues.get(queue)
        if q is None or resource not in q.resources:
            return None
        return q.resources[resource].lending_limit

    def all_queue_names(self, leaf_usage: Mapping[str, object]) -> set[str]:
        names: set[str] = set(self.queues)
        for leaf in leaf_usage:
            names.update(self.path(leaf))
        return names


# ---------------------------------------------------------------------------------------------
# The state after the decisions


@dataclass(frozen=True)
class Held:
    pod: Pod
    node: str
    gpus: tuple[int, ...]
    blocks: int | None
    new: bool


def state_after(world: World, decisions: Decisions) -> dict[PodKey, Held]:
    """Bound pods after the decisions: the snapshot's bound pods, minus evictions, plus bindings."""
    held: dict[PodKey, Held] = {}
    for p in world.snapshot.pods:
        if p.bound and p.node_name is not None:
            held[p.key] = Held(p, p.node_name, p.gpu_index, p.gpu_blocks, False)
    for e in decisions.evictions:
        held.pop(e.pod, None)
    for b in decisions.bindings:
        pod = world.pods.get(b.pod)
        if pod is not None:
            held[b.pod] = Held(pod, b.node, b.gpus, b.gpu_blocks, True)
    return held


def state_before(world: World) -> dict[PodKey, Held]:
    return state_after(world, Decisions())


def queue_usage(world: World, held: Mapping[PodKey, Held]) -> dict[tuple[str, str], int]:
    """(queue, resource) -> usage, rolled up from leaves to every ancestor; pods of ours only."""
    usage: dict[tuple[str, str], int] = defaultdict(int)
    for h in held.values():
        if not h.pod.ours:
            continue
        leaf = world.queue_of(h.pod)
        for r in world.managed:
            amount = world.queue_amount(h.pod, r, h.blocks)
            if amount:
                for q in world.path(leaf):
                    usage[(q, r)] += amount
    return usage


def guaranteed(world: World, usage: Mapping[tuple[str, str], int], queue: str, resource: str) -> int:
    """Guaranteed usage: a leaf's usage; else the sum over children of min(guaranteed, quota)."""
    children = world.children.get(queue, [])
    if not children:
        return usage.get((queue, resource), 0)
    return sum(min(guaranteed(world, usage, c, resource), world.quota(c, resource)) for c in children)


# ---------------------------------------------------------------------------------------------
# Feasibility of a node for a pod


def _tolerated(node: Node, pod: Pod) -> bool:
    for taint in node.taints:
        if taint.effect == TaintEffect.PREFER_NO_SCHEDULE:
            continue
        ok = False
        for t in pod.tolerations:
            if t.effect is not None and t.effect != taint.effect:
                continue
            if t.key is None:
                ok = ok or t.operator == "Exists"
            elif t.key == taint.key:
                ok = ok or t.operator == "Exists" or t.value == taint.value
        if not ok:
            return False
    return True


def _requirement(req: SelectorRequirement, values: Mapping[str, str]) -> bool:
    present = req.key in values
    value = values.get(req.key, "")
    if req.operator == "In":
        return present and value in req.values
    if req.operator == "NotIn":
        return not present or value not in req.values
    if req.operator == "Exists":
        return present
    if req.operator == "DoesNotExist":
        return not present
    if req.operator in ("Gt", "Lt") and present and req.values:
        try:
            left, right = int(value), int(req.values[0])
        except ValueError:
            return False
        return left > right if req.operator == "Gt" else left < right
    return False


def infeasibility(node: Node, pod: Pod) -> str | None:
    """Why ``node`` is not feasible for ``pod`` by its labels, taints and cordon (None: it is)."""
    if node.unschedulable:
        return "node is unschedulable"
    if not _tolerated(node, pod):
        return f"taints {[(t.key, t.value, t.effect.value) for t in node.taints]} not tolerated"
    for k, v in pod.node_selector.items():
        if node.labels.get(k) != v:
            return f"nodeSelector {k}={v} does not match"
    if pod.affinity:
        fields = {"metadata.name": node.name}
        if not any(
            all(_requirement(r, node.labels) for r in term.expressions)
            and all(_requirement(r, fields) for r in term.fields)
            for term in pod.affinity
        ):
            return "required node affinity does not match"
    return None


# ---------------------------------------------------------------------------------------------
# Invariant 1: nodes


def check_nodes(snapshot: Snapshot, decisions: Decisions) -> list[Violation]:
    """No node over-committed by the decisions; every binding valid and feasible."""
    world = World(snapshot)
    out: list[Violation] = []

    def bad(message: str) -> None:
        out.append(Violation("node", message))

    for b in decisions.bindings:
        pod = world.pods.get(b.pod)
        node = world.nodes.get(b.node)
        if pod is None:
            bad(f"binding of unknown pod {b.pod}")
            continue
        if node is None:
            bad(f"{b.pod} bound to unknown node {b.node}")
            continue
        why = infeasibility(node, pod)
        if why is not None:
            bad(f"{b.pod} bound to infeasible node {b.node}: {why}")
        _check_binding_gpus(pod, node, b, bad)

    held = state_after(world, decisions)
    touched = {b.node for b in decisions.bindings}
    out.extend(overcommits(world, held, touched, new_only=True))
    return out


def overcommits(world: World, held: Mapping[PodKey, Held], nodes: Iterable[str], *, new_only: bool) -> list[Violation]:
    """Over-commitment of ``nodes`` in state ``held``; ``new_only``: look only at GPUs that a
    new binding touches (the snapshot's own state is not the decisions' fault)."""
    out: list[Violation] = []

    def bad(message: str) -> None:
        out.append(Violation("node", message))

    by_node: dict[str, list[Held]] = defaultdict(list)
    for h in held.values():
        by_node[h.node].append(h)
    for name in sorted(set(nodes)):
        node = world.nodes.get(name)
        if node is None:
            continue
        pods_here = by_node[name]
        resources = {r for h in pods_here for r in h.pod.requests} | set(node.allocatable)
        for r in sorted(resources - {PODS}):
            used = sum(h.pod.requests.get(r, 0) for h in pods_here)
            capacity = node.allocatable.get(r, 0)
            if used > capacity:
                bad(f"node {name} over-committed on {r}: {used} > {capacity}")
        if len(pods_here) * MILLI > node.allocatable.get(PODS, 0):
            bad(f"node {name} holds {len(pods_here)} pods > allocatable {node.allocatable.get(PODS, 0)}")
        whole: dict[int, list[PodKey]] = defaultdict(list)
        blocks: dict[int, list[tuple[PodKey, int]]] = defaultdict(list)
        checked: set[int] = set()
        for h in pods_here:
            if h.new or not new_only:
                checked.update(h.gpus)
            if h.pod.is_fractional:
                for g in h.gpus[:1]:
                    blocks[g].append((h.pod.key, h.blocks or 0))
            elif h.pod.whole_gpus:
                for g in h.gpus:
                    whole[g].append(h.pod.key)
        for g in sorted(checked):
            holders = sorted(whole.get(g, []))
            shares = sorted(blocks.get(g, []))
            if len(holders) > 1:
                bad(f"GPU {name}/{g} given whole to several pods: {holders}")
            if holders and shares:
                bad(f"GPU {name}/{g} held whole by {holders} and in blocks by {shares}")
            if sum(s for _, s in shares) > BLOCKS:
                bad(f"GPU {name}/{g} holds {sum(s for _, s in shares)} > {BLOCKS} blocks: {shares}")
    return out


def _check_binding_gpus(pod: Pod, node: Node, b: Binding, bad: Callable[[str], None]) -> None:
    gpus = b.gpus
    if len(set(gpus)) != len(gpus):
        bad(f"{b.pod} given repeated GPUs {gpus}")
    outside = [g for g in gpus if not 0 <= g < node.gpu_count]
    if outside:
        bad(f"{b.pod} given GPUs {outside} outside 0..{node.gpu_count - 1} of {node.name}")
    sick = sorted(set(gpus) & node.unhealthy_gpus)
    if sick:
        bad(f"{b.pod} given unhealthy GPUs {sick} of {node.name}")
    if pod.is_fractional:
        if len(gpus) != 1:
            bad(f"fractional {b.pod} given {len(gpus)} GPUs {gpus}, expected exactly one")
        if b.gpu_blocks is None or not 1 <= b.gpu_blocks <= BLOCKS:
            bad(f"fractional {b.pod} bound with gpuBlocks {b.gpu_blocks}")
        elif pod.gpu_blocks is not None and b.gpu_blocks != pod.gpu_blocks:
            bad(f"{b.pod} asks for {pod.gpu_blocks} blocks, bound with {b.gpu_blocks}")
    else:
        if len(gpus) != pod.whole_gpus:
            bad(f"{b.pod} asks for {pod.whole_gpus} GPUs, given {len(gpus)}: {gpus}")
        if b.gpu_blocks is not None:
            bad(f"whole-GPU {b.pod} bound with gpuBlocks {b.gpu_blocks}")


# ---------------------------------------------------------------------------------------------
# Invariant 2: limits


def check_limits(snapshot: Snapshot, decisions: Decisions) -> list[Violation]:
    """No queue ends above its limit, unless it already was (then its usage did not grow)."""
    world = World(snapshot)
    before = queue_usage(world, state_before(world))
    after = queue_usage(world, state_after(world, decisions))
    out: list[Violation] = []
    for q in sorted(world.queues):
        for r in sorted(world.managed):
            limit = world.limit(q, r)
            if limit is None:
                continue
            was, now = before.get((q, r), 0), after.get((q, r), 0)
            if now > max(limit, was):
                out.append(Violation("limit", f"queue {q} uses {now} of {r} > limit {limit} (was {was})"))
    return out


# ---------------------------------------------------------------------------------------------
# Invariant 3: lending, in a form that can be bounded without replaying


def lending_applicable(snapshot: Snapshot) -> bool:
    """The simple case: top-level queues only, every node schedulable, no pod of another scheduler."""
    return (
        all(q.parent is None for q in snapshot.queues)
        and not any(n.unschedulable for n in snapshot.nodes)
        and not any(p.bound and not p.ours for p in snapshot.pods)
    )


def check_lending(snapshot: Snapshot, decisions: Decisions) -> list[Violation]:
    """In a flat forest, a queue A whose usage the decisions leave unchanged reserves
    ``max(0, quota - usage - lendingLimit)`` all along; every admission of another queue leaves
    the free capacity at or above the sum of such reserves, and evictions only free capacity, so
    the total usage ends at most ``max(capacity - reserves, usage before)``."""
    if not lending_applicable(snapshot):
        return []
    world = World(snapshot)
    before_held = state_before(world)
    after_held = state_after(world, decisions)
    before = queue_usage(world, before_held)
    after = queue_usage(world, after_held)
    out: list[Violation] = []
    for r in sorted(world.managed):
        capacity = sum(n.allocatable.get(r, 0) for n in snapshot.nodes if not n.unschedulable)
        reserve = 0
        holders = []
        for q in sorted(world.queues):
            lending = world.lending_limit(q, r)
            if lending is None or before.get((q, r), 0) != after.get((q, r), 0):
                continue
            own = max(0, world.quota(q, r) - before.get((q, r), 0) - lending)
            if own:
                reserve += own
                holders.append(f"{q}:{own}")
        used_before = sum(world.queue_amount(h.pod, r, h.blocks) for h in before_held.values())
        used_after = sum(world.queue_amount(h.pod, r, h.blocks) for h in after_held.values())
        bound = max(capacity - reserve, used_before)
        if used_after > bound:
            out.append(
                Violation(
                    "lending",
                    f"{r}: {used_after} used after the decisions > {bound} "
                    f"(capacity {capacity} - reserved {holders}; used before {used_before})",
                )
            )
    return out


# ---------------------------------------------------------------------------------------------
# Invariant 4: gangs


def check_gangs(snapshot: Snapshot, decisions: Decisions) -> list[Violation]:
    """Each PodGroup binds 0 pods or enough to reach minMember; topology.required holds."""
    world = World(snapshot)
    out: list[Violation] = []
    bound_now: dict[str, list[Binding]] = defaultdict(list)
    for b in decisions.bindings:
        pod = world.pods.get(b.pod)
        if pod is not None:
            bound_now[world.gang_of(pod)].append(b)
    for key, group in sorted(world.groups.items()):
        gang = f"group:{key}"
        new = bound_now.get(gang, [])
        running = sum(1 for p in world.members[gang] if p.bound)
        if new and len(new) + running < group.min_member:
            out.append(
                Violation(
                    "gang",
                    f"gang {key} partly bound: {len(new)} new + {running} running "
                    f"< minMember {group.min_member}: {[b.pod for b in new]}",
                )
            )
        if group.topology_required is not None and new:
            level = group.topology_required
            domains = {b.pod: (world.nodes[b.node].labels.get(level) if b.node in world.nodes else None) for b in new}
            values = set(domains.values())
            if None in values or len(values) > 1:
                out.append(
                    Violation(
                        "topology",
                        f"gang {key} requires one {level} domain, bound across {sorted(domains.items())}",
                    )
                )
    return out


# ---------------------------------------------------------------------------------------------
# Invariants 5 and 6: evictions


def check_evictions(snapshot: Snapshot, decisions: Decisions) -> list[Violation]:
    """Every victim running, preemptible and eligible for its reason; whole gangs evicted, or (elastic
    members) a gang with a PodGroup left with at least minMember running pods;
    every ``by`` bound by the same decisions (or, when the decisions took its own admission back
    later in the pass to make room for another gang, pending with a reason that says so) and,
    when its gang binds in one admission (no pod beyond ``minMember``, which could scale up
    elastically in a later cycle), its first pod."""
    world = World(snapshot)
    out: list[Violation] = []

    def bad(invariant: str, message: str) -> None:
        out.append(Violation(invariant, message))

    bound = {b.pod: b for b in decisions.bindings}
    evicted = {e.pod for e in decisions.evictions}
    # Preemptors whose own admission was withdrawn later in the pass (docs/semantics-notes.md, Replay).
    taken_back = {p.pod for p in decisions.pending if "admitted in this pass, then taken back for" in p.reason}
    first_of_gang: dict[str, PodKey] = {}
    bound_in_gang: dict[str, int] = defaultdict(int)
    for b in decisions.bindings:
        pod = world.pods.get(b.pod)
        if pod is not None:
            gang = world.gang_of(pod)
            first_of_gang[gang] = min(first_of_gang.get(gang, b.pod), b.pod)
            bound_in_gang[gang] += 1
    for e in decisions.evictions:
        victim = world.pods.get(e.pod)
        if victim is None or not victim.bound:
            bad("eviction", f"evicted {e.pod} was not running in the snapshot")
            continue
        if not victim.ours:
            bad("eviction", f"evicted {e.pod} belongs to scheduler {victim.scheduler_name}")
            continue
        gang = world.gang_of(victim)
        if not world.preemptible(victim):
            bad("non-preemptible", f"non-preemptible {e.pod} evicted")
        elif not world.gang_preemptible(gang):
            bad("non-preemptible", f"{e.pod} evicted but its gang {gang} has non-preemptible pods")
        missing = sorted(p.key for p in world.members[gang] if p.bound and p.key not in evicted)
        # Elastic members (docs/semantics-notes.md, "Elastic members are preempted first"): a gang
        # with a PodGroup may lose pods one by one, as long as at least minMember keep running.
        floor = world.elastic_floor(gang)
        if missing and (floor is None or len(missing) < floor):
            bad("whole-gang", f"{e.pod} evicted but {missing} of its gang {gang} keep running"
                + ("" if floor is None else f", fewer than its minMember {floor}"))
        preemptor = world.pods.get(e.by)
        if e.by not in bound and (e.by not in taken_back or preemptor is None or preemptor.bound):
            bad("by", f"{e.pod} evicted by {e.by}, which these decisions do not bind")
            continue
        if preemptor is None:
            bad("by", f"{e.pod} evicted by unknown pod {e.by}")
            continue
        by_gang = world.gang_of(preemptor)
        group = world.group(preemptor)
        running = sum(1 for p in world.members[by_gang] if p.bound)
        one_admission = group is None or bound_in_gang[by_gang] + running <= group.min_member
        if e.by in bound and one_admission and first_of_gang.get(by_gang) != e.by:
            bad("by", f"{e.pod} evicted by {e.by}, not the first bound pod {first_of_gang.get(by_gang)}")
        q_victim, q_by = world.queue_of(victim), world.queue_of(preemptor)
        if e.reason == EvictionReason.RECLAIM:
            if q_victim == q_by:
                bad("reclaim", f"{e.pod} reclaimed by {e.by} of its own queue {q_by}")
            queue = world.queues.get(q_by)
            if queue is not None and not queue.reclaim_borrowed:
                bad("reclaim", f"{e.pod} reclaimed by {e.by} of queue {q_by} with reclaimBorrowed off")
        elif e.reason == EvictionReason.PREEMPT:
            if q_victim != q_by:
                bad("preempt", f"{e.pod} of queue {q_victim} preempted by {e.by} of queue {q_by}")
            pv, pb = world.gang_priority(gang), world.gang_priority(by_gang)
            if pv >= pb:
                bad("preempt", f"{e.pod} (priority {pv}) preempted by {e.by} (priority {pb}), not lower")
            queue = world.queues.get(q_by)
            if queue is not None and queue.within_queue == WithinQueue.NEVER:
                bad("preempt", f"{e.pod} preempted in queue {q_by} whose withinQueue is Never")
        else:
            bad("eviction", f"{e.pod} evicted with unknown reason {e.reason!r}")
    return out


# ---------------------------------------------------------------------------------------------
# Invariant 9: the report itself


def check_report(snapshot: Snapshot, decisions: Decisions) -> list[Violation]:
    """Every pending pod of ours exactly once in bindings or pending; nothing else there;
    each list sorted by pod key; no pod evicted twice."""
    world = World(snapshot)
    out: list[Violation] = []

    def bad(message: str) -> None:
        out.append(Violation("report", message))

    expected = {p.key for p in snapshot.pods if p.ours and not p.finished and p.node_name is None}
    listed = [b.pod for b in decisions.bindings] + [p.pod for p in decisions.pending]
    seen: dict[PodKey, int] = defaultdict(int)
    for key in listed:
        seen[key] += 1
    for key in sorted(expected):
        if seen.get(key, 0) != 1:
            bad(f"pending pod {key} listed {seen.get(key, 0)} times in bindings + pending")
    for key in sorted(set(seen) - expected):
        pod = world.pods.get(key)
        what = (
            "unknown"
            if pod is None
            else "not ours"
            if not pod.ours
            else "finished"
            if pod.finished
            else "already bound"
        )
        bad(f"{key} ({what}) listed in bindings or pending")
    for name, keys in (
        ("bindings", [b.pod for b in decisions.bindings]),
        ("evictions", [e.pod for e in decisions.evictions]),
        ("pending", [p.pod for p in decisions.pending]),
    ):
        if keys != sorted(keys):
            bad(f"{name} not sorted by pod key: {keys}")
        if len(set(keys)) != len(keys):
            bad(f"{name} lists a pod twice: {keys}")
    return out


# ---------------------------------------------------------------------------------------------
# Scenarios with exactly one pending gang


def pending_gangs(snapshot: Snapshot) -> dict[str, list[Pod]]:
    world = World(snapshot)
    out: dict[str, list[Pod]] = defaultdict(list)
    for p in snapshot.pods:
        if p.ours and not p.finished and p.node_name is None:
            out[world.gang_of(p)].append(p)
    return dict(out)


def gang_request(world: World, pods: Iterable[Pod], resource: str) -> int:
    return sum(world.queue_amount(p, resource) for p in pods)


def in_quota(world: World, usage: Mapping[tuple[str, str], int], queue: str, request: Mapping[str, int]) -> bool:
    """The spec's in-quota test of a gang of leaf ``queue`` asking ``request`` at ``usage``."""
    added: dict[tuple[str, str], int] = defaultdict(int, usage)
    for r, amount in request.items():
        if amount and r in world.managed:
            for q in world.path(queue):
                added[(q, r)] += amount
    return all(
        guaranteed(world, added, a, r) <= world.quota(a, r)
        for a in world.path(queue)
        for r, amount in request.items()
        if amount and r in world.managed
    )


def check_single_gang(snapshot: Snapshot, decisions: Decisions) -> list[Violation]:
    """With exactly one pending gang W, W's decision is taken on the snapshot itself:
    - W pending: nothing evicted;
    - W non-preemptible and bound: in quota after its evictions (guaranteed <= quota on its path);
    - W reclaimed: W was in quota, and each victim's queue path up to the common ancestor was
      above quota, and stays above quota until the last victim taken from it."""
    gangs = pending_gangs(snapshot)
    if len(gangs) != 1:
        return []
    world = World(snapshot)
    ((gang, w_pods),) = gangs.items()
    out: list[Violation] = []
    w_keys = {p.key for p in w_pods}
    bound = [b for b in decisions.bindings if b.pod in w_keys]
    if not bound:
        if decisions.evictions:
            victims = [e.pod for e in decisions.evictions]
            out.append(Violation("victims", f"{gang} stays pending but evicts {victims}"))
        return out
    queue = world.queue_of(w_pods[0])
    request = {r: gang_request(world, w_pods, r) for r in world.managed}
    requested = [r for r, amount in request.items() if amount]
    before = queue_usage(world, state_before(world))
    after = queue_usage(world, state_after(world, decisions))
    if not all(world.preemptible(p) for p in w_pods):
        for a in world.path(queue):
            for r in requested:
                g, quota = guaranteed(world, after, a, r), world.quota(a, r)
                if g > quota:
                    out.append(
                        Violation(
                            "non-preemptible",
                            f"non-preemptible {gang} bound out of quota: guaranteed {r} of {a} {g} > quota {quota}",
                        )
                    )
    reclaimed = [e for e in decisions.evictions if e.reason == EvictionReason.RECLAIM]
    if not reclaimed:
        return out
    without_w: dict[tuple[str, str], int] = defaultdict(int, after)
    for r in requested:
        for q in world.path(queue):
            without_w[(q, r)] -= request[r]
    if not in_quota(world, before, queue, request) and not in_quota(world, without_w, queue, request):
        out.append(Violation("reclaim", f"{gang} reclaims {[e.pod for e in reclaimed]} while borrowing"))
    q_path = set(world.path(queue))
    victim_gangs: dict[str, list[Pod]] = defaultdict(list)
    for e in decisions.evictions:
        victim = world.pods.get(e.pod)
        if victim is not None and world.queue_of(victim) != queue:
            victim_gangs[world.gang_of(victim)].append(victim)
    below: dict[str, list[dict[str, int]]] = defaultdict(list)  # queue A -> victim gangs below A
    for members in victim_gangs.values():
        leaf = world.queue_of(members[0])
        taken = {r: sum(world.queue_amount(p, r) for p in members) for r in requested}
        for a in world.path(leaf):
            if a in q_path:
                break
            below[a].append(taken)
    for a, amounts in sorted(below.items()):
        ok = False
        for r in requested:
            total = sum(x[r] for x in amounts)
            largest = max(x[r] for x in amounts)
            if before.get((a, r), 0) - (total - largest) > world.quota(a, r):
                ok = True
        if not ok:
            out.append(
                Violation(
                    "reclaim",
                    f"{gang} reclaims {len(amounts)} gang(s) below queue {a}, which is not above quota "
                    f"before its last victim (usage {[before.get((a, r), 0) for r in requested]}, "
                    f"quota {[world.quota(a, r) for r in requested]}, victims {amounts})",
                )
            )
    return out


def minimality_counterexamples(
    snapshot: Snapshot, decisions: Decisions, schedule: Callable[[Snapshot], Decisions]
) -> list[Violation]:
    """With exactly one pending gang W that evicted victim gangs V: for each v in V, W must stay
    pending on the snapshot without the gangs V - {v} and with nothing preemptible. Elastic victims
    (pods of a gang that keeps running) count one by one."""
    gangs = pending_gangs(snapshot)
    if len(gangs) != 1 or not decisions.evictions:
        return []
    world = World(snapshot)
    ((gang, w_pods),) = gangs.items()
    w_keys = {p.key for p in w_pods}
    victim_gangs: dict[str, set[PodKey]] = defaultdict(set)
    for e in decisions.evictions:
        victim = world.pods.get(e.pod)
        if victim is not None:
            victim_gangs[world.gang_of(victim)].add(e.pod)
    # The victims are gangs, or pods where a gang lost only some (elastic members): minimal per pod.
    units: dict[str, set[PodKey]] = {}
    for g, keys in victim_gangs.items():
        if all(p.key in keys for p in world.members[g] if p.bound):
            units[g] = keys
        else:
            units.update({k: {k} for k in keys})
    out: list[Violation] = []
    for kept in sorted(units):
        gone = {k for u, keys in units.items() if u != kept for k in keys}
        pods = tuple(
            replace(p, preemptible_label=False) if p.bound and p.ours else p for p in snapshot.pods if p.key not in gone
        )
        again = schedule(replace(snapshot, pods=pods))
        placed = sorted(b.pod for b in again.bindings if b.pod in w_keys)
        if placed:
            out.append(
                Violation(
                    "minimal",
                    f"{gang} evicted {sorted(victim_gangs)} but fits while {kept} keeps running "
                    f"(binds {placed} with {sorted(gone)} gone and nothing preemptible)",
                )
            )
    return out


def _same_domain(a: Node, b: Node, key: str) -> bool:
    return key in a.labels and key in b.labels and a.labels[key] == b.labels[key]


def check_inter_pod(snapshot: Snapshot, decisions: Decisions) -> list[Violation]:
    """No bound pod breaks a required inter-pod rule (docs/semantics-notes.md).

    Anti-affinity (both ways) on the final state: no pod carrying a required anti-affinity term
    shares a domain with another bound pod the term matches, where either of them was bound by the
    decisions. DoNotSchedule spread, when nothing was evicted (counts only grew, so the last pod
    bound into a domain bounds it): every domain that received a pod of constraint C holds at most
    ``min + maxSkew`` pods C counts, when every counted pod bound by the decisions carries C and C
    counts on all nodes with its key (nodeAffinityPolicy Ignore, no minDomains).
    """
    world = World(snapshot)
    held = state_after(world, decisions)
    nodes = {n.name: n for n in snapshot.nodes}
    out: list[Violation] = []
    bound = [h for h in held.values() if h.node in nodes]
    for a in bound:
        for term in a.pod.anti_affinity_terms:
            if term.weight:
                continue
            for b in bound:
                if b.pod.key == a.pod.key or not (a.new or b.new):
                    continue
                if not (term_namespaces_match(term, a.pod.namespace, b.pod.namespace)
                        and selector_matches(term.selector, b.pod.labels)):
                    continue
                if _same_domain(nodes[a.node], nodes[b.node], term.topology_key):
                    out.append(Violation("inter-pod", f"{b.pod.key} on {b.node} shares {term.topology_key} with "
                                                      f"{a.pod.key} on {a.node}, whose anti-affinity excludes it"))
    if decisions.evictions:
        return out
    for a in bound:
        if not a.new:
            continue
        for c in a.pod.spread_constraints:
            if not c.hard or c.node_affinity_policy != "Ignore" or c.min_domains is not None:
                continue
            counted = [h for h in bound if h.pod.namespace == a.pod.namespace and selector_matches(c.selector, h.pod.labels)]
            if any(h.new and c not in h.pod.spread_constraints for h in counted):
                continue
            domains = {n.labels[c.topology_key] for n in snapshot.nodes if c.topology_key in n.labels}
            counts = dict.fromkeys(domains, 0)
            for h in counted:
                value = nodes[h.node].labels.get(c.topology_key)
                if value is not None:
                    counts[value] += 1
            mine = nodes[a.node].labels.get(c.topology_key)
            if mine is None:
                out.append(Violation("inter-pod", f"{a.pod.key} on {a.node}, which has no {c.topology_key}"))
            elif counts[mine] - min(counts.values()) > c.max_skew:
                out.append(Violation("inter-pod", f"{a.pod.key}: {c.topology_key}={mine} holds {counts[mine]}, "
                                                  f"least {min(counts.values())}, maxSkew {c.max_skew}"))
    return out


# ---------------------------------------------------------------------------------------------
# Volumes (docs/semantics-notes.md, "Volumes")


def _pv_allows(pv: PersistentVolume, node: Node) -> bool:
    """The PV's node affinity (any term) and zone labels (values split at "__") admit ``node``."""
    fields = {"metadata.name": node.name}
    if pv.node_affinity and not any(
        all(_requirement(r, node.labels) for r in t.expressions) and all(_requirement(r, fields) for r in t.fields)
        for t in pv.node_affinity
    ):
        return False
    return all(label not in pv.labels or node.labels.get(label) in pv.labels[label].split("__")
               for label in VOLUME_ZONE_LABELS)


def _claim_class(snapshot: Snapshot, claim: VolumeClaim) -> StorageClass | None:
    name = claim.storage_class
    if name is None:
        defaults = sorted((c for c in snapshot.storage_classes if c.is_default), key=lambda c: (-c.creation_time, c.name))
        name = defaults[0].name if defaults else ""
    return next((c for c in snapshot.storage_classes if c.name == name), None) if name else None


def check_volumes(snapshot: Snapshot, decisions: Decisions) -> list[Violation]:
    """Every new binding's claims exist and are usable; no node outside a bound PV's affinity; each
    chosen PV matches its claim and node and serves one claim; a ReadWriteOncePod claim has at
    most one user after the decisions whenever a new binding uses it."""
    world = World(snapshot)
    out: list[Violation] = []
    claims = {c.key: c for c in snapshot.claims}
    pvs = {v.name: v for v in snapshot.volumes}
    taken = {c.volume_name for c in snapshot.claims if c.volume_name}
    held = state_after(world, decisions)
    served: dict[str, str] = {}  # PV -> claim key it was chosen for
    for b in decisions.bindings:
        pod = world.pods[b.pod]
        node = world.nodes[b.node]
        listed = {v.claim: v for v in b.volumes}
        if len(listed) != len(b.volumes) or [v.claim for v in b.volumes] != sorted(listed):
            out.append(Violation("volumes", f"{b.pod}: volumes not sorted or repeated: {b.volumes}"))
        for name in pod.claims:
            key = f"{pod.namespace}/{name}"
            claim = claims.get(key)
            if claim is None or claim.deleting:
                out.append(Violation("volumes", f"{b.pod} bound although claim {key} is missing or being deleted"))
                continue
            if claim.volume_name:
                pv = pvs.get(claim.volume_name)
                if pv is None or not _pv_allows(pv, node):
                    out.append(Violation("volumes", f"{b.pod} on {b.node}, outside bound PV {claim.volume_name}"))
                continue
            storage_class = _claim_class(snapshot, claim)
            choice = listed.get(name)
            if storage_class is None or not storage_class.wait_for_first_consumer or choice is None:
                out.append(Violation("volumes", f"{b.pod} bound with unbound claim {key} and no volume for it"))
                continue
            if claim.selected_node is not None and claim.selected_node != b.node:
                out.append(Violation("volumes", f"{b.pod} on {b.node}, claim {key} selected {claim.selected_node}"))
            if choice.volume is None:
                if claim.selected_node is None and (
                    storage_class.provisioner in ("", NO_PROVISIONER) or (
                        storage_class.allowed_topologies and not any(
                            all(_requirement(r, node.labels) for r in t.expressions)
                            for t in storage_class.allowed_topologies))):
                    out.append(Violation("volumes", f"{b.pod}: claim {key} provisioned where its class cannot"))
                continue
            pv = pvs.get(choice.volume)
            if pv is None:
                out.append(Violation("volumes", f"{b.pod}: claim {key} given unknown PV {choice.volume}"))
                continue
            free = (pv.claim is None and pv.phase == "Available" and pv.name not in taken) or pv.claim == key
            if not (free and pv.storage_class == storage_class.name and pv.capacity_bytes >= claim.request_bytes
                    and set(claim.access_modes) <= set(pv.access_modes) and pv.volume_mode == claim.volume_mode
                    and (claim.selector is None or selector_matches(claim.selector, pv.labels))
                    and _pv_allows(pv, node)):
                out.append(Violation("volumes", f"{b.pod} on {b.node}: PV {pv.name} does not serve claim {key}"))
            if served.setdefault(pv.name, key) != key:
                out.append(Violation("volumes", f"PV {pv.name} chosen for {served[pv.name]} and {key}"))
    users: dict[str, list[str]] = defaultdict(list)
    for h in held.values():
        for name in h.pod.claims:
            users[f"{h.pod.namespace}/{name}"].append(h.pod.key)
    new_users = {f"{world.pods[b.pod].namespace}/{n}" for b in decisions.bindings for n in world.pods[b.pod].claims}
    for key in new_users:
        claim = claims.get(key)
        if claim is not None and "ReadWriteOncePod" in claim.access_modes and len(users[key]) > 1:
            out.append(Violation("volumes", f"ReadWriteOncePod claim {key} used by {sorted(users[key])}"))
    return out


ALL_CHECKS: tuple[Callable[[Snapshot, Decisions], list[Violation]], ...] = (
    check_nodes,
    check_limits,
    check_lending,
    check_gangs,
    check_evictions,
    check_report,
    check_single_gang,
    check_inter_pod,
    check_volumes,
)


def check_all(snapshot: Snapshot, decisions: Decisions) -> list[Violation]:
    out: list[Violation] = []
    for check in ALL_CHECKS:
        out.extend(check(snapshot, decisions))
    return out
