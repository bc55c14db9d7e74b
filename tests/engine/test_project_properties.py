"""Property tests of the Project rules (docs/semantics-notes.md, "Projects (tenancy)") on random
clusters with random Projects, node pools, users and grants.

Whatever the engine decides, including through preemption and gangs: no pod is bound outside its
Project's node pools; no user who gains a binding ends over their Project's ``maxGPUsPerUser``;
no pod is bound to a queue its namespace may not use, with a PriorityClass or non-preemptible
work its Project does not allow, or while its namespace is claimed twice (or, with
``requireProject``, by none). The checks below are plain Python over the snapshot and the
decisions; the only rule they borrow is ``selector_matches``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.domain import (
    MILLI,
    MILLI_PER_BLOCK,
    Decisions,
    LabelSelector,
    NodePool,
    Pod,
    Project,
    QueueName,
    SchedulerConfig,
    SelectorRequirement,
    Snapshot,
)
from gpufleet.domain.selectors import NAMESPACE_NAME_LABEL, selector_matches
from gpufleet.domain.units import blocks_for_gpu_memory
from gpufleet.engine import StaticFeasibility, schedule
from gpufleet.policy import in_node_pools

from .strategies import (
    GPU_TYPE,
    HOST,
    PRIORITY_CLASSES,
    RACK,
    Draw,
    gang_snapshots,
    leaves,
    single_gang_snapshots,
    snapshots,
)

NAMESPACES = ("ml", "cv", "nlp")
USERS = (None, "alice", "bob")
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _chance(draw: Draw, tenths: int) -> bool:
    return bool(draw(st.integers(0, 9)) >= 10 - tenths)


@st.composite
def pools(draw: Draw, snapshot: Snapshot) -> tuple[NodePool, ...]:
    """One or two pools over the labels the nodes carry (a value no node has, now and then)."""
    out: list[NodePool] = []
    for i in range(draw(st.integers(1, 2))):
        key = draw(st.sampled_from([GPU_TYPE, RACK, HOST]))
        values = sorted({n.labels[key] for n in snapshot.nodes if key in n.labels} | {"none"})
        if _chance(draw, 5):
            selector = LabelSelector(((key, draw(st.sampled_from(values))),))
        else:
            chosen = tuple(draw(st.lists(st.sampled_from(values), min_size=1, max_size=2, unique=True)))
            selector = LabelSelector((), (SelectorRequirement(key, draw(st.sampled_from(["In", "NotIn"])), chosen),))
        out.append(NodePool(f"pool-{i}", selector))
    return tuple(out)


@st.composite
def project_snapshots(draw: Draw) -> Snapshot:
    base = draw(st.one_of(snapshots(max_nodes=8, max_running=6, max_pending=6), single_gang_snapshots(),
                          gang_snapshots()))
    queue_leaves = leaves(base.queues)
    # Each gang (its PodGroup, or a lone pod) lives in one of three namespaces.
    gang_ids = sorted({p.group_label or p.name for p in base.pods})
    where = dict(zip(gang_ids, draw(st.lists(st.sampled_from(NAMESPACES), min_size=len(gang_ids),
                                             max_size=len(gang_ids))), strict=True))
    pods: list[Pod] = []
    for p in base.pods:
        grant = draw(st.sampled_from(queue_leaves)) if _chance(draw, 1) else None
        pods.append(replace(p, namespace=where[p.group_label or p.name], submitted_by=draw(st.sampled_from(USERS)),
                            queue_grant=grant))
    groups = tuple(replace(g, namespace=where[g.name]) for g in base.pod_groups)
    projects: list[Project] = []
    for ns in NAMESPACES:
        if _chance(draw, 2):
            continue
        queues = tuple(queue_leaves) if _chance(draw, 5) else tuple(
            draw(st.lists(st.sampled_from(queue_leaves), max_size=3, unique=True)))
        projects.append(Project(
            name=f"p-{ns}",
            namespace_names=(ns,),
            queues=queues,
            default_queue=draw(st.sampled_from(queues)) if queues and _chance(draw, 4) else None,
            node_pools=draw(pools(base)) if _chance(draw, 6) else (),
            priority_classes=tuple(draw(st.lists(st.sampled_from([c.name for c in PRIORITY_CLASSES]), unique=True)))
            if _chance(draw, 3) else None,
            allow_non_preemptible=_chance(draw, 5),
            max_gpus_per_user=draw(st.integers(1, 6)) if _chance(draw, 5) else None,
            max_pending_gangs_per_user=draw(st.integers(0, 2)) if _chance(draw, 3) else None,
        ))
    if projects and _chance(draw, 1):  # a second claim on a namespace, by its name label
        ns = draw(st.sampled_from(NAMESPACES))
        projects.append(Project(name="claimer", namespace_selector=LabelSelector(
            (), (SelectorRequirement(NAMESPACE_NAME_LABEL, "In", (ns,)),))))
    config = replace(base.config, require_project=_chance(draw, 1))
    return replace(base, pods=tuple(pods), pod_groups=groups, projects=tuple(projects), config=config)


class Rules:
    """The Project rules, recomputed with plain Python for the checks."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.claims: dict[str, list[Project]] = defaultdict(list)
        for project in snapshot.projects:
            for ns in NAMESPACES:
                named = ns in project.namespace_names
                selected = selector_matches(project.namespace_selector, {NAMESPACE_NAME_LABEL: ns})
                if named or selected:
                    self.claims[ns].append(project)
        self.owned = {q for p in snapshot.projects for q in p.queues}
        self.groups = {g.key: g for g in snapshot.pod_groups}
        self.classes = {c.name: c.value for c in snapshot.priority_classes}

    def project(self, ns: str) -> Project | None:
        claims = self.claims.get(ns, [])
        return claims[0] if len(claims) == 1 else None

    def queue(self, pod: Pod) -> QueueName:
        group = self.groups.get(f"{pod.namespace}/{pod.group_label}") if pod.group_label else None
        if pod.queue_label:
            return pod.queue_label
        if group is not None and group.queue:
            return group.queue
        project = self.project(pod.namespace)
        if project is not None and project.default_queue is not None:
            return project.default_queue
        return self.snapshot.config.default_queue

    def preemptible(self, pod: Pod) -> bool:
        if pod.preemptible_label is not None:
            return pod.preemptible_label
        group = self.groups.get(f"{pod.namespace}/{pod.group_label}") if pod.group_label else None
        if group is not None and group.priority_class_name in self.classes:
            priority = self.classes[group.priority_class_name]
        elif pod.priority_class_name in self.classes:
            priority = self.classes[pod.priority_class_name]
        else:
            priority = pod.priority or 0
        return priority < self.snapshot.config.non_preemptible_priority

    def broken(self, pod: Pod, gang_preemptible: bool) -> str | None:
        ns = pod.namespace
        if len(self.claims.get(ns, [])) > 1:
            return "claimed twice"
        project = self.project(ns)
        if project is None:
            if self.snapshot.config.require_project:
                return "in no Project"
            return "owned queue" if self.queue(pod) in self.owned and pod.queue_grant != self.queue(pod) else None
        queue = self.queue(pod)
        if queue in self.owned and queue not in project.queues and pod.queue_grant != queue:
            return f"queue {queue}"
        group = self.groups.get(f"{pod.namespace}/{pod.group_label}") if pod.group_label else None
        klass = group.priority_class_name if group is not None and group.priority_class_name else pod.priority_class_name
        if project.priority_classes is not None and klass is not None and klass not in project.priority_classes:
            return f"priority class {klass}"
        if not gang_preemptible and not project.allow_non_preemptible:
            return "non-preemptible"
        return None


