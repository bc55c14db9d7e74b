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
account only. The webhook writes the first two at creation; the policy holds when it is down or
bypassed (failurePolicy Ignore, objects created before installation).
"""

from __future__ import annotations

from typing import Any

from gpufleet.domain.wire import (
    ANNOTATION_GPU_BLOCKS,
    ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_MPS_MEM_LIMIT,
    ANNOTATION_QUEUE_GRANT,
    ANNOTATION_SUBMITTED_BY,
    API_GROUP,
    API_VERSION,
    SCHEDULER_NAME,
)

__all__ = [
    "GUARDED_ANNOTATIONS",
    "MEMBER",
    "PLATFORM_ADMIN",
    "POLICY_SUFFIX",
    "PROJECT_ADMIN",
    "TENANCY_MUTATE_MATCH",
    "TENANCY_ROLES",
    "TENANCY_WEBHOOK_MATCH",
    "TENANCY_WEBHOOK_NAME",
    "VALIDATE_PATH",
    "VIEWER",
    "controller_username",
    "policy_spec",
    "policy_spec_template",
    "tenancy_mutating_webhook",
    "tenancy_webhook",
]

PLATFORM_ADMIN = "gpufleet-platform-admin"
PROJECT_ADMIN = "gpufleet-project-admin"
MEMBER = "gpufleet-member"
VIEWER = "gpufleet-viewer"
_AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
_READ = ["get", "list", "watch"]
_WRITE = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]

# (name, labels, rules): the ClusterRoles shipped with gpufleet.
TENANCY_ROLES: tuple[tuple[str, dict[str, str], tuple[dict[str, Any], ...]], ...] = (
    # Everything of gpufleet's: Queues, Projects, SchedulerConfig, PodGroups, and use of every queue.
    (PLATFORM_ADMIN, {}, (
        {"apiGroups": [API_GROUP], "resources": ["*"], "verbs": ["*"]},
    )),
    # A project's admin (aggregated into `admin`): its PodGroups; reads Projects, Queues and the
    # SchedulerConfig. Grants of `use` are Kubernetes RoleBindings, which `admin` already manages.
    (PROJECT_ADMIN, {f"{_AGGREGATE}admin": "true"}, (
        {"apiGroups": [API_GROUP], "resources": ["podgroups"], "verbs": list(_WRITE)},
        {"apiGroups": [API_GROUP], "resources": ["projects", "queues", "schedulerconfigs"], "verbs": list(_READ)},
    )),
    # A member (aggregated into `edit`): submits PodGroups (and pods, by Kubernetes' own roles),
    # sees the queues. `use` of a queue its Project does not list is granted per queue.
    (MEMBER, {f"{_AGGREGATE}edit": "true"}, (
        {"apiGroups": [API_GROUP], "resources": ["podgroups"], "verbs": list(_WRITE)},
        {"apiGroups": [API_GROUP], "resources": ["projects", "queues"], "verbs": list(_READ)},
    )),
    # Read-only (aggregated into `view`).
    (VIEWER, {f"{_AGGREGATE}view": "true"}, (
        {"apiGroups": [API_GROUP], "resources": ["podgroups", "projects", "queues", "schedulerconfigs"],
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
    ANNOTATION_MPS_MEM_LIMIT,
)  # fmt: skip


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


def _any_guarded(obj: str) -> str:
    guarded = _cel_list(GUARDED_ANNOTATIONS)
    return f"has({obj}.metadata.annotations) && {guarded}.exists(k, k in {obj}.metadata.annotations)"


def controller_username(namespace: str, service_account: str) -> str:
    """The user name the API server gives the controller's service account."""
    return f"system:serviceaccount:{namespace}:{service_account}"


