"""From an owner to its gangs (docs/semantics-notes.md, "Workload owners and their gangs"): minMember,
queue, priority class and topology, each held to the Project rules a pod is held to."""

from __future__ import annotations

from gpufleet.domain import Placement, QueueName
from gpufleet.domain.wire import LABEL_PREFIX, LABEL_QUEUE
from gpufleet.policy.grouping.kinds import KindRule, kind_rule
from gpufleet.policy.grouping.model import GangUnit, GroupFacts, GroupPlan, GroupProblem, Owner, Role
from gpufleet.policy.grouping.names import group_name
from gpufleet.policy.rules import namespace_problem, priority_problem, queue_for, queue_problem

__all__ = [
    "ANNOTATION_GROUP_PER",
    "ANNOTATION_MIN_MEMBER",
    "ANNOTATION_PLACEMENT",
    "ANNOTATION_TOPOLOGY_PREFERRED",
    "ANNOTATION_TOPOLOGY_REQUIRED",
    "Grouping",
    "group_for",
    "unit_names",
]

# Owner annotations the rules read (the pod-grouper's part of gpufleet's wire vocabulary).
ANNOTATION_MIN_MEMBER = f"{LABEL_PREFIX}min-member"
ANNOTATION_TOPOLOGY_REQUIRED = f"{LABEL_PREFIX}topology-required"
ANNOTATION_TOPOLOGY_PREFERRED = f"{LABEL_PREFIX}topology-preferred"
ANNOTATION_GROUP_PER = f"{LABEL_PREFIX}group-per"  # "replicated-job": a JobSet's gang per replicated job
ANNOTATION_PLACEMENT = f"{LABEL_PREFIX}placement"  # binpack | spread: the PodGroup's spec.placement
# The strategies a PodGroup may name (defrag is the SchedulerConfig's alone).
GANG_PLACEMENTS = (Placement.BINPACK, Placement.SPREAD)

Grouping = tuple[GroupPlan, ...] | GroupProblem


class _Problem(Exception):
    pass


def _rule(owner: Owner) -> KindRule:
    rule = kind_rule(owner.ref.api_version, owner.ref.kind)
    if rule is None:
        raise _Problem(f"{owner.ref.api_version} {owner.ref.kind} is not an owner kind gpufleet groups")
    return rule


def unit_names(owner: Owner) -> tuple[str, ...]:
    """The units of an owner's gangs: "" (the whole owner), its roles, or its replica indices; none
    for an owner of one gang per pod (the pod's name is the unit)."""
    if owner.unit is GangUnit.OWNER:
        return ("",)
    if owner.unit is GangUnit.ROLE:
        return tuple(role.name for role in owner.roles)
    if owner.unit is GangUnit.REPLICA:
        return tuple(str(index) for index in range(owner.replica_count))
    return ()


def group_for(owner: Owner, facts: GroupFacts, pod_name: str | None = None) -> Grouping:
    """The PodGroups an owner gets (one per unit; for owners of a gang per pod, the one of
    ``pod_name``, or none without it), or the problem that gives it none."""
    try:
        rule = _rule(owner)
    except _Problem as err:
        return GroupProblem(owner.ref, str(err))
    units = (pod_name,) if owner.unit is GangUnit.POD and pod_name else unit_names(owner)
    names = tuple(group_name(rule.short, owner.ref, unit) for unit in units)
    try:
        return tuple(_plan(owner, rule, facts, unit, name) for unit, name in zip(units, names, strict=True))
    except _Problem as err:
        return GroupProblem(owner.ref, f"{owner.ref}: {err}", names)


def _roles_of(owner: Owner, unit: str) -> tuple[Role, ...]:
    if owner.unit is GangUnit.ROLE:
        return tuple(role for role in owner.roles if role.name == unit)
    return owner.roles