def _gang(pod: Pod) -> str:
    return f"{pod.namespace}/{pod.group_label}" if pod.group_label else pod.key


def check(snapshot: Snapshot, decisions: Decisions) -> list[str]:
    rules = Rules(snapshot)
    pods = {p.key: p for p in snapshot.pods}
    nodes = {n.name: n for n in snapshot.nodes}
    problems: list[str] = []
    members: dict[str, list[Pod]] = defaultdict(list)
    for p in snapshot.pods:
        if p.ours and not p.finished:
            members[_gang(p)].append(p)
    for b in decisions.bindings:
        pod = pods[b.pod]
        project = rules.project(pod.namespace)
        labels = nodes[b.node].labels
        if project is not None and project.node_pools and not any(
                selector_matches(pool.selector, labels) for pool in project.node_pools):
            problems.append(f"{b.pod} bound to {b.node}, outside project {project.name}'s pools")
        why = rules.broken(pod, all(rules.preemptible(m) for m in members[_gang(pod)]))
        if why is not None:
            problems.append(f"{b.pod} bound though it breaks a rule: {why}")
    # GPUs per (project, user) after the decisions, for users who gained a binding.
    evicted = {e.pod for e in decisions.evictions}
    bound = {b.pod: b for b in decisions.bindings}
    held: dict[tuple[str, str], int] = defaultdict(int)
    gained: set[tuple[str, str]] = set()
    for p in snapshot.pods:
        if not p.ours or p.finished:
            continue
        project = rules.project(p.namespace)
        if project is None or project.max_gpus_per_user is None:
            continue
        key = (project.name, p.submitted_by or "unverified")
        if p.key in bound:
            gained.add(key)
            blocks = bound[p.key].gpu_blocks
        elif p.node_name is not None and p.key not in evicted:
            blocks = p.gpu_blocks
            if blocks is None and p.gpu_memory_bytes is not None:
                blocks = blocks_for_gpu_memory(p.gpu_memory_bytes, nodes[p.node_name].gpu_memory_mib or 0) or 1
        else:
            continue
        held[key] += p.whole_gpus * MILLI + (blocks or 0) * MILLI_PER_BLOCK
    caps = {p.name: p.max_gpus_per_user for p in snapshot.projects}
    for key in gained:
        cap = caps[key[0]]
        assert cap is not None
        if held[key] > cap * MILLI:
            problems.append(f"user {key[1]} holds {held[key]} milli-GPU in project {key[0]}, over its cap {cap}")
    return problems


