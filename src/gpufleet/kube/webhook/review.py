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
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping
from typing import Any

import jsonpatch

from gpufleet.kube.webhook.mutation import MutationSettings, mutate_pod

__all__ = ["ADMISSION_API_VERSION", "ReviewError", "review", "review_bytes"]

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


def _is_pod_create(request: Mapping[str, Any]) -> bool:
    kind = request.get("kind")
    return (
        isinstance(kind, dict)
        and kind.get("group", "") == ""
        and kind.get("kind") == "Pod"
        and not request.get("subResource")
        and request.get("operation") == "CREATE"
    )


def _pod_name(request: Mapping[str, Any], pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name = meta.get("name") or f"{meta.get('generateName') or ''}<generated>"
    namespace = request.get("namespace") or meta.get("namespace") or "default"
    return f"{namespace}/{name}"


def _short(line: str) -> str:
    return line if len(line) <= _MAX_WARNING else line[: _MAX_WARNING - 3] + "..."


def review(body: object, settings: MutationSettings) -> dict[str, Any]:
    """The AdmissionReview response to an AdmissionReview request (raises :class:`ReviewError`)."""
    request = _request_of(body)
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    envelope = {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}
    if not _is_pod_create(request):
        return envelope
    pod = request.get("object")
    if not isinstance(pod, dict):
        response["warnings"] = ["gpufleet webhook: the admitted Pod has no object; left unchanged"]
        return envelope
    namespace = request.get("namespace")
    mutation = mutate_pod(pod, settings, namespace=namespace if isinstance(namespace, str) else None)
    name = _pod_name(request, pod)
    if mutation.denial is not None:
        log.info("denied pod %s: %s", name, mutation.denial)
        response["allowed"] = False
        response["status"] = {
            "status": "Failure",
            "code": 422,
            "reason": "Invalid",
            "message": f"gpufleet: {mutation.denial}",
        }
        return envelope
    if mutation.warnings:
        response["warnings"] = [_short(f"gpufleet: {w}") for w in mutation.warnings]
    if mutation.pod is pod:
        return envelope
    operations = jsonpatch.make_patch(pod, dict(mutation.pod)).patch
    if operations:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(operations).encode("utf-8")).decode("ascii")
    log.info("admitted fractional pod %s: %d patch operations", name, len(operations))
    return envelope


def review_bytes(raw: bytes, settings: MutationSettings) -> dict[str, Any]:
    """:func:`review` of a raw HTTP body; undecodable JSON is a :class:`ReviewError` too."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReviewError(f"body: not JSON ({err})") from None
    return review(body, settings)
