"""What installs tenancy (docs/tenancy.md): the user-facing roles, the ValidatingAdmissionPolicy that
guards gpufleet's pod annotations, and the tenancy entry of the validating webhook.

Data and builders only: :mod:`gpufleet.kube.install.manifests` puts them into ``gpufleet manifests``
and writes the chart's generated files from them (``files/rbac/tenancy-roles.yaml``,
``files/admission/pod-annotations-policy.yaml``), so the chart and the manifests cannot drift.

The roles. Queues are cluster-scoped; ``use`` on ``queues/Q`` (the custom verb the webhook asks a
SubjectAccessReview for, in the pod's namespace) is granted per queue with a ClusterRole naming Q in
``resourceNames``, bound by a RoleBinding (in the tenant's namespaces) or a ClusterRoleBinding. No
shipped role grants ``use`` on every queue except ``gpufleet-platform-admin``.

The policy. At CREATE, ``gpufleet.dev/submitted-by`` (if present) must be the creator's user name and
``gpufleet.dev/queue-grant`` (if present) must name a queue the creator may ``use``; at UPDATE, those
two and the scheduler-owned annotations may be set, changed or removed by the controller's service
account only. Workloads (Job, CronJob, Deployment, ReplicaSet, StatefulSet) are held to the first two
rules on their pod template's annotations, at CREATE and at an UPDATE that changes them; the trusted
workload controllers (``trusted``) are exempt from both, so the pods they make keep the stamps
copied from the template. The webhook writes the first two at creation; the policy holds when it is down or
bypassed (failurePolicy Ignore, objects created before installation).
"""

from __future__ import annotations

from typing import Any

from gpufleet.domain.wire import (
    ANNOTATION_BOUND_AT,
    ANNOTATION_GPU_BLOCKS,
    ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_MPS_MEM_LIMIT,
    ANNOTATION_QUEUE_GRANT,
    ANNOTATION_QUEUED_AT,
    ANNOTATION_SUBMITTED_BY,
    API_GROUP,
    API_VERSION,
    SCHEDULER_NAME,
)
from gpufleet.policy.admission import DEFAULT_TRUSTED_CONTROLLERS

__all__ = [
    "GUARDED_ANNOTATIONS",
    "MEMBER",
    "OPERATOR",
    "OPERATOR_ANNOTATIONS",
    "OPERATOR_VERB",
    "PLATFORM_ADMIN",
    "POLICY_SUFFIX",
    "PROJECT_ADMIN",
    "TENANCY_MUTATE_MATCH",
    "TENANCY_ROLES",
    "TENANCY_WEBHOOK_MATCH",
    "TENANCY_WEBHOOK_NAME",
    "VALIDATE_PATH",
    "VIEWER",
    "WORKLOAD_RESOURCES",
    "WORKLOAD_WEBHOOK_RULES",
    "claims_webhook",
    "controller_username",
    "policy_spec",
    "policy_spec_template",
    "tenancy_mutating_webhook",
    "tenancy_webhook",
]

PLATFORM_ADMIN = "gpufleet-platform-admin"
OPERATOR = "gpufleet-operator"
PROJECT_ADMIN = "gpufleet-project-admin"
MEMBER = "gpufleet-member"
VIEWER = "gpufleet-viewer"
_AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
_READ = ["get", "list", "watch"]
_WRITE = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]

