"""``gpufleet policy check POD.yaml --snapshot S.yaml [--as USER --as-group G ...]``: the tenancy
admission's decision on a pod, offline, from a snapshot (``gpufleet snapshot`` writes its Projects,
Namespaces and RBAC objects).

``use`` of a queue (the webhook's SubjectAccessReview) is answered by RBAC evaluated over the
snapshot's Roles, ClusterRoles and bindings (:mod:`gpufleet.policy.rbac`), in the pod's namespace.
Prints ``allowed: ...`` (exit 0) or ``denied: <the reason>`` (exit 1); bad input: one line, exit 2.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import click

from gpufleet.adapters.tenancy_snapshot import TenancySnapshot, load_pod_file, load_tenancy_snapshot_file
from gpufleet.commands.base import Command, CommandError
from gpufleet.domain import Pod, PodGroup
from gpufleet.domain.queues import pod_group_of, resolve_queue
from gpufleet.domain.selectors import namespace_labels
from gpufleet.domain.wire import ANNOTATION_SUBMITTED_BY
from gpufleet.policy import (
    ProjectIndex,
    QueueAccess,
    RbacAuthorizer,
    namespace_problem,
    non_preemptible_problem,
    priority_problem,
    queue_for,
    queue_problem,
)

__all__ = ["Decision", "check", "decide", "request_groups"]

SA_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    message: str  # the reason of a denial, or what was decided


def request_groups(user: str | None, groups: Iterable[str]) -> tuple[str, ...]:
    """The groups the API server gives a request of ``user`` (impersonated with ``groups``): those,
    ``system:authenticated``, and a service account's ``system:serviceaccounts[:<namespace>]``."""
    out = list(dict.fromkeys(groups))
    if user:
        extra = ["system:authenticated"]
        if user.startswith(SA_PREFIX) and user.count(":") == 3:
            extra = ["system:serviceaccounts", f"system:serviceaccounts:{user.split(':')[2]}", *extra]
        out += [group for group in extra if group not in out]
    return tuple(out)


def _priority(pod: Pod, group: PodGroup | None, tenancy: TenancySnapshot) -> tuple[str | None, int]:
    """The PriorityClass the pod (or its PodGroup) names, and the priority the engine gives it."""
    snapshot = tenancy.snapshot
    classes = {pc.name: pc.value for pc in snapshot.priority_classes}
    defaults = [pc.value for pc in snapshot.priority_classes if pc.global_default]
    name = group.priority_class_name if group is not None and group.priority_class_name else pod.priority_class_name
    if name is not None and name in classes:
        return name, classes[name]
    return name, pod.priority if pod.priority is not None else max(defaults, default=0)


def decide(pod: Pod, tenancy: TenancySnapshot, user: str | None, groups: tuple[str, ...]) -> Decision:
    """The admission decision on ``pod`` created by ``user``.

    MERGE POINT (the one call site of the admission rules): replace the body below with the webhook's
    ``admit_pod`` (gpufleet.policy, twebhook's branch), passing ``access`` as its AccessReviewer, so
    that this command prints exactly what the webhook answers."""
    snapshot = tenancy.snapshot
    access = QueueAccess(RbacAuthorizer(tenancy.roles, tenancy.bindings), pod.namespace)
    index = ProjectIndex.build(snapshot.projects, namespace_labels(snapshot.namespaces), (pod.namespace,))
    project = index.project_of(pod.namespace)
    group = pod_group_of(pod, {g.key: g for g in snapshot.pod_groups})
    queue = resolve_queue(pod, group, queue_for(project, snapshot.config.default_queue))
    grant = queue if user and access.can_use_queue(user, groups, queue) else None
    class_name, priority = _priority(pod, group, tenancy)
    preemptible = pod.preemptible_label if pod.preemptible_label is not None else (
        priority < snapshot.config.non_preemptible_priority)
    problem = (namespace_problem(index, pod.namespace, snapshot.config.require_project)
               or queue_problem(index, project, pod.namespace, queue, grant)
               or priority_problem(project, class_name)
               or non_preemptible_problem(project, preemptible))  # fmt: skip
    if problem is not None:
        return Decision(False, problem)
    where = f"project {project.name}" if project is not None else "no project"
    how = f", granted to {user} by RBAC" if grant is not None and (project is None or queue not in project.queues) \
        and queue in index.owners else ""
    return Decision(True, f"pod {pod.key} ({where}) may use queue {queue}{how}")


@click.command(cls=Command)
@click.argument("pod_file", metavar="POD.yaml", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--snapshot", "snapshot_file", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="A cluster snapshot (gpufleet snapshot) with its Projects, Namespaces and RBAC objects.")
@click.option("--as", "user", default=None,
              help="The user creating the pod; default: the pod's gpufleet.dev/submitted-by, else nobody "
                   "(no RBAC grant applies).")
@click.option("--as-group", "groups", multiple=True, help="A group of that user (repeatable).")
def check(pod_file: Path, snapshot_file: Path, user: str | None, groups: tuple[str, ...]) -> None:
    """Print the tenancy admission's decision on the pod in POD.yaml: exit 0 allowed, 1 denied, 2 bad input."""
    if user is not None and not user.strip():
        raise CommandError("--as: must not be empty")
    if any(not group.strip() for group in groups):
        raise CommandError("--as-group: must not be empty")
    pod = load_pod_file(pod_file)
    tenancy = load_tenancy_snapshot_file(snapshot_file)
    who = user if user is not None else (pod.submitted_by or pod.annotations.get(ANNOTATION_SUBMITTED_BY))
    decision = decide(pod, tenancy, who, request_groups(who, groups))
    if decision.allowed:
        click.echo(f"allowed: {decision.message}")
        return
    click.echo(f"denied: {decision.message}")
    raise click.exceptions.Exit(1)
