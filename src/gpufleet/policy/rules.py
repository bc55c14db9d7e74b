"""The Project rules every pending pod of gpufleet's is held to (docs/semantics-notes.md,
"Projects"), as pure functions returning the reason a pod breaks one, or None.

The admission webhook refuses a pod with the same words the engine keeps it pending with, so a
pod that slipped past admission (webhook down, created before installation) is held by the same
rule in the scheduler."""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.domain import MILLI, Pod, PodGroup, Project, QueueName
from gpufleet.domain.selectors import selector_matches
from gpufleet.domain.wire import UNVERIFIED_USER
from gpufleet.policy.projects import ProjectIndex

__all__ = [
    "gpu_cap_problem",
    "in_node_pools",
    "namespace_problem",
    "no_pool_node_reason",
    "non_preemptible_problem",
    "outside_pools_reason",
    "pending_gangs_problem",
    "pending_problem",
    "pool_names",
    "priority_class_of",
    "priority_problem",
    "queue_for",
    "queue_problem",
    "user_of",
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


def _pools(project: Project) -> str:
    return ("node pool " if len(project.node_pools) == 1 else "node pools ") + pool_names(project)


def in_node_pools(project: Project | None, labels: Mapping[str, str]) -> bool:
    """Whether a node with ``labels`` is one the Project's pods may use (rule 4): it matches at
    least one pool's selector, or the Project has no pools. The engine's vector form of this rule
    (``StaticFeasibility``) is tested against it."""
    if project is None or not project.node_pools:
        return True
    return any(selector_matches(pool.selector, labels) for pool in project.node_pools)


def outside_pools_reason(project: Project, count: int) -> str:
    """The cause a pending reason gives for the ``count`` nodes outside the Project's pools."""
    return f"{count} outside project {project.name}'s node pools ({pool_names(project)})"


def no_pool_node_reason(project: Project) -> str:
    """The pending reason when no node of the cluster is in the Project's pools."""
    return f"project {project.name} may only use {_pools(project)}"


def priority_class_of(pod: Pod, group: PodGroup | None) -> str | None:
    """The PriorityClass rule 2 judges: the one the pod's PodGroup names, else the pod's."""
    if group is not None and group.priority_class_name:
        return group.priority_class_name
    return pod.priority_class_name


def pending_problem(index: ProjectIndex, pod: Pod, queue: QueueName, group: PodGroup | None,
                    preemptible: bool, require_project: bool) -> str | None:
    """The first rule a pending pod of ours breaks (membership, then rules 1 to 3), or None.
    ``queue``: the queue it goes to; ``preemptible``: whether its gang is."""
    namespace = pod.namespace
    problem = namespace_problem(index, namespace, require_project)
    if problem is not None:
        return problem
    project = index.project_of(namespace)
    return (queue_problem(index, project, namespace, queue, pod.queue_grant)
            or priority_problem(project, priority_class_of(pod, group))
            or non_preemptible_problem(project, preemptible))


def user_of(pod: Pod) -> str:
    """A pod's user for the per-user caps: its submitted-by annotation, else ``unverified``."""
    return pod.submitted_by or UNVERIFIED_USER


def _gpus(milli: int) -> str:
    return f"{milli / MILLI:g} GPU" + ("" if milli == MILLI else "s")


def gpu_cap_problem(project: Project, user: str, held_milli: int, asked_milli: int) -> str | None:
    """Rule 5, maxGPUsPerUser: ``user`` holds ``held_milli`` milli-GPU in the Project (whole GPUs,
    and blocks/100) and a gang of theirs asks for ``asked_milli`` more."""
    cap = project.max_gpus_per_user
    total = held_milli + asked_milli
    if cap is None or total <= cap * MILLI:
        return None
    return f"user {user} would hold {_gpus(total)} in project {project.name}, over its maxGPUsPerUser {cap}"


def pending_gangs_problem(project: Project, user: str, count: int) -> str | None:
    """Rule 5, maxPendingGangsPerUser: ``user`` has ``count`` pending gangs in the Project."""
    cap = project.max_pending_gangs_per_user
    if cap is None or count <= cap:
        return None
    return f"user {user} has {count} pending gangs in project {project.name}, over its maxPendingGangsPerUser {cap}"