def policy_spec_template() -> dict[str, Any]:
    """The policy's spec without its first variable, ``controller`` (the controller's user name,
    which depends on the install): the chart's generated file."""
    submitted = f"variables.annotations['{ANNOTATION_SUBMITTED_BY}']"
    grant = f"variables.annotations['{ANNOTATION_QUEUE_GRANT}']"
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]},
        # Only pods that carry (or carried) one of the annotations are evaluated.
        "matchConditions": [{"name": "gpufleet-annotations", "expression":
                             f"({_any_guarded('object')}) || (request.operation == 'UPDATE' && "
                             f"{_any_guarded('oldObject')})"}],
        "variables": [
            {"name": "annotations",
             "expression": "has(object.metadata.annotations) ? object.metadata.annotations : {}"},
            {"name": "oldAnnotations",
             "expression": "request.operation == 'UPDATE' && has(oldObject.metadata.annotations)"
                           " ? oldObject.metadata.annotations : {}"},
            {"name": "guarded", "expression": _cel_list(GUARDED_ANNOTATIONS)},
        ],
        "validations": [
            {"expression": f"request.operation != 'CREATE' || !('{ANNOTATION_SUBMITTED_BY}' in variables.annotations)"
                           f" || {submitted} == request.userInfo.username",
             "messageExpression": f"'{ANNOTATION_SUBMITTED_BY} must be the creator ' + request.userInfo.username"
                                  f" + ', not ' + {submitted}",
             "reason": "Forbidden"},
            {"expression": f"request.operation != 'CREATE' || !('{ANNOTATION_QUEUE_GRANT}' in variables.annotations)"
                           f" || authorizer.group('{API_GROUP}').resource('queues').namespace(request.namespace)"
                           f".name({grant}).check('use').allowed()",
             "messageExpression": f"'{ANNOTATION_QUEUE_GRANT}: user ' + request.userInfo.username"
                                  f" + ' may not use queue ' + {grant}",
             "reason": "Forbidden"},
            {"expression": "request.operation != 'UPDATE' || request.userInfo.username == variables.controller"
                           " || variables.guarded.all(k,"
                           " (k in variables.annotations) == (k in variables.oldAnnotations)"
                           " && (!(k in variables.annotations)"
                           " || variables.annotations[k] == variables.oldAnnotations[k]))",
             "message": "only gpufleet's controller may set, change or remove the annotations "
                        f"{', '.join(GUARDED_ANNOTATIONS)} after creation",
             "reason": "Forbidden"},
        ],
    }  # fmt: skip


def policy_spec(controller: str) -> dict[str, Any]:
    """The whole spec of the policy, for the controller's user name ``controller``."""
    spec = policy_spec_template()
    spec["variables"] = [{"name": "controller", "expression": f"'{controller}'"}, *spec["variables"]]
    return spec


# --- the tenancy webhook ------------------------------------------------------------------------

TENANCY_WEBHOOK_NAME = f"tenancy.{API_GROUP}"
VALIDATE_PATH = "/validate"
# Pods of gpufleet's, and every PodGroup.
TENANCY_WEBHOOK_MATCH = (
    "request.resource.resource != 'pods'"
    f" || (has(object.spec.schedulerName) && object.spec.schedulerName == '{SCHEDULER_NAME}')"
)


def tenancy_webhook(service: dict[str, Any], namespace_selector: dict[str, Any],
                    failure_policy: str = "Fail", timeout: int = 5) -> dict[str, Any]:
    """The tenancy entry of the ValidatingWebhookConfiguration: pods and PodGroups at creation."""
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
        ],
        "namespaceSelector": namespace_selector,
        "matchConditions": [{"name": "gpufleet-pod-or-podgroup", "expression": TENANCY_WEBHOOK_MATCH}],
    }  # fmt: skip


# The tenancy entry of the MutatingWebhookConfiguration (/mutate writes submitted-by and queue-grant):
# every PodGroup, and pods of gpufleet's but the fractional ones at creation, which the fractional
# entry (its own failurePolicy) already sends to the same /mutate; their ephemeral containers too.
_OURS = f"has(object.spec.schedulerName) && object.spec.schedulerName == '{SCHEDULER_NAME}'"
_FRACTIONAL = (
    "has(object.metadata.annotations)"
    f" && ('{ANNOTATION_GPU_BLOCKS}' in object.metadata.annotations"
    f" || '{ANNOTATION_GPU_MEMORY}' in object.metadata.annotations)"
)
TENANCY_MUTATE_MATCH = (
    f"request.resource.resource != 'pods' || ({_OURS}"
    f" && (request.subResource == 'ephemeralcontainers' || !({_FRACTIONAL})))"
)


def tenancy_mutating_webhook(service: dict[str, Any], namespace_selector: dict[str, Any],
                             failure_policy: str = "Fail", timeout: int = 5) -> dict[str, Any]:
    """The tenancy entry of the MutatingWebhookConfiguration: pods and PodGroups at creation, and
    ``pods/ephemeralcontainers`` updates, on ``/mutate``."""
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
        ],
        "namespaceSelector": namespace_selector,
        "matchConditions": [{"name": "gpufleet-pod-or-podgroup", "expression": TENANCY_MUTATE_MATCH}],
    }  # fmt: skip
