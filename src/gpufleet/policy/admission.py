"""Admission: whether a new pod (or PodGroup) of gpufleet's may be created, by the Project rules
(docs/semantics-notes.md, "Projects" and "Admission"), and what the webhook records on it.

:func:`admit_pod` and :func:`admit_pod_group` are the whole decision, as pure functions of the
object, who creates it, what is known of the cluster (:class:`AdmissionContext`) and an
:class:`AccessReviewer` that answers "may this user use queue Q" (the webhook: a cached
SubjectAccessReview; ``gpufleet policy check``: an offline RBAC evaluator). The same words as the
engine's pending reasons, from the same rules (:mod:`gpufleet.policy.rules`).

Pods are read as the API server hands them over (plain mappings), tolerantly: everything a tenant
writes is hostile, so an odd field never raises; it is either ignored (the API server's own
validation refuses it) or refused with a reason.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpufleet.domain import DEFAULT_NON_PREEMPTIBLE_PRIORITY, PodGroup, Project, QueueName
from gpufleet.domain.wire import (
    ANNOTATION_GPU_INDEX,
    ANNOTATION_MPS_MEM_LIMIT,
    ANNOTATION_QUEUE_GRANT,
    ANNOTATION_SUBMITTED_BY,
    LABEL_POD_GROUP,
    LABEL_PREEMPTIBLE,
    LABEL_QUEUE,
    SCHEDULER_NAME,
    UNVERIFIED_USER,
)
from gpufleet.policy.images import glob_matches, image_matches, normalize_image
from gpufleet.policy.projects import ProjectIndex
from gpufleet.policy.rules import (
    namespace_problem,
    non_preemptible_problem,
    priority_problem,
    queue_for,
    queue_problem,
)

__all__ = [
    "DEFAULT_TRUSTED_CONTROLLERS",
    "SCHEDULER_OWNED_ANNOTATIONS",
    "WORKLOAD_KINDS",
    "AccessReviewer",
    "Admission",
    "AdmissionContext",
    "Denial",
    "admit_claim",
    "admit_ephemeral_containers",
    "admit_pod",
    "admit_pod_group",
    "admit_workload",
    "claim_name_problem",
    "image_problem",
    "is_pod_of_ours",
    "pending_gangs_problem",
    "preset_denial",
    "storage_class_problem",
    "volume_problems",
    "workload_template",
]

# Annotations only the scheduler writes on a pod (at binding); a new pod may not carry them.
SCHEDULER_OWNED_ANNOTATIONS = (ANNOTATION_GPU_INDEX, ANNOTATION_MPS_MEM_LIMIT)
_CONTAINER_SECTIONS = ("initContainers", "containers", "ephemeralContainers")
_MAX_SHOWN = 200  # characters of a tenant's value quoted in a reason

# (API group, kind) -> the path of the pod template in the object: the workloads whose pods follow
# their creator (docs/semantics-notes.md, "Admission", "Workloads").
WORKLOAD_KINDS: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("batch", "Job"): ("spec", "template"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template"),
    ("apps", "Deployment"): ("spec", "template"),
    ("apps", "ReplicaSet"): ("spec", "template"),
    ("apps", "StatefulSet"): ("spec", "template"),
}
# kube-controller-manager's accounts that create pods (and Jobs, ReplicaSets) from a template: what
# they create keeps the stamps copied from it.
DEFAULT_TRUSTED_CONTROLLERS: tuple[str, ...] = tuple(
    f"system:serviceaccount:kube-system:{name}" for name in
    ("job-controller", "cronjob-controller", "replicaset-controller", "deployment-controller",
     "statefulset-controller"))


class AccessReviewer(Protocol):
    """Whether ``user`` (member of ``groups``) may use ``queue`` for objects of ``namespace``:
    Kubernetes RBAC's verb ``use`` on ``queues/<queue>`` in API group ``gpufleet.dev``, asked
    with the namespace so that a RoleBinding there grants it as a ClusterRoleBinding does."""

    def can_use_queue(self, user: str, groups: Sequence[str], queue: QueueName, namespace: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class Denial:
    """The object is refused: ``rule`` names the rule (for logs and metrics), ``message`` says why."""

    rule: str
    message: str


@dataclass(frozen=True, slots=True)
class Admission:
    """The object may be created. ``annotations``: what the webhook writes on it (a value of None
    removes the key); ``queue``: the queue it goes to; ``queue_grant``: set when only the creator's
    RBAC grant allows that queue."""

    queue: QueueName | None = None
    queue_grant: QueueName | None = None
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    checked: bool = True  # False: not an object of gpufleet's, nothing was checked


@dataclass(frozen=True)
class AdmissionContext:
    """What the admitting side knows of the cluster.

    ``unreadable``: namespace -> why the Project claiming it cannot be read (its pods are refused
    until it is fixed). ``pending_gangs``: user -> namespace -> the keys of that user's pending
    gangs there (``namespace/group``, or the pod's own key)."""

    index: ProjectIndex = field(default_factory=ProjectIndex)
    default_queue: QueueName = QueueName("default")  # noqa: RUF009 (a NewType: no call at run time)
    require_project: bool = False
    non_preemptible_priority: int = DEFAULT_NON_PREEMPTIBLE_PRIORITY
    priority_classes: Mapping[str, int] = field(default_factory=dict)  # name -> value
    default_priority: int = 0  # the global default PriorityClass's value
    pod_groups: Mapping[str, PodGroup] = field(default_factory=dict)  # "namespace/name" -> PodGroup
    pending_gangs: Mapping[str, Mapping[str, Collection[str]]] = field(default_factory=dict)
    unreadable: Mapping[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------------------- reading a pod


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _str_map(value: object) -> dict[str, str]:
    return {k: v for k, v in _dict(value).items() if isinstance(k, str) and isinstance(v, str)}


def _shown(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _images(spec: Mapping[str, Any]) -> Iterator[str]:
    for section in _CONTAINER_SECTIONS:
        for container in _list(spec.get(section)):
            image = _dict(container).get("image")
            yield image if isinstance(image, str) else ""


def is_pod_of_ours(pod: Mapping[str, Any]) -> bool:
    return _dict(pod.get("spec")).get("schedulerName") == SCHEDULER_NAME


# ------------------------------------------------------------------------------------- rules


def image_problem(project: Project, image: str) -> str | None:
    """Whether ``project`` allows ``image``: a denied pattern refuses it (denied wins), then it
    must match an allowed pattern (when any are given), then carry a digest (``requireDigest``)."""
    policy = project.images
    if not policy.allowed and not policy.denied and not policy.require_digest:
        return None
    ref = normalize_image(image)
    if ref is None:
        return f"project {project.name} does not allow image {_shown(image)!r}: not a valid image reference"
    for pattern in policy.denied:
        if image_matches(pattern, ref):
            return f"project {project.name} does not allow image {ref}: denied {pattern}"
    if policy.allowed and not any(image_matches(pattern, ref) for pattern in policy.allowed):
        return f"project {project.name} does not allow image {ref}: allowed {', '.join(policy.allowed)}"
    if policy.require_digest and ref.digest is None:
        return f"project {project.name} does not allow image {ref}: not pinned by digest (requireDigest)"
    return None


def volume_problems(project: Project, spec: Mapping[str, Any]) -> Iterator[str]:
    """Every volume of ``spec`` (a pod spec) that ``project`` does not allow: its kind (the key of
    the ``spec.volumes[]`` entry), the StorageClass of a generic ephemeral volume's claim template
    (a template naming none would get the cluster's default class, unknown here: refused when the
    Project lists classes), and the claim of a ``persistentVolumeClaim`` volume (``claimNames``)."""
    policy = project.volumes
    for raw in _list(spec.get("volumes")):
        volume = _dict(raw)
        name = str(volume.get("name") or "?")
        for kind in sorted(k for k in volume if k != "name"):
            if kind not in policy.kinds:
                yield (f"project {project.name} does not allow volume kind {_shown(kind)} in volume {_shown(name)} "
                       f"(allowed: {', '.join(policy.kinds) or 'none'})")
        if "ephemeral" in volume:
            template = _dict(_dict(_dict(volume.get("ephemeral")).get("volumeClaimTemplate")).get("spec"))
            problem = storage_class_problem(project, template.get("storageClassName"), f"volume {_shown(name)}")
            if problem is not None:
                yield problem
        if "persistentVolumeClaim" in volume:
            problem = claim_name_problem(project, _dict(volume.get("persistentVolumeClaim")).get("claimName"),
                                         f"volume {_shown(name)}")
            if problem is not None:
                yield problem


def storage_class_problem(project: Project, wanted: object, where: str) -> str | None:
    """A claim's ``storageClassName`` (``wanted``; absent: the cluster's default class, unknown to
    admission, so refused when the Project lists classes) that ``project`` does not allow."""
    allowed = project.volumes.storage_classes
    if allowed is None or (isinstance(wanted, str) and wanted in allowed):
        return None
    shown = _shown(wanted) if isinstance(wanted, str) else "(cluster default)"
    return (f"project {project.name} does not allow storage class {shown} in {where} "
            f"(allowed: {', '.join(allowed) or 'none'})")


def claim_name_problem(project: Project, claim: object, where: str) -> str | None:
    """A claim name that none of ``project``'s ``claimNames`` globs matches."""
    allowed = project.volumes.claim_names
    text = claim if isinstance(claim, str) else ""
    if allowed is None or any(glob_matches(pattern, text) for pattern in allowed):
        return None
    return (f"project {project.name} does not allow claim {_shown(text) or '(none)'} in {where} "
            f"(allowed: {', '.join(allowed) or 'none'})")


def admit_claim(claim: Mapping[str, Any], namespace: str, context: AdmissionContext) -> Denial | Admission:
    """Whether a PersistentVolumeClaim may be created in ``namespace``: its namespace's Project must
    allow its StorageClass (``volumes.storageClasses``) and its name (``volumes.claimNames``), so that
    a pod of the Project cannot mount storage of a class it was not given through a claim made apart.
    A claim of a namespace in no Project is not checked."""
    denial = _namespace_denial(context, namespace)
    if denial is not None:
        return denial
    project = context.index.project_of(namespace)
    if project is None:
        return Admission(checked=False)
    name = _dict(claim.get("metadata")).get("name")
    where = f"persistentvolumeclaim {_shown(name) if isinstance(name, str) else '?'}"
    problem = (storage_class_problem(project, _dict(claim.get("spec")).get("storageClassName"), where)
               or claim_name_problem(project, name, where))  # fmt: skip
    return Denial("volume", problem) if problem is not None else Admission()


def pending_gangs_problem(project: Project, user: str, pending: int) -> str | None:
    """A user who already has ``maxPendingGangsPerUser`` pending gangs in ``project`` may not add one."""
    cap = project.max_pending_gangs_per_user
    if cap is None or pending < cap:
        return None
    return f"user {user} has {pending} pending gangs in project {project.name}, its maxPendingGangsPerUser"


def _scheduler_owned_problem(annotations: Mapping[str, str]) -> str | None:
    for key in SCHEDULER_OWNED_ANNOTATIONS:
        if key in annotations:
            return f"annotation {key} is written by the scheduler at binding; a new pod may not set it"
    return None


def preset_denial(pod: Mapping[str, Any]) -> Denial | None:
    """A new pod that presets what only the scheduler decides: a scheduler-owned annotation (the
    GPUs it gets, its MPS memory limit) or ``spec.nodeName`` (which skips the scheduler)."""
    meta = _dict(pod.get("metadata"))
    owned = _scheduler_owned_problem(_str_map(meta.get("annotations")))
    if owned is not None:
        return Denial("scheduler-annotation", owned)
    node = _dict(pod.get("spec")).get("nodeName")
    if node:
        return Denial("node-name", f"spec.nodeName is set ({_shown(str(node))}): pods of schedulerName "
                                   f"{SCHEDULER_NAME} are placed by the scheduler, leave it empty")
    return None


def _pending_gangs_of(context: AdmissionContext, project: Project, user: str) -> set[str]:
    gangs: set[str] = set()
    for namespace, keys in context.pending_gangs.get(user, {}).items():
        if context.index.project_of(namespace) is project:
            gangs.update(keys)
    return gangs


def _queue_decision(context: AdmissionContext, project: Project | None, namespace: str, queue: QueueName,
                    user: str, groups: Sequence[str], reviewer: AccessReviewer) -> tuple[str | None, QueueName | None]:
    """(the queue problem, the RBAC grant): a user-set grant is never trusted, it is asked again."""
    problem = queue_problem(context.index, project, namespace, queue, None)
    if problem is None:
        return None, None
    if reviewer.can_use_queue(user, groups, queue, namespace):
        return None, queue
    return problem, None


def _namespace_denial(context: AdmissionContext, namespace: str) -> Denial | None:
    broken = context.unreadable.get(namespace)
    if broken is not None:
        return Denial("project", broken)
    problem = namespace_problem(context.index, namespace, context.require_project)
    return Denial("namespace", problem) if problem is not None else None


def _priority(context: AdmissionContext, spec: Mapping[str, Any], group: PodGroup | None) -> int:
    """The pod's priority as the engine reads it: its PodGroup's class, else its own class, else
    ``spec.priority``, else the global default."""
    classes = context.priority_classes
    group_class = group.priority_class_name if group is not None else None
    if group_class is not None and group_class in classes:
        return classes[group_class]
    own = spec.get("priorityClassName")
    if isinstance(own, str) and own in classes:
        return classes[own]
    value = spec.get("priority")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return context.default_priority


def admit_pod(pod: Mapping[str, Any], namespace: str, user: str, groups: Sequence[str],
              context: AdmissionContext, reviewer: AccessReviewer, *, trusted: bool = False,
              template: bool = False) -> Denial | Admission:
    """Whether ``user`` (of ``groups``) may create ``pod`` in ``namespace`` (the rules in the module
    docstring, in this order: scheduler-owned annotations, ``spec.nodeName``, the namespace, the
    queue, the priority class, non-preemptible work, images, volumes, the pending-gang cap).

    ``trusted``: ``user`` is a trusted workload controller; a ``submitted-by`` on the pod (copied
    from its template) is kept and is the user, its ``queue-grant`` is the only grant (no review is
    asked), and nothing is written. ``template``: ``pod`` is a workload's pod template (no
    pending-gang cap: its pods are checked when they are made)."""
    if not is_pod_of_ours(pod):
        return Admission(checked=False)
    meta = _dict(pod.get("metadata"))
    spec = _dict(pod.get("spec"))
    labels = _str_map(meta.get("labels"))
    stamps = _str_map(meta.get("annotations"))
    kept = trusted and bool(stamps.get(ANNOTATION_SUBMITTED_BY))
    user = stamps[ANNOTATION_SUBMITTED_BY] if kept else (user or UNVERIFIED_USER)

    denial = preset_denial(pod)
    if denial is not None:
        return denial
    denial = _namespace_denial(context, namespace)
    if denial is not None:
        return denial
    project = context.index.project_of(namespace)

    group_label = labels.get(LABEL_POD_GROUP) or None
    group = context.pod_groups.get(f"{namespace}/{group_label}") if group_label else None
    queue: QueueName | None = QueueName(labels[LABEL_QUEUE]) if labels.get(LABEL_QUEUE) else None
    if queue is None and group is not None and group.queue:
        queue = group.queue
    if queue is None:
        queue = queue_for(project, context.default_queue)
    grant: QueueName | None
    if kept:  # the grant copied from the template: asked for its submitter when it was stamped
        copied = stamps.get(ANNOTATION_QUEUE_GRANT)
        grant = QueueName(copied) if copied else None
        problem = queue_problem(context.index, project, namespace, queue, grant)
    else:
        problem, grant = _queue_decision(context, project, namespace, queue, user, groups, reviewer)
    if problem is not None:
        return Denial("queue", problem)

    own_class = spec.get("priorityClassName")
    priority_class = group.priority_class_name if group is not None and group.priority_class_name else (
        own_class if isinstance(own_class, str) and own_class else None)
    problem = priority_problem(project, priority_class)
    if problem is not None:
        return Denial("priority-class", problem)
    label = labels.get(LABEL_PREEMPTIBLE)
    preemptible = label == "true" if label in ("true", "false") else (
        _priority(context, spec, group) < context.non_preemptible_priority)
    problem = non_preemptible_problem(project, preemptible)
    if problem is not None:
        return Denial("non-preemptible", problem)

    if project is not None:
        for image in _images(spec):
            problem = image_problem(project, image)
            if problem is not None:
                return Denial("image", problem)
        for problem in volume_problems(project, spec):
            return Denial("volume", problem)
        if project.max_pending_gangs_per_user is not None and not template:
            name = meta.get("name")
            gang = f"{namespace}/{group_label}" if group_label else f"{namespace}/{name}"
            gangs = _pending_gangs_of(context, project, user)
            if gang not in gangs or not (group_label or name):
                problem = pending_gangs_problem(project, user, len(gangs))
                if problem is not None:
                    return Denial("pending-gangs", problem)

    if kept:
        return Admission(queue=queue, queue_grant=grant)
    return Admission(queue=queue, queue_grant=grant,
                     annotations={ANNOTATION_SUBMITTED_BY: user, ANNOTATION_QUEUE_GRANT: grant})


def workload_template(obj: Mapping[str, Any], group: str, kind: str) -> Mapping[str, Any] | None:
    """The pod template of a workload of :data:`WORKLOAD_KINDS` (None: another kind, or none)."""
    path = WORKLOAD_KINDS.get((group, kind))
    if path is None:
        return None
    node: object = obj
    for key in path:
        node = _dict(node).get(key)
    return node if isinstance(node, Mapping) else None


def admit_workload(obj: Mapping[str, Any], group: str, kind: str, namespace: str, user: str,
                   groups: Sequence[str], context: AdmissionContext, reviewer: AccessReviewer, *,
                   trusted: bool = False) -> Denial | Admission:
    """Whether ``user`` may create (or change the pod template of) workload ``obj`` of ``kind``:
    the pod rules on its template (without the pending-gang cap); the annotations to write on the
    template. ``trusted`` as for :func:`admit_pod`. Any other object: ``checked=False``."""
    template = workload_template(obj, group, kind)
    if template is None:
        return Admission(checked=False)
    return admit_pod(template, namespace, user, groups, context, reviewer, trusted=trusted, template=True)


def admit_ephemeral_containers(pod: Mapping[str, Any], namespace: str, context: AdmissionContext) -> Denial | None:
    """``kubectl debug`` adds containers to a running pod (an update of ``pods/ephemeralcontainers``,
    never seen at creation): their images are held to the pod's Project as well."""
    if not is_pod_of_ours(pod):
        return None
    project = context.index.project_of(namespace)
    if project is None:
        return None
    for container in _list(_dict(pod.get("spec")).get("ephemeralContainers")):
        image = _dict(container).get("image")
        problem = image_problem(project, image if isinstance(image, str) else "")
        if problem is not None:
            return Denial("image", problem)
    return None


def admit_pod_group(group: PodGroup, user: str, groups: Sequence[str], context: AdmissionContext,
                    reviewer: AccessReviewer) -> Denial | Admission:
    """Whether ``user`` may create PodGroup ``group``: its namespace, its queue (when it names
    one), its priority class. Nothing is written on it (its pods carry the grant and the user)."""
    denial = _namespace_denial(context, group.namespace)
    if denial is not None:
        return denial
    project = context.index.project_of(group.namespace)
    grant: QueueName | None = None
    if group.queue:
        problem, grant = _queue_decision(context, project, group.namespace, group.queue, user or UNVERIFIED_USER,
                                         groups, reviewer)
        if problem is not None:
            return Denial("queue", problem)
    problem = priority_problem(project, group.priority_class_name)
    if problem is not None:
        return Denial("priority-class", problem)
    return Admission(queue=group.queue, queue_grant=grant)
