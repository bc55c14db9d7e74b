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
)
from gpufleet.policy.images import ImageRef, glob_matches, normalize_image, pattern_problem
from gpufleet.policy.projects import ProjectIndex
from gpufleet.policy.rules import (
    namespace_problem,
    non_preemptible_problem,
    pool_names,
    priority_problem,
    queue_for,
    queue_problem,
)

__all__ = [
    "AccessReviewer",
    "Admission",
    "AdmissionContext",
    "Denial",
    "ImageRef",
    "ProjectIndex",
    "admit_pod",
    "admit_pod_group",
    "glob_matches",
    "namespace_problem",
    "non_preemptible_problem",
    "normalize_image",
    "pattern_problem",
    "pool_names",
    "priority_problem",
    "queue_for",
    "queue_problem",
]