# What `gpufleet admin` calls: the snapshot's reads (as `gpufleet snapshot`), the writes of each action.
OPERATOR_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["namespaces", "persistentvolumeclaims", "persistentvolumes"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["resource.k8s.io"],
     "resources": ["resourceslices", "deviceclasses", "resourceclaims", "resourceclaimtemplates"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": [API_GROUP], "resources": ["queues", "projects", "schedulerconfigs", "resourceflavors"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": [API_GROUP], "resources": ["podgroups"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [API_GROUP], "resources": ["queues"], "verbs": ["operate"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
)  # fmt: skip

# (name, labels, rules): the ClusterRoles shipped with gpufleet.
TENANCY_ROLES: tuple[tuple[str, dict[str, str], tuple[dict[str, Any], ...]], ...] = (
    # Everything of gpufleet's: Queues, Projects, SchedulerConfig, PodGroups, and use of every queue; and,
    # named so that it stays when the wildcard is narrowed, `create` on `simulations` (never stored): the
    # dashboard's What-if page, which gpufleet.web.auth asks a SubjectAccessReview for.
    (PLATFORM_ADMIN, {}, (
        {"apiGroups": [API_GROUP], "resources": ["*"], "verbs": ["*"]},
        {"apiGroups": [API_GROUP], "resources": ["simulations"], "verbs": ["create"]},
    )),
    # An operator (`gpufleet admin reclaim | priority | drain`, docs/admin.md): exactly the calls those
    # commands make (a test checks them), and `operate` on queues, which lets it write the annotations
    # of OPERATOR_ANNOTATIONS past the ValidatingAdmissionPolicy. Bind it with a ClusterRoleBinding.
    (OPERATOR, {}, OPERATOR_RULES),
    # A project's admin (aggregated into `admin`): its PodGroups; reads Projects, Queues and the
    # SchedulerConfig. Grants of `use` are Kubernetes RoleBindings, which `admin` already manages.
    (PROJECT_ADMIN, {f"{_AGGREGATE}admin": "true"}, (
        {"apiGroups": [API_GROUP], "resources": ["podgroups"], "verbs": list(_WRITE)},
        {"apiGroups": [API_GROUP], "resources": ["projects", "queues", "schedulerconfigs", "resourceflavors"],
         "verbs": list(_READ)},
    )),
    # A member (aggregated into `edit`): submits PodGroups (and pods, by Kubernetes' own roles),
    # sees the queues. `use` of a queue its Project does not list is granted per queue.
    (MEMBER, {f"{_AGGREGATE}edit": "true"}, (
        {"apiGroups": [API_GROUP], "resources": ["podgroups"], "verbs": list(_WRITE)},
        {"apiGroups": [API_GROUP], "resources": ["projects", "queues"], "verbs": list(_READ)},
    )),
    # Read-only (aggregated into `view`).
    (VIEWER, {f"{_AGGREGATE}view": "true"}, (
        {"apiGroups": [API_GROUP],
         "resources": ["podgroups", "projects", "queues", "resourceflavors", "schedulerconfigs"],
         "verbs": list(_READ)},
    )),
)  # fmt: skip

# Exactly the API calls of the webhook's tenancy admission (gpufleet.kube.webhook): SubjectAccessReviews
# (`use` of a queue), the informers of its cache (list + watch of state.WATCHED_KINDS: Projects and the
# Namespaces they select, the SchedulerConfig, PriorityClasses, PodGroups, and pods for the pending
# gangs), and a get of a PodGroup a pod names before the watch delivered it. No writes, no queues.
# The webhook's own ServiceAccount and ClusterRole carry them; a test pins them against the code.
WEBHOOK_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["namespaces", "pods"], "verbs": ["list", "watch"]},
    {"apiGroups": [API_GROUP], "resources": ["projects", "schedulerconfigs"], "verbs": ["list", "watch"]},
    {"apiGroups": [API_GROUP], "resources": ["podgroups"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["list", "watch"]},
)  # fmt: skip

# --- the ValidatingAdmissionPolicy --------------------------------------------------------------

POLICY_SUFFIX = "pod-annotations"  # the policy and its binding: <release>-pod-annotations
# Written by the webhook at creation, or by the controller: nobody else may set or change them later.
GUARDED_ANNOTATIONS = (
    ANNOTATION_SUBMITTED_BY, ANNOTATION_QUEUE_GRANT, ANNOTATION_GPU_INDEX, ANNOTATION_GPU_BLOCKS,
    ANNOTATION_MPS_MEM_LIMIT, ANNOTATION_BOUND_AT, ANNOTATION_QUEUED_AT,
)  # fmt: skip


# Written by an operator's `gpufleet admin` (or the controller): set, changed or removed only by a user the
# API server allows the verb `operate` on gpufleet.dev queues (the gpufleet-operator and
# gpufleet-platform-admin roles), or by the controller. A pod's mark that its eviction was the
# operator's (the ledger's end reason `operator`), and a PodGroup's class that the pod-grouper keeps.
OPERATOR_ANNOTATIONS = ("gpufleet.dev/evicted-by", "gpufleet.dev/operator-priority-class")
OPERATOR_VERB = "operate"


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


def _annotations_of(obj: str) -> str:
    """CEL: the annotations the policy guards on ``obj``: a pod's own, or a workload's pod template's
    (a CronJob's ``spec.jobTemplate.spec.template``, the others' ``spec.template``). By the shape
    of the object, so that one expression serves every matched resource."""
    def of(meta: str) -> str:
        return f"(has({meta}.annotations) ? {meta}.annotations : {{}})"

    cron, template = f"{obj}.spec.jobTemplate.spec.template", f"{obj}.spec.template"
    return (f"(has({obj}.spec) && has({obj}.spec.jobTemplate)"
            f" ? (has({cron}.metadata) ? {of(cron + '.metadata')} : {{}})"
            f" : has({obj}.spec) && has({obj}.spec.template) ? (has({template}.metadata) ? "
            f"{of(template + '.metadata')} : {{}}) : {of(obj + '.metadata')})")


def _any_guarded(obj: str) -> str:
    guarded = _cel_list(GUARDED_ANNOTATIONS + OPERATOR_ANNOTATIONS)
    return f"{guarded}.exists(k, k in {_annotations_of(obj)})"


# The workloads whose pod template the webhook stamps (docs/semantics-notes.md, "Admission",
# "Workloads"): the policy guards the template's annotations too.
WORKLOAD_RESOURCES: tuple[tuple[str, str], ...] = (
    ("batch", "jobs"), ("batch", "cronjobs"), ("apps", "deployments"), ("apps", "replicasets"),
    ("apps", "statefulsets"),
)  # fmt: skip


def controller_username(namespace: str, service_account: str) -> str:
    """The user name the API server gives the controller's service account."""
    return f"system:serviceaccount:{namespace}:{service_account}"


def _changed(key: str) -> str:
    return (f"(('{key}' in variables.annotations) != ('{key}' in variables.oldAnnotations)"
            f" || ('{key}' in variables.annotations"
            f" && variables.annotations['{key}'] != variables.oldAnnotations['{key}']))")


def _checked_when(key: str, *changed: str) -> str:
    """CEL: whether the creator rules on ``key`` apply: at CREATE, and at UPDATE of a workload's
    template when one of ``changed`` changed (the webhook stamps the editor); never for a trusted
    controller."""
    return (f"!(request.userInfo.username in variables.trusted) && '{key}' in variables.annotations"
            f" && (request.operation == 'CREATE' || (variables.workload"
            f" && ({' || '.join(_changed(k) for k in changed)})))")


def policy_spec_template() -> dict[str, Any]:
    """The policy's spec without its first two variables, ``controller`` (the controller's user
    name) and ``trusted`` (the trusted workload controllers), which depend on the install: the
    chart's generated file."""
    submitted = f"variables.annotations['{ANNOTATION_SUBMITTED_BY}']"
    grant = f"variables.annotations['{ANNOTATION_QUEUE_GRANT}']"
    grant_checked = _checked_when(ANNOTATION_QUEUE_GRANT, ANNOTATION_QUEUE_GRANT, ANNOTATION_SUBMITTED_BY)
    workloads = [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                  "resources": [resource]} for group, resource in WORKLOAD_RESOURCES]
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]},
            # a PodGroup's queued-at (a drained gang's age): the controller's alone, at creation too
            {"apiGroups": [API_GROUP], "apiVersions": [API_VERSION], "operations": ["CREATE", "UPDATE"],
             "resources": ["podgroups"]},
            *workloads]},
        # Only pods that carry (or carried) one of the annotations are evaluated.
        "matchConditions": [{"name": "gpufleet-annotations", "expression":
                             f"({_any_guarded('object')}) || (request.operation == 'UPDATE' && "
                             f"{_any_guarded('oldObject')})"}],
        "variables": [
            {"name": "annotations", "expression": _annotations_of("object")},
            {"name": "oldAnnotations",
             "expression": f"request.operation == 'UPDATE' ? {_annotations_of('oldObject')} : {{}}"},
            {"name": "guarded", "expression": _cel_list(GUARDED_ANNOTATIONS)},
            {"name": "workload",
             "expression": "has(object.spec) && (has(object.spec.template) || has(object.spec.jobTemplate))"},
        ],
        "validations": [
            {"expression": f"!({_checked_when(ANNOTATION_SUBMITTED_BY, ANNOTATION_SUBMITTED_BY)})"
                           f" || {submitted} == request.userInfo.username",
             "messageExpression": f"'{ANNOTATION_SUBMITTED_BY} must be the creator ' + request.userInfo.username"
                                  f" + ', not ' + {submitted}",
             "reason": "Forbidden"},
            {"expression": f"!({grant_checked})"
                           f" || authorizer.group('{API_GROUP}').resource('queues').namespace(request.namespace)"
                           f".name({grant}).check('use').allowed()",
             "messageExpression": f"'{ANNOTATION_QUEUE_GRANT}: user ' + request.userInfo.username"
                                  f" + ' may not use queue ' + {grant}",
             "reason": "Forbidden"},
            {"expression": "request.operation != 'UPDATE' || variables.workload"
                           " || request.userInfo.username == variables.controller"
                           " || variables.guarded.all(k,"
                           " (k in variables.annotations) == (k in variables.oldAnnotations)"
                           " && (!(k in variables.annotations)"
                           " || variables.annotations[k] == variables.oldAnnotations[k]))",
             "message": "only gpufleet's controller may set, change or remove the annotations "
                        f"{', '.join(GUARDED_ANNOTATIONS)} after creation",
             "reason": "Forbidden"},
            {"expression": f"!({' || '.join(_changed(k) for k in OPERATOR_ANNOTATIONS)})"
                           " || request.userInfo.username == variables.controller"
                           f" || authorizer.group('{API_GROUP}').resource('queues').check('{OPERATOR_VERB}').allowed()",
             "message": f"only an operator (verb {OPERATOR_VERB} on {API_GROUP} queues: the gpufleet-operator role) "
                        f"or gpufleet's controller may set, change or remove {', '.join(OPERATOR_ANNOTATIONS)}",
             "reason": "Forbidden"},
            {"expression": f"request.operation != 'CREATE' || !('{ANNOTATION_QUEUED_AT}' in variables.annotations)"
                           " || request.userInfo.username == variables.controller",
             "message": f"only gpufleet's controller may set {ANNOTATION_QUEUED_AT}",
             "reason": "Forbidden"},
        ],
    }  # fmt: skip


