"""``gpufleet policy check POD.yaml --snapshot S.yaml [--as USER --as-group G ...]``: the tenancy
admission's decision on a pod, offline, from a snapshot (``gpufleet snapshot`` writes its Projects,
Namespaces and RBAC objects).

``use`` of a queue (the webhook's SubjectAccessReview) is answered by RBAC evaluated over the
snapshot's Roles, ClusterRoles and bindings (:mod:`gpufleet.policy.rbac`), in the pod's namespace.
Prints ``allowed: ...`` (exit 0) or ``denied: <the reason>`` (exit 1); bad input: one line, exit 2.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from gpufleet.adapters.tenancy_snapshot import TenancySnapshot, load_pod_file, load_tenancy_snapshot_file
from gpufleet.commands.base import Command, CommandError
from gpufleet.domain import Pod, Snapshot
from gpufleet.domain.queues import gang_key
from gpufleet.domain.selectors import namespace_labels
from gpufleet.domain.wire import ANNOTATION_SUBMITTED_BY, UNVERIFIED_USER
from gpufleet.policy import AdmissionContext, Denial, ProjectIndex, RbacAuthorizer, admit_pod

__all__ = ["Decision", "admission_context", "check", "decide", "request_groups"]

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


def admission_context(snapshot: Snapshot) -> AdmissionContext:
    """What the webhook's cluster cache would hold for ``snapshot``: its Projects, config, priority
    classes, PodGroups and each user's pending gangs (pods of ours not bound, by their
    ``submitted-by``)."""
    pending: dict[str, dict[str, set[str]]] = {}
    for pod in snapshot.pods:
        if pod.ours and not pod.finished and pod.node_name is None:
            user = pod.submitted_by or UNVERIFIED_USER
            pending.setdefault(user, {}).setdefault(pod.namespace, set()).add(gang_key(pod))
    defaults = [pc.value for pc in snapshot.priority_classes if pc.global_default]
    namespaces = {p.namespace for p in snapshot.pods}
    return AdmissionContext(
        index=ProjectIndex.build(snapshot.projects, namespace_labels(snapshot.namespaces), namespaces),
        default_queue=snapshot.config.default_queue,
        require_project=snapshot.config.require_project,
        non_preemptible_priority=snapshot.config.non_preemptible_priority,
        priority_classes={pc.name: pc.value for pc in snapshot.priority_classes},
        default_priority=max(defaults, default=0),
        pod_groups={g.key: g for g in snapshot.pod_groups},
        pending_gangs=pending,
    )


def decide(pod: Pod, document: Mapping[str, Any], tenancy: TenancySnapshot, user: str | None,
           groups: tuple[str, ...]) -> Decision:
    """The admission decision on ``pod`` (``document``: as written) created by ``user``: the
    webhook's own rules (:func:`gpufleet.policy.admit_pod`), with ``use`` of a queue answered by
    RBAC over the snapshot's objects instead of a SubjectAccessReview."""
    context = admission_context(tenancy.snapshot)
    access = RbacAuthorizer(tenancy.roles, tenancy.bindings)
    answer = admit_pod(document, pod.namespace, user or "", groups, context, access)
    if isinstance(answer, Denial):
        return Decision(False, answer.message)
    project = context.index.project_of(pod.namespace)
    where = f"project {project.name}" if project is not None else "no project"
    how = f", granted to {user} by RBAC" if answer.queue_grant is not None else ""
    return Decision(True, f"pod {pod.key} ({where}) may use queue {answer.queue}{how}")


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
    pod, document = load_pod_file(pod_file)
    tenancy = load_tenancy_snapshot_file(snapshot_file)
    who = user if user is not None else (pod.submitted_by or pod.annotations.get(ANNOTATION_SUBMITTED_BY))
    decision = decide(pod, document, tenancy, who, request_groups(who, groups))
    if decision.allowed:
        click.echo(f"allowed: {decision.message}")
        return
    click.echo(f"denied: {decision.message}")
    raise click.exceptions.Exit(1)
