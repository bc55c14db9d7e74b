"""Workload owners read from their Kubernetes objects (dicts, as the API server or a YAML file gives
them) into :class:`gpufleet.policy.grouping.Owner`, one reader per kind, one module per kind family
(docs/semantics-notes.md, "Workload owners and their gangs"). The grouping rules themselves are pure
(``gpufleet.policy.grouping``); this is their edge."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from gpufleet.adapters._fields import FieldError
from gpufleet.adapters._k8s_models import _message, loc_path
from gpufleet.adapters.errors import InputError
from gpufleet.adapters.owners._base import Meta, OwnerReader
from gpufleet.adapters.owners.apps import read_leaderworkerset, read_replicated
from gpufleet.adapters.owners.batch import read_job, read_jobset
from gpufleet.adapters.owners.kubeflow import (
    RuntimeLookup,
    RuntimeRef,
    read_mpijob,
    read_pytorchjob,
    read_trainjob,
    runtime_of,
    runtime_ref,
)
from gpufleet.adapters.owners.ray import read_raycluster, read_rayjob
from gpufleet.adapters.owners.suspend import virtual_pods
from gpufleet.policy.grouping import (
    KINDS,
    SUSPENDABLE_KINDS,
    GroupProblem,
    ObjectLink,
    Owner,
    OwnerRef,
    group_name,
    kind_rule,
)

__all__ = [
    "READERS", "UNSUSPEND_PATCH", "RuntimeLookup", "RuntimeRef", "is_suspended", "link_from_dict",
    "owner_from_dict", "read_owner", "runtime_of", "runtime_ref", "virtual_pods",
]

# The merge patch that admits a suspended owner: every suspendable kind keeps the flag at spec.suspend.
UNSUSPEND_PATCH: Mapping[str, Any] = {"spec": {"suspend": False}}

READERS: Mapping[tuple[str, str], OwnerReader] = {
    ("batch", "Job"): read_job,
    ("jobset.x-k8s.io", "JobSet"): read_jobset,
    ("kubeflow.org", "PyTorchJob"): read_pytorchjob,
    ("kubeflow.org", "MPIJob"): read_mpijob,
    ("trainer.kubeflow.org", "TrainJob"): read_trainjob,
    ("ray.io", "RayCluster"): read_raycluster,
    ("ray.io", "RayJob"): read_rayjob,
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): read_leaderworkerset,
    ("apps", "Deployment"): read_replicated,
    ("apps", "StatefulSet"): read_replicated,
}
assert READERS.keys() == KINDS.keys(), "a reader for every kind the rules know"


def _meta(obj: Mapping[str, Any]) -> Meta:
    try:
        return Meta.model_validate(obj.get("metadata") or {})
    except PydanticValidationError as err:
        first = err.errors(include_url=False)[0]
        raise FieldError(loc_path(first["loc"], "metadata"), _message(first)) from None


def _ref(obj: Mapping[str, Any], meta: Meta) -> OwnerRef:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise InputError(f"{meta.namespace}/{meta.name}: apiVersion and kind: must be strings")
    return OwnerRef(api_version, kind, meta.namespace, meta.name, meta.uid)


def owner_from_dict(obj: Mapping[str, Any]) -> Owner:
    """An owner object read; :class:`InputError` (one line naming the owner and the field) when it is
    not an owner kind gpufleet groups at this apiVersion, or a field read is bad."""
    owner = read_owner(obj)
    if isinstance(owner, GroupProblem):
        raise InputError(owner.reason)
    return owner


def read_owner(obj: Mapping[str, Any], runtimes: RuntimeLookup | None = None) -> Owner | GroupProblem:
    """As :func:`owner_from_dict`, a bad field given as a :class:`GroupProblem` (the controller's
    warning and pending reason) that still names the whole-owner group, so that the pods of an owner
    of one gang wait for a fix instead of starting one by one. Raises :class:`InputError` only for an
    object that is no owner gpufleet groups (its metadata unreadable, or another kind or version).
    ``runtimes``: how a TrainJob's runtime is found (its pod template and node count are there)."""
    meta = _meta_or_raise(obj)
    ref = _ref(obj, meta)
    rule = kind_rule(ref.api_version, ref.kind)
    if rule is None:
        raise InputError(f"{ref}: {ref.api_version} {ref.kind} is not an owner kind gpufleet groups")
    try:
        spec = obj.get("spec") or {}
        if ref.kind == "TrainJob":
            return read_trainjob(ref, meta, spec, runtimes)
        return READERS[(ref.api_group, ref.kind)](ref, meta, spec)
    except FieldError as err:
        whole = ref.kind not in ("LeaderWorkerSet", "Deployment", "StatefulSet")
        names = (group_name(rule.short, ref),) if whole else ()
        return GroupProblem(ref, f"{ref}: {err}", names)


def _meta_or_raise(obj: Mapping[str, Any]) -> Meta:
    try:
        return _meta(obj)
    except FieldError as err:
        raise InputError(f"{obj.get('kind', 'object')}: {err}") from None


def link_from_dict(obj: Mapping[str, Any]) -> ObjectLink:
    """Any namespaced object (a pod, a Job, a ReplicaSet) as a link of an owner-reference chain."""
    meta = _meta_or_raise(obj)
    controller = next((ref.uid for ref in meta.ownerReferences if ref.controller), None)
    return ObjectLink(str(obj.get("apiVersion", "")), str(obj.get("kind", "")), meta.namespace, meta.name,
                      meta.uid, controller, meta.labels)


def is_suspended(obj: Mapping[str, Any]) -> bool:
    """Whether an owner object is of a suspendable kind (docs/semantics-notes.md, "Admission by
    suspension") and has ``spec.suspend: true``; anything else (another kind, no spec, a value that is
    not the boolean true) is not suspended, so gpufleet never unsuspends what it cannot read as such."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return False
    if (api_version.rpartition("/")[0], kind) not in SUSPENDABLE_KINDS:
        return False
    spec = obj.get("spec")
    return isinstance(spec, Mapping) and spec.get("suspend") is True