def policy_spec(controller: str, trusted: tuple[str, ...] = DEFAULT_TRUSTED_CONTROLLERS) -> dict[str, Any]:
    """The whole spec of the policy, for the controller's user name ``controller`` and the trusted
    workload controllers ``trusted`` (the webhook's ``--trusted-controller``)."""
    spec = policy_spec_template()
    spec["variables"] = [{"name": "controller", "expression": f"'{controller}'"},
                         {"name": "trusted", "expression": _cel_list(trusted)}, *spec["variables"]]
    return spec


# --- the tenancy webhook ------------------------------------------------------------------------

TENANCY_WEBHOOK_NAME = f"tenancy.{API_GROUP}"
VALIDATE_PATH = "/validate"
# Pods of gpufleet's, every PodGroup, and the workloads whose pod template is of gpufleet's.
_TEMPLATE_SCHEDULER = "object.spec.template.spec.schedulerName"
_CRON_SCHEDULER = "object.spec.jobTemplate.spec.template.spec.schedulerName"
_WORKLOAD_MATCH = (
    f"(request.resource.resource == 'cronjobs' && has({_CRON_SCHEDULER})"
    f" && {_CRON_SCHEDULER} == '{SCHEDULER_NAME}')"
    f" || (request.resource.resource in {_cel_list(tuple(r for _, r in WORKLOAD_RESOURCES if r != 'cronjobs'))}"
    f" && has({_TEMPLATE_SCHEDULER}) && {_TEMPLATE_SCHEDULER} == '{SCHEDULER_NAME}')"
)
TENANCY_WEBHOOK_MATCH = (
    "request.resource.resource == 'podgroups'"
    f" || (request.resource.resource == 'pods' && has(object.spec.schedulerName)"
    f" && object.spec.schedulerName == '{SCHEDULER_NAME}')"
    f" || {_WORKLOAD_MATCH}"
)
# The tenancy webhook's rules for workloads (the mutating webhook that stamps their templates
# needs the same): at creation, and at updates (a changed template is checked and stamped again).
WORKLOAD_WEBHOOK_RULES: tuple[dict[str, Any], ...] = tuple(
    {"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": [resource],
     "scope": "Namespaced"} for group, resource in WORKLOAD_RESOURCES)


