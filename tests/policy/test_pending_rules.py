"""The helpers the engine applies the Project rules with (docs/semantics-notes.md, "Projects")."""

from __future__ import annotations

from gpufleet.domain import LabelSelector, NodePool, Pod, PodGroup, Project, QueueName, SelectorRequirement
from gpufleet.policy import (
    ProjectIndex,
    gpu_cap_problem,
    in_node_pools,
    no_pool_node_reason,
    outside_pools_reason,
    pending_gangs_problem,
    pending_problem,
    priority_class_of,
    user_of,
)

Q = QueueName
A100 = NodePool("a100", LabelSelector((("pool", "a100"),)))
H100 = NodePool("h100", LabelSelector((), (SelectorRequirement("pool", "In", ("h100", "h200")),)))


def test_pending_problem_checks_membership_then_queue_priority_and_preemptibility_in_order() -> None:
    vision = Project(name="v", namespace_names=("vision",), queues=(Q("vt"),), priority_classes=("batch",))
    index = ProjectIndex.build([vision, Project(name="x", namespace_names=("shared",), queues=(Q("vt2"),)),
                                Project(name="y", namespace_names=("shared",))], {})
    pod = Pod(namespace="vision", name="p", priority_class_name="critical")
    assert pending_problem(index, Pod(namespace="shared", name="p"), Q("vt"), None, True, False) == (
        "namespace shared is claimed by projects x, y")
    assert pending_problem(index, Pod(namespace="loose", name="p"), Q("open"), None, True, True) == (
        "namespace loose belongs to no Project")
    assert pending_problem(index, Pod(namespace="loose", name="p"), Q("open"), None, False, False) is None
    assert pending_problem(index, pod, Q("nlp"), None, False, False) == (  # an open queue passes: then the class
        "project v does not allow priority class critical (allowed: batch)")
    assert pending_problem(index, pod, Q("vt2"), None, False, False) == "project v does not allow queue vt2 (allowed: vt)"
    assert pending_problem(index, pod, Q("vt"), None, False, False) == (
        "project v does not allow priority class critical (allowed: batch)")
    group = PodGroup("vision", "g", priority_class_name="batch")
    assert priority_class_of(pod, group) == "batch" and priority_class_of(pod, None) == "critical"
    assert pending_problem(index, pod, Q("vt"), group, False, False) == "project v does not allow non-preemptible work"
    assert pending_problem(index, pod, Q("vt"), group, True, False) is None


def test_node_pools() -> None:
    project = Project(name="ml", node_pools=(A100, H100))
    assert in_node_pools(project, {"pool": "h200"}) and in_node_pools(project, {"pool": "a100"})
    assert not in_node_pools(project, {"pool": "b200"}) and not in_node_pools(project, {})
    assert in_node_pools(Project(name="any"), {}) and in_node_pools(None, {})
    assert outside_pools_reason(project, 3) == "3 outside project ml's node pools (a100, h100)"
    assert no_pool_node_reason(project) == "project ml may only use node pools a100, h100"
    assert no_pool_node_reason(Project(name="ml", node_pools=(A100,))) == "project ml may only use node pool a100"


def test_per_user_caps() -> None:
    project = Project(name="ml", max_gpus_per_user=16, max_pending_gangs_per_user=10)
    assert gpu_cap_problem(project, "alice", 14_000, 2_000) is None
    assert gpu_cap_problem(project, "alice", 16_000, 2_000) == (
        "user alice would hold 18 GPUs in project ml, over its maxGPUsPerUser 16")
    assert gpu_cap_problem(project, "alice", 16_000, 500) == (
        "user alice would hold 16.5 GPUs in project ml, over its maxGPUsPerUser 16")
    assert gpu_cap_problem(Project(name="free"), "alice", 10**9, 1) is None
    assert pending_gangs_problem(project, "alice", 10) is None
    assert pending_gangs_problem(project, "alice", 12) == (
        "user alice has 12 pending gangs in project ml, over its maxPendingGangsPerUser 10")
    assert user_of(Pod(namespace="a", name="b", submitted_by="alice")) == "alice"
    assert user_of(Pod(namespace="a", name="b")) == "unverified"
