"""The mutating admission webhook: ``admission.k8s.io/v1`` AdmissionReview in, AdmissionReview out.

:func:`review` is the whole decision as a pure function of the request body (the HTTP server in
:mod:`gpufleet.kube.webhook.server` only moves bytes). For a fractional pod of gpufleet's the
response carries a base64 JSONPatch from the admitted pod to the one
:func:`~gpufleet.kube.webhook.mutation.mutate_pod` wants; every other object is allowed unchanged.

Failure behaviour (documented in ``docs/fractional-gpus.md``):

- a pod whose ``gpu-blocks``/``gpu-memory`` annotations gpufleet rejects (not 1..100, not a memory
  quantity, combined with an ``nvidia.com/gpu`` request) is **denied** with the loader's message:
  the scheduler could never place it, and saying so at ``kubectl apply`` beats a pod pending forever;
- any other oddity of the pod is **allowed** with a warning (the webhook never blocks a pod for a
  field it does not own);
- a body that is not an AdmissionReview raises :class:`ReviewError` (HTTP 400); the API server then
  applies the webhook's ``failurePolicy``.

Tenancy (docs/semantics-notes.md, "Admission"): with a :class:`Tenancy` (what the webhook knows of
the cluster, and who may use which queue), every pod of gpufleet's and every PodGroup is checked
at creation by :func:`gpufleet.policy.admit_pod` / :func:`~gpufleet.policy.admit_pod_group`; a
refusal answers ``allowed: false`` with code 403 and the rule's message. An admitted pod gets
``gpufleet.dev/submitted-by`` (the request's user, whatever the pod said) and, when only the
creator's RBAC grant allows its queue, ``gpufleet.dev/queue-grant`` (any other value is removed),
in the same JSONPatch as the fractional wiring. Workloads (Job, CronJob, Deployment, ReplicaSet,
StatefulSet) get the same checks and stamps on their pod template at creation, and when an update
changes the template; what a trusted controller (``Tenancy.trusted``) creates keeps the stamps
copied from its template. Without one, fractional pods that preset a
scheduler-owned annotation or ``spec.nodeName`` are still refused (the wiring would trust them).

GPU visibility (:mod:`gpufleet.kube.webhook.visibility`): every pod the webhook sees, gpufleet's or
not, at creation, at an update of its annotations and at an update of its ephemeral containers, is
refused (403) when it sets GPU visibility itself (an NVIDIA env var, a device-list mount, a CDI
annotation, a hostPath that reaches the GPUs or the MPS daemons, a ``gpufleet.dev/mps-share`` it was
not given), before any other check.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonpatch

from gpufleet.adapters import FieldError, pod_group_from_dict
from gpufleet.domain import API_GROUP
from gpufleet.domain.wire import LABEL_POD_GROUP
from gpufleet.kube.webhook.mutation import MutationSettings, is_fractional_pod_of_ours, mutate_pod
from gpufleet.kube.webhook.visibility import visibility_denial
from gpufleet.policy import AccessReviewer, Admission, AdmissionContext, Denial, admit_pod, admit_pod_group
from gpufleet.policy.admission import (
    DEFAULT_TRUSTED_CONTROLLERS,
    WORKLOAD_KINDS,
    admit_claim,
    admit_ephemeral_containers,
    admit_workload,
    is_pod_of_ours,
    preset_denial,
    workload_template,
)

__all__ = [
    "ADMISSION_API_VERSION",
    "ReviewError",
    "Tenancy",
    "decode",
    "review",
    "review_bytes",
    "wanted_pod_group",
]

ADMISSION_API_VERSION = "admission.k8s.io/v1"
_MAX_WARNING = 256  # the API server may truncate longer warnings

log = logging.getLogger("gpufleet.webhook")


class ReviewError(ValueError):
    """The request body is not an AdmissionReview the webhook can answer (one line)."""


def _request_of(body: object) -> Mapping[str, Any]:
    if not isinstance(body, dict):
        raise ReviewError("body: expected an AdmissionReview object")
    if body.get("apiVersion") != ADMISSION_API_VERSION or body.get("kind") != "AdmissionReview":
        raise ReviewError(
            f"body: expected apiVersion {ADMISSION_API_VERSION} and kind AdmissionReview, "
            f"got {body.get('apiVersion')!r} {body.get('kind')!r}"
        )
    request = body.get("request")
    if not isinstance(request, dict):
        raise ReviewError("request: required AdmissionRequest missing")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request.uid: required string missing")
    return request


@dataclass(frozen=True)
class Tenancy:
    """What the tenancy checks read: the cluster as the webhook knows it, and, per request (from
    its ``userInfo``), who may use which queue."""

    context: AdmissionContext
    reviewer_for: Callable[[Mapping[str, Any]], AccessReviewer]
    # Workload controllers whose objects keep the stamps copied from their template.
    trusted: frozenset[str] = frozenset(DEFAULT_TRUSTED_CONTROLLERS)


def _is_create(request: Mapping[str, Any], group: str, kind_name: str) -> bool:
    kind = request.get("kind")
    return (
        isinstance(kind, dict)
        and kind.get("group", "") == group
        and kind.get("kind") == kind_name
        and not request.get("subResource")
        and request.get("operation") == "CREATE"
    )


def _is_ephemeral_update(request: Mapping[str, Any]) -> bool:
    kind = request.get("kind")
    return (isinstance(kind, dict) and kind.get("group", "") == "" and kind.get("kind") == "Pod"
            and request.get("subResource") == "ephemeralcontainers" and request.get("operation") == "UPDATE")


def _is_pod(request: Mapping[str, Any]) -> bool:
    kind = request.get("kind")
    return isinstance(kind, dict) and kind.get("group", "") == "" and kind.get("kind") == "Pod"


def _is_pod_create(request: Mapping[str, Any]) -> bool:
    return _is_create(request, "", "Pod")


def _user(request: Mapping[str, Any]) -> tuple[Mapping[str, Any], str, tuple[str, ...]]:
    info = request.get("userInfo")
    info = info if isinstance(info, dict) else {}
    name = info.get("username")
    groups = info.get("groups")
    return (info, name if isinstance(name, str) else "",
            tuple(g for g in groups if isinstance(g, str)) if isinstance(groups, list) else ())


def _deny(response: dict[str, Any], code: int, reason: str, message: str) -> None:
    response["allowed"] = False
    response["status"] = {"status": "Failure", "code": code, "reason": reason, "message": message}


def _annotation_ops(pod: Mapping[str, Any], changes: Mapping[str, str | None],
                    base: str = "") -> list[dict[str, Any]]:
    """JSONPatch operations that give ``pod`` the annotations ``changes`` asks (None: removed);
    ``base``: the JSON pointer of ``pod`` in the admitted object (a workload's pod template)."""
    meta = pod.get("metadata")
    wanted = {k: v for k, v in changes.items() if v is not None}
    if not isinstance(meta, dict):
        return [{"op": "add", "path": f"{base}/metadata", "value": {"annotations": wanted}}] if wanted else []
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        return [{"op": "add", "path": f"{base}/metadata/annotations", "value": wanted}] if wanted else []
    ops: list[dict[str, Any]] = []
    for key, value in changes.items():
        path = f"{base}/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
        if value is None:
            if key in annotations:
                ops.append({"op": "remove", "path": path})
        elif annotations.get(key) != value:
            ops.append({"op": "replace" if key in annotations else "add", "path": path, "value": value})
    return ops


def wanted_pod_group(body: object) -> tuple[str, str] | None:
    """(namespace, name) of the PodGroup a pod being created names, if any: the server reads it
    when its cache does not have it yet (a PodGroup created just before its pods)."""
    request = body.get("request") if isinstance(body, dict) else None
    if not isinstance(request, dict) or not _is_pod_create(request):
        return None
    pod = request.get("object")
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    group = labels.get(LABEL_POD_GROUP) if isinstance(labels, dict) else None
    namespace = request.get("namespace") or (meta.get("namespace") if isinstance(meta, dict) else None)
    if not isinstance(group, str) or not group or not isinstance(namespace, str) or not namespace:
        return None
    return namespace, group


def _review_pod_group(request: Mapping[str, Any], response: dict[str, Any], tenancy: Tenancy) -> None:
    obj = request.get("object")
    if not isinstance(obj, dict):
        return
    namespace = request.get("namespace")
    meta = obj.get("metadata")
    meta = dict(meta) if isinstance(meta, dict) else {}
    if isinstance(namespace, str) and namespace:
        meta["namespace"] = namespace
    try:
        group = pod_group_from_dict({**obj, "metadata": meta})
    except FieldError:
        return  # its CRD schema refuses it; nothing of tenancy to say
    info, user, groups = _user(request)
    decision = admit_pod_group(group, user, groups, tenancy.context, tenancy.reviewer_for(info))
    if isinstance(decision, Denial):
        log.info("denied PodGroup %s (%s): %s", group.key, decision.rule, decision.message)
        _deny(response, 403, "Forbidden", decision.message)


def _pod_name(request: Mapping[str, Any], pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name") or f"{meta.get('generateName') or ''}<generated>"
    namespace = request.get("namespace") or meta.get("namespace") or "default"
    return f"{namespace}/{name}"


def _short(line: str) -> str:
    return line if len(line) <= _MAX_WARNING else line[: _MAX_WARNING - 3] + "..."


def _stamp_problem(pod: Mapping[str, Any], changes: Mapping[str, str | None]) -> str | None:
    """In validation: the webhook's annotations are not as its mutation writes them (a later
    mutating webhook changed them, or the mutation did not run)."""
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    annotations = annotations if isinstance(annotations, dict) else {}
    for key, value in changes.items():
        got = annotations.get(key)
        if got == value:
            continue
        wanted, shown = (json.dumps(v) if v is not None else "absent" for v in (value, got))
        return f"annotation {key} must be {wanted} (gpufleet's mutating webhook writes it), got {shown}"
    return None


def _workload_kind(request: Mapping[str, Any]) -> tuple[str, str] | None:
    """(group, kind) of a workload of ours to check: created or updated, not a subresource."""
    kind = request.get("kind")
    if not isinstance(kind, dict) or request.get("subResource") or request.get("operation") not in ("CREATE", "UPDATE"):
        return None
    key = (str(kind.get("group", "")), str(kind.get("kind", "")))
    return key if key in WORKLOAD_KINDS else None


def _review_workload(request: Mapping[str, Any], response: dict[str, Any], tenancy: Tenancy,
                     kind: tuple[str, str], validate: bool) -> None:
    """A Job, CronJob, Deployment, ReplicaSet or StatefulSet: the pod rules on its template and the
    stamps on it (docs/semantics-notes.md, "Admission", "Workloads")."""
    obj = request.get("object")
    if not isinstance(obj, dict):
        return
    info, user, groups = _user(request)
    trusted = user in tenancy.trusted
    group, name = kind
    template = workload_template(obj, group, name)
    if request.get("operation") == "UPDATE":
        old = request.get("oldObject")
        old_template = workload_template(old, group, name) if isinstance(old, dict) else None
        if trusted or template == old_template:
            return  # the template (stamps included) is as it was: its pods' submitter stays
    namespace = request.get("namespace")
    namespace = namespace if isinstance(namespace, str) and namespace else "default"
    decision = admit_workload(obj, group, name, namespace, user, groups, tenancy.context,
                              tenancy.reviewer_for(info), trusted=trusted)
    shown = f"{name} {namespace}/{_dict_get(obj, 'metadata', 'name') or '<generated>'}"
    if isinstance(decision, Denial):
        log.info("denied %s (%s): %s", shown, decision.rule, decision.message)
        _deny(response, 403, "Forbidden", decision.message)
        return
    if template is None or not decision.checked:
        return
    if validate:
        problem = _stamp_problem(template, decision.annotations)
        if problem is not None:
            log.info("denied %s (stamp): %s", shown, problem)
            _deny(response, 403, "Forbidden", problem)
        return
    base = "/" + "/".join(WORKLOAD_KINDS[kind])
    operations = _annotation_ops(template, decision.annotations, base)
    if operations:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(operations).encode("utf-8")).decode("ascii")


def _dict_get(obj: Mapping[str, Any], *keys: str) -> object:
    node: object = obj
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def review(body: object, settings: MutationSettings, tenancy: Tenancy | None = None,
           *, validate: bool = False) -> dict[str, Any]:
    """The AdmissionReview response to an AdmissionReview request (raises :class:`ReviewError`).

    ``validate``: the validating pass (``/validate``), on the object as every mutating webhook left
    it: the same checks, no patch, and the webhook's annotations must be what its mutation writes."""
    request = _request_of(body)
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    envelope = {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}
    if _is_pod(request):
        obj = request.get("object")
        visibility = visibility_denial(request, isinstance(obj, dict) and is_fractional_pod_of_ours(obj),
                                       settings.mps_host_dir)
        if visibility is not None:
            log.info("denied pod %s (gpu visibility): %s", _pod_name(request, obj if isinstance(obj, dict) else {}),
                     visibility)
            _deny(response, 403, "Forbidden", visibility)
            return envelope
    if tenancy is not None and _is_create(request, API_GROUP, "PodGroup"):
        _review_pod_group(request, response, tenancy)
        return envelope
    if tenancy is not None and _is_ephemeral_update(request):
        obj, namespace = request.get("object"), request.get("namespace")
        if isinstance(obj, dict) and isinstance(namespace, str):
            denial = admit_ephemeral_containers(obj, namespace, tenancy.context)
            if denial is not None:
                _deny(response, 403, "Forbidden", denial.message)
        return envelope
    if tenancy is not None and _is_create(request, "", "PersistentVolumeClaim"):
        claim, namespace = request.get("object"), request.get("namespace")
        if isinstance(claim, dict) and isinstance(namespace, str):
            verdict = admit_claim(claim, namespace, tenancy.context)
            if isinstance(verdict, Denial):
                log.info("denied claim %s/%s (%s): %s", namespace, request.get("name"), verdict.rule, verdict.message)
                _deny(response, 403, "Forbidden", verdict.message)
        return envelope
    workload = _workload_kind(request) if tenancy is not None else None
    if tenancy is not None and workload is not None:
        _review_workload(request, response, tenancy, workload, validate)
        return envelope
    if not _is_pod_create(request):
        return envelope
    pod = request.get("object")
    if not isinstance(pod, dict):
        response["warnings"] = ["gpufleet webhook: the admitted Pod has no object; left unchanged"]
        return envelope
    namespace = request.get("namespace")
    meta = pod.get("metadata")
    if not isinstance(namespace, str) or not namespace:
        namespace = meta.get("namespace") if isinstance(meta, dict) else None
    mutation = mutate_pod(pod, settings, namespace=namespace if isinstance(namespace, str) else None)
    name = _pod_name(request, pod)
    if mutation.denial is not None:
        log.info("denied pod %s: %s", name, mutation.denial)
        _deny(response, 422, "Invalid", f"gpufleet: {mutation.denial}")
        return envelope
    decision: Admission | Denial | None = None
    if tenancy is not None and is_pod_of_ours(pod):
        info, user, groups = _user(request)
        decision = admit_pod(pod, namespace if isinstance(namespace, str) and namespace else "default",
                             user, groups, tenancy.context, tenancy.reviewer_for(info),
                             trusted=user in tenancy.trusted)
    elif mutation.fractional:
        decision = preset_denial(pod)
    if isinstance(decision, Denial):
        log.info("denied pod %s (%s): %s", name, decision.rule, decision.message)
        _deny(response, 403, "Forbidden", decision.message)
        return envelope
    if mutation.warnings:
        response["warnings"] = [_short(f"gpufleet: {w}") for w in mutation.warnings]
    if validate:
        problem = _stamp_problem(pod, decision.annotations) if decision is not None else None
        if problem is not None:
            log.info("denied pod %s (stamp): %s", name, problem)
            _deny(response, 403, "Forbidden", problem)
        return envelope
    operations = [] if mutation.pod is pod else jsonpatch.make_patch(pod, dict(mutation.pod)).patch
    if decision is not None:
        operations.extend(_annotation_ops(pod, decision.annotations))
    if operations:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(operations).encode("utf-8")).decode("ascii")
    if mutation.fractional or operations:
        log.debug("admitted pod %s: %d patch operations", name, len(operations))
    return envelope


def decode(raw: bytes) -> object:
    """The JSON of a raw HTTP body; undecodable JSON is a :class:`ReviewError`."""
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReviewError(f"body: not JSON ({err})") from None


def review_bytes(raw: bytes, settings: MutationSettings, tenancy: Tenancy | None = None) -> dict[str, Any]:
    """:func:`review` of a raw HTTP body; undecodable JSON is a :class:`ReviewError` too."""
    return review(decode(raw), settings, tenancy)
