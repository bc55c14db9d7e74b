"""Tenancy policy: pure rules of who may use which queue, priority and nodes (docs/semantics-notes.md,
"Projects"). Below the engine and beside nothing else: the webhook (admission) and the engine
(scheduling) call the same rules, so that a pod refused at admission is also held by the scheduler."""

from gpufleet.policy.admission import (
    AccessReviewer,
    Admission,
    AdmissionContext,
    Denial,
    admit_pod,
    admit_pod_group,
    admit_workload,
)
from gpufleet.policy.idle import IdleAction, IdleStep, IdleWatch, idle_actions, idle_policy_for
from gpufleet.policy.images import ImageRef, glob_matches, normalize_image, pattern_problem
from gpufleet.policy.projects import ProjectIndex
from gpufleet.policy.rbac import PolicyRule, RbacAuthorizer, Role, RoleBinding, Subject
from gpufleet.policy.rules import (
    gpu_cap_problem,
    in_node_pools,
    namespace_problem,
    no_pool_node_reason,
    non_preemptible_problem,
    outside_pools_reason,
    pending_gangs_problem,
    pending_problem,
    pool_names,
    priority_class_of,
    priority_problem,
    queue_for,
    queue_problem,
    user_of,
)

__all__ = [
    "AccessReviewer",
    "Admission",
    "AdmissionContext",
    "Denial",
    "IdleAction",
    "IdleStep",
    "IdleWatch",
    "ImageRef",
    "PolicyRule",
    "ProjectIndex",
    "RbacAuthorizer",
    "Role",
    "RoleBinding",
    "Subject",
    "admit_pod",
    "admit_pod_group",
    "admit_workload",
    "glob_matches",
    "gpu_cap_problem",
    "idle_actions",
    "idle_policy_for",
    "in_node_pools",
    "namespace_problem",
    "no_pool_node_reason",
    "non_preemptible_problem",
    "normalize_image",
    "outside_pools_reason",
    "pattern_problem",
    "pending_gangs_problem",
    "pending_problem",
    "pool_names",
    "priority_class_of",
    "priority_problem",
    "queue_for",
    "queue_problem",
    "user_of",
]