@SETTINGS
@given(project_snapshots())
def test_projects_rules_hold_on_random_clusters(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    assert check(snapshot, decisions) == []


@SETTINGS
@given(project_snapshots())
def test_a_snapshot_without_projects_is_decided_as_before(snapshot: Snapshot) -> None:
    """Projects that govern no namespace of the snapshot change nothing."""
    bare = replace(snapshot, projects=(), config=replace(snapshot.config, require_project=False))
    elsewhere = replace(bare, projects=(Project(name="far", namespace_names=("elsewhere",)),))
    assert schedule(elsewhere) == schedule(bare)


@SETTINGS
@given(project_snapshots(), st.data())
def test_the_pool_mask_is_the_scalar_rule(snapshot: Snapshot, data: st.DataObject) -> None:
    project = Project(name="p", node_pools=data.draw(pools(snapshot)))
    feasibility = StaticFeasibility(snapshot.nodes, np.ones(len(snapshot.nodes), dtype=np.bool_))
    assert feasibility.pool_mask(project).tolist() == [in_node_pools(project, n.labels) for n in snapshot.nodes]


def test_the_checker_sees_a_pod_outside_its_pools() -> None:
    """The checker is not vacuous: a binding outside the pools, and one over a cap, are reported."""
    from gpufleet.domain import GPU, Binding, Node, NodeName, PodKey

    n1 = Node(NodeName("n1"), labels={"pool": "b"}, allocatable={GPU: 8 * MILLI})
    project = Project(name="p", namespace_names=("ml",), node_pools=(NodePool("a", LabelSelector((("pool", "a"),))),),
                      max_gpus_per_user=1)
    pod = Pod(namespace="ml", name="x", requests={GPU: 2 * MILLI})
    snapshot = Snapshot(nodes=(n1,), pods=(pod,), projects=(project,), config=SchedulerConfig())
    assert check(snapshot, Decisions(bindings=(Binding(PodKey("ml/x"), NodeName("n1"), (0, 1)),))) == [
        "ml/x bound to n1, outside project p's pools",
        "user unverified holds 2000 milli-GPU in project p, over its cap 1",
    ]
