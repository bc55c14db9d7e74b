"""Tenancy policy: pure rules of who may use which queue, priority and nodes (docs/semantics-notes.md,
"Projects"). Below the engine and beside nothing else: the webhook (admission) and the engine
(scheduling) call the same rules, so that a pod refused at admission is also held by the scheduler."""

from gpufleet.policy.projects import ProjectIndex
from gpufleet.policy.rbac import PolicyRule, QueueAccess, RbacAuthorizer, Role, RoleBinding, Subject
from gpufleet.policy.rules import (
    namespace_problem,
    non_preemptible_problem,
    pool_names,
    priority_problem,
    queue_for,
    queue_problem,
)

__all__ = [
    "PolicyRule",
    "ProjectIndex",
    "QueueAccess",
    "RbacAuthorizer",
    "Role",
    "RoleBinding",
    "Subject",
    "namespace_problem",
    "non_preemptible_problem",
    "pool_names",
    "priority_problem",
    "queue_for",
    "queue_problem",
]