def tenancy_webhook(service: dict[str, Any], namespace_selector: dict[str, Any],
                    failure_policy: str = "Fail", timeout: int = 5) -> dict[str, Any]:
    """The tenancy entry of the ValidatingWebhookConfiguration: pods and PodGroups at creation,
    workloads at creation and update."""
    return {
        "name": TENANCY_WEBHOOK_NAME,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": failure_policy,
        "timeoutSeconds": timeout,
        "clientConfig": {"service": {**service, "path": VALIDATE_PATH, "port": 443}},
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
             "scope": "Namespaced"},
            {"apiGroups": [API_GROUP], "apiVersions": [API_VERSION], "operations": ["CREATE"],
             "resources": ["podgroups"], "scope": "Namespaced"},
            *WORKLOAD_WEBHOOK_RULES,
        ],
        "namespaceSelector": namespace_selector,
        "matchConditions": [{"name": "gpufleet-pod-or-podgroup", "expression": TENANCY_WEBHOOK_MATCH}],
    }  # fmt: skip


CLAIMS_WEBHOOK_NAME = f"claims.tenancy.{API_GROUP}"


def claims_webhook(service: dict[str, Any], namespace_selector: dict[str, Any], timeout: int = 5) -> dict[str, Any]:
    """The claims entry of the ValidatingWebhookConfiguration: PersistentVolumeClaims at creation,
    held to their Project's storageClasses and claimNames. failurePolicy Ignore: it sees every claim
    of the cluster (which claims a Project governs is not known to CEL), and a webhook down must not
    stop all of them; a claim created meanwhile is not checked (docs/tenancy.md)."""
    return {
        "name": CLAIMS_WEBHOOK_NAME,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Ignore",
        "timeoutSeconds": timeout,
        "clientConfig": {"service": {**service, "path": VALIDATE_PATH, "port": 443}},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                   "resources": ["persistentvolumeclaims"], "scope": "Namespaced"}],
        "namespaceSelector": namespace_selector,
    }  # fmt: skip


