"""What installs the GPU-visibility admission (docs/fractional-gpus.md, "Who may choose GPUs"): the
ValidatingWebhookConfiguration ``<release>-webhook-gpu-visibility`` whose entry
``gpu-visibility.gpufleet.dev`` sends pods of every scheduler to the webhook's ``/validate``, where
:mod:`gpufleet.kube.webhook.visibility` refuses the ones that set GPU visibility themselves.

failurePolicy Fail (a pod that names its own GPUs must not be created while the webhook is down), so
CEL ``matchConditions`` keep the load low: only pods that carry one of the fields the webhook checks
are sent (a visibility env var in any container, a volume mount whose path mentions
``nvidia-container-devices``, any hostPath volume, a ``gpufleet.dev/mps-share`` resource, a
``cdi.k8s.io/`` annotation, a scheduler-owned annotation at creation), never every pod of the
cluster. kube-system, the release's namespace and the namespaces of NVIDIA's own operator and
plugins (:data:`NVIDIA_NAMESPACES`, chart ``webhook.gpuVisibility.excludeNamespaces``), whose pods set
these fields by design, are not seen.

Data and builders only: :mod:`gpufleet.kube.install.manifests` puts the object into ``gpufleet
manifests --webhook``; the chart writes the same one (a test compares them).
"""

from __future__ import annotations

from typing import Any

from gpufleet.domain.wire import API_GROUP, RESOURCE_MPS_SHARE, SCHEDULER_NAME
from gpufleet.kube.webhook.visibility import CDI_ANNOTATION_PREFIX, SCHEDULER_OWNED_ANNOTATIONS, VISIBILITY_ENV_VARS

__all__ = [
    "NVIDIA_NAMESPACES",
    "VISIBILITY_CONFIGURATION_SUFFIX",
    "VISIBILITY_MATCH",
    "VISIBILITY_WEBHOOK_NAME",
    "visibility_chart_file",
    "visibility_webhook",
]

VISIBILITY_WEBHOOK_NAME = f"gpu-visibility.{API_GROUP}"
VISIBILITY_CONFIGURATION_SUFFIX = "gpu-visibility"  # <release>-webhook-gpu-visibility
# Where NVIDIA's GPU operator, device plugin and DRA driver run by default: their pods mount the
# device nodes and set NVIDIA_VISIBLE_DEVICES on purpose.
NVIDIA_NAMESPACES = ("gpu-operator", "nvidia-gpu-operator", "nvidia-device-plugin", "nvidia-dra-driver-gpu")

_OWNED = "[" + ", ".join(f"'{key}'" for key in SCHEDULER_OWNED_ANNOTATIONS) + "]"
_ENV_NAMES = "[" + ", ".join(f"'{name}'" for name in VISIBILITY_ENV_VARS) + "]"


def _container_match(section: str) -> str:
    """CEL: a container of ``section`` has a field the webhook checks."""
    return (f"(has(object.spec.{section}) && object.spec.{section}.exists(c,"
            f" (has(c.env) && c.env.exists(e, e.name in {_ENV_NAMES}))"
            " || (has(c.volumeMounts) && c.volumeMounts.exists(m, m.mountPath.contains('nvidia-container-devices')))"
            f" || (has(c.resources) && ((has(c.resources.limits) && '{RESOURCE_MPS_SHARE}' in c.resources.limits)"
            f" || (has(c.resources.requests) && '{RESOURCE_MPS_SHARE}' in c.resources.requests)))))")


VISIBILITY_MATCH = (
    "(has(object.metadata.annotations)"
    f" && object.metadata.annotations.exists(k, k.startsWith('{CDI_ANNOTATION_PREFIX}')))"
    " || (request.operation == 'CREATE' && ((has(object.spec.volumes)"
    " && object.spec.volumes.exists(v, has(v.hostPath)))"
    f" || {_container_match('initContainers')} || {_container_match('containers')}"
    f" || (has(object.metadata.annotations) && {_OWNED}.exists(k, k in object.metadata.annotations))"
    f" || (has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0"
    f" && (!has(object.spec.schedulerName) || object.spec.schedulerName != '{SCHEDULER_NAME}'))))"
    f" || (request.subResource == 'ephemeralcontainers' && {_container_match('ephemeralContainers')})"
)


def visibility_webhook(service: dict[str, Any], excluded: tuple[str, ...], failure_policy: str = "Fail",
                       timeout: int = 5) -> dict[str, Any]:
    """The entry: pods at creation and update (CDI annotations), and ephemeral containers, of
    every namespace but ``excluded``."""
    return {
        "name": VISIBILITY_WEBHOOK_NAME,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": failure_policy,
        "timeoutSeconds": timeout,
        "clientConfig": {"service": {**service, "path": "/validate", "port": 443}},
        "rules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"],
             "scope": "Namespaced"},
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
             "resources": ["pods/ephemeralcontainers"], "scope": "Namespaced"},
        ],
        "namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(excluded)}]},
        "matchConditions": [{"name": "gpu-visibility-fields", "expression": VISIBILITY_MATCH}],
    }  # fmt: skip


def visibility_chart_file() -> dict[str, Any]:
    """What the chart reads from ``files/webhook/gpu-visibility.yaml`` (generated): the entry's
    rules and matchConditions; the template adds the service, namespaces and failurePolicy."""
    entry = visibility_webhook({}, ())
    return {"rules": entry["rules"], "matchConditions": entry["matchConditions"]}
