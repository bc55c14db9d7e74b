"""The Project rules every pending pod of gpufleet's is held to (docs/semantics-notes.md,
"Projects"), as pure functions returning the reason a pod breaks one, or None.

The admission webhook refuses a pod with the same words the engine keeps it pending with, so a
pod that slipped past admission (webhook down, created before installation) is held by the same
rule in the scheduler."""

from __future__ import annotations

from gpufleet.domain import Project, QueueName
from gpufleet.policy.projects import ProjectIndex

__all__ = [
    "namespace_problem",
    "non_preemptible_problem",
    "pool_names",
    "priority_problem",
    "queue_for",
    "queue_problem",
]


def _listed(values: tuple[str, ...]) -> str:
    return ", ".join(values) if values else "none"


def namespace_problem(index: ProjectIndex, namespace: str, require_project: bool) -> str | None:
    """A namespace claimed by several Projects, or (``require_project``) by none."""
    claimants = index.claimants(namespace)
    if claimants:
        return f"namespace {namespace} is claimed by projects {', '.join(claimants)}"
    if require_project and index.project_of(namespace) is None:
        return f"namespace {namespace} belongs to no Project"
    return None


def queue_for(project: Project | None, default_queue: QueueName) -> QueueName:
    """The queue of a pod that names none: its Project's ``defaultQueue``, else the config's."""
    if project is not None and project.default_queue is not None:
        return project.default_queue
    return default_queue


def queue_problem(index: ProjectIndex, project: Project | None, namespace: str, queue: QueueName,
                  grant: QueueName | None) -> str | None:
    """Whether a pod of ``namespace`` may go to ``queue``: open queues (no Project lists them)
    take anyone; an owned queue takes its Projects' pods and pods granted it by RBAC."""
    owners = index.owners.get(queue)
    if owners is None or grant == queue:
        return None
    if project is not None:
        if queue in project.queues:
            return None
        return f"project {project.name} does not allow queue {queue} (allowed: {_listed(project.queues)})"
    return f"queue {queue} belongs to project {', '.join(owners)}, not to namespace {namespace}'s"


def priority_problem(project: Project | None, priority_class: str | None) -> str | None:
    """A PriorityClass the Project does not list (a pod naming none passes)."""
    if project is None or project.priority_classes is None or priority_class is None:
        return None
    if priority_class in project.priority_classes:
        return None
    return (f"project {project.name} does not allow priority class {priority_class} "
            f"(allowed: {_listed(project.priority_classes)})")


def non_preemptible_problem(project: Project | None, preemptible: bool) -> str | None:
    """Non-preemptible work in a Project that does not allow it."""
    if project is None or preemptible or project.allow_non_preemptible:
        return None
    return f"project {project.name} does not allow non-preemptible work"


def pool_names(project: Project) -> str:
    """The Project's node pools as a reason names them."""
    return ", ".join(pool.name for pool in project.node_pools)