# The tenancy entry of the MutatingWebhookConfiguration (/mutate writes submitted-by and queue-grant):
# every PodGroup, pods of gpufleet's but the fractional ones at creation, which the fractional
# entry (its own failurePolicy) already sends to the same /mutate; their ephemeral containers too;
# and the workloads whose pod template is of gpufleet's (their templates are stamped). Never every
# pod or Deployment of the cluster: failurePolicy Fail would hold them all back while it is down.
_OURS = f"has(object.spec.schedulerName) && object.spec.schedulerName == '{SCHEDULER_NAME}'"
_FRACTIONAL = (
    "has(object.metadata.annotations)"
    f" && ('{ANNOTATION_GPU_BLOCKS}' in object.metadata.annotations"
    f" || '{ANNOTATION_GPU_MEMORY}' in object.metadata.annotations)"
)
TENANCY_MUTATE_MATCH = (
    "request.resource.resource == 'podgroups'"
    f" || (request.resource.resource == 'pods' && {_OURS}"
    f" && (request.subResource == 'ephemeralcontainers' || !({_FRACTIONAL})))"
    f" || {_WORKLOAD_MATCH}"
)


def tenancy_mutating_webhook(service: dict[str, Any], namespace_selector: dict[str, Any],
                             failure_policy: str = "Fail", timeout: int = 5) -> dict[str, Any]:
    """The tenancy entry of the MutatingWebhookConfiguration: pods and PodGroups at creation,
    ``pods/ephemeralcontainers`` updates, and workloads at creation and update, on ``/mutate``."""
    return {
        "name": TENANCY_WEBHOOK_NAME,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": failure_policy,
        "reinvocationPolicy": "IfNeeded",
        "timeoutSeconds": timeout,
        "clientConfig": {"service": {**service, "path": "/mutate", "port": 443}},
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
             "scope": "Namespaced"},
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
             "resources": ["pods/ephemeralcontainers"], "scope": "Namespaced"},
            {"apiGroups": [API_GROUP], "apiVersions": [API_VERSION], "operations": ["CREATE"],
             "resources": ["podgroups"], "scope": "Namespaced"},
            *WORKLOAD_WEBHOOK_RULES,
        ],
        "namespaceSelector": namespace_selector,
        "matchConditions": [{"name": "gpufleet-pod-or-podgroup", "expression": TENANCY_MUTATE_MATCH}],
    }  # fmt: skip