def _plan(owner: Owner, rule: KindRule, facts: GroupFacts, unit: str, name: str) -> GroupPlan:
    roles = _roles_of(owner, unit)
    if owner.unit is GangUnit.POD:
        low, high = 1, 1
    else:
        low = max(1, sum(role.min_pods for role in roles))
        high = max(low, sum(role.max_pods for role in roles))
    low = _min_member(owner, low, high)
    _check_group_per(owner)
    top_required = _topology(owner, ANNOTATION_TOPOLOGY_REQUIRED, facts)
    top_preferred = _topology(owner, ANNOTATION_TOPOLOGY_PREFERRED, facts)
    project = facts.projects.project_of(owner.ref.namespace)
    problem = namespace_problem(facts.projects, owner.ref.namespace, facts.require_project)
    if problem is not None:
        raise _Problem(problem)
    queue = _queue(owner)
    if queue is None:
        queue = queue_for(project, facts.default_queue)
    if facts.leaf_queues is not None and queue not in facts.leaf_queues:
        raise _Problem(f"label {LABEL_QUEUE}: queue {queue} does not exist or is not a leaf queue")
    grant = _grant(rule, roles, queue)
    problem = queue_problem(facts.projects, project, owner.ref.namespace, queue, grant)
    if problem is not None:
        raise _Problem(f"label {LABEL_QUEUE}: {problem}")
    priority_class = _priority_class(roles)
    if priority_class is None and rule.inference and project is not None and project.allow_non_preemptible:
        priority_class = next((c for c in project.priority_classes or ()
                               if facts.priority_values.get(c, -(2**31)) >= facts.non_preemptible_priority), None)
    problem = priority_problem(project, priority_class)
    if problem is not None:
        raise _Problem(f"priorityClassName: {problem}")
    placement, warnings = _placement(owner, rule)
    return GroupPlan(
        owner=owner.ref, name=name, min_member=low, max_member=high, queue=queue,
        priority_class=priority_class, topology_required=top_required, topology_preferred=top_preferred,
        unit=unit, member_roles=rule.member_roles, placement=placement, warnings=warnings,
    )


def _placement(owner: Owner, rule: KindRule) -> tuple[Placement | None, tuple[str, ...]]:
    """The gang's ``spec.placement``: the owner's annotation, else ``spread`` for inference kinds,
    else none (the SchedulerConfig's). A bad value is not a problem (a strategy gains no capacity):
    the default, and a warning naming the owner and the annotation."""
    default = Placement.SPREAD if rule.inference else None
    text = owner.annotations.get(ANNOTATION_PLACEMENT)
    if text is None:
        return default, ()
    chosen = next((p for p in GANG_PLACEMENTS if p.value == text), None)
    if chosen is None:
        shown = default.value if default is not None else "the SchedulerConfig's"
        return default, (f'{owner.ref}: annotation {ANNOTATION_PLACEMENT}: "{text[:40]}" is not binpack or '
                         f"spread; {shown} is used",)
    return chosen, ()


def _min_member(owner: Owner, low: int, high: int) -> int:
    text = owner.annotations.get(ANNOTATION_MIN_MEMBER)
    if text is None:
        return low
    field = f"annotation {ANNOTATION_MIN_MEMBER}"
    if not text.isascii() or not text.isdigit():
        raise _Problem(f'{field}: "{text[:40]}" is not a whole number')
    value = int(text)
    if value < 1:
        raise _Problem(f"{field}: {value} is less than 1")
    if value > high:
        raise _Problem(f"{field}: {value} is more than the {high} pods {owner.ref} asks for")
    return value


def _check_group_per(owner: Owner) -> None:
    value = owner.annotations.get(ANNOTATION_GROUP_PER)
    if value is None:
        return
    if owner.ref.kind != "JobSet":
        raise _Problem(f"annotation {ANNOTATION_GROUP_PER}: only a JobSet may be grouped per part")
    if value != "replicated-job":
        raise _Problem(f'annotation {ANNOTATION_GROUP_PER}: "{value[:40]}" is not replicated-job')


def _topology(owner: Owner, key: str, facts: GroupFacts) -> str | None:
    value = owner.annotations.get(key)
    if value is None:
        return None
    if not value or value != value.strip() or " " in value:
        raise _Problem(f'annotation {key}: "{value[:40]}" is not a node label key')
    if facts.topology_levels and value not in facts.topology_levels:
        raise _Problem(f"annotation {key}: {value} is not one of the topology levels "
                       f"({', '.join(facts.topology_levels)})")
    return value


def _queue(owner: Owner) -> QueueName | None:
    value = owner.labels.get(LABEL_QUEUE)
    return QueueName(value) if value else None


def _grant(rule: KindRule, roles: tuple[Role, ...], queue: QueueName) -> QueueName | None:
    """The queue grant the webhook wrote on every template, for kinds whose templates it stamps."""
    if not rule.stamped_templates or not roles:
        return None
    if all(role.template.queue_grant == queue for role in roles):
        return queue
    return None


def _priority_class(roles: tuple[Role, ...]) -> str | None:
    classes = {role.template.priority_class for role in roles if role.counted}
    if len(classes) == 1:
        return classes.pop()
    return None
