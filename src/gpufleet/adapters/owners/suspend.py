"""The virtual pods of a suspended owner (docs/semantics-notes.md, "Admission by suspension"): pod
objects built from the owner's own pod templates, as its operator would create them once unsuspended,
for the controller to show the engine as a pending gang. They are never written to the API server."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gpufleet.adapters.owners.kubeflow import RuntimeLookup, trainjob_templates
from gpufleet.domain import LABEL_POD_GROUP
from gpufleet.policy.grouping import GangUnit, GroupPlan, Owner, virtual_gang

__all__ = ["virtual_pods"]

JsonDict = dict[str, Any]


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _role_templates(obj: Mapping[str, Any], owner: Owner,
                    runtimes: RuntimeLookup | None) -> Mapping[str, Mapping[str, Any]]:
    """Each role's raw pod template, by the role names the owner readers give (batch.py, ray.py,
    kubeflow.py)."""
    kind, spec = obj.get("kind"), _dict(obj.get("spec"))
    if kind == "TrainJob":  # in its runtime
        return trainjob_templates(owner.ref, spec, runtimes) if runtimes is not None else {}
    if kind == "Job":
        return {"job": _dict(spec.get("template"))}
    if kind == "JobSet":
        return {str(rj.get("name")): _dict(_dict(_dict(rj.get("template")).get("spec")).get("template"))
                for rj in map(_dict, _list(spec.get("replicatedJobs")))}
    if kind == "RayJob":
        cluster = _dict(spec.get("rayClusterSpec"))
        out = {"head": _dict(_dict(cluster.get("headGroupSpec")).get("template"))}
        for group in map(_dict, _list(cluster.get("workerGroupSpecs"))):
            out[str(group.get("groupName"))] = _dict(group.get("template"))
        return out
    return {}


def virtual_pods(obj: Mapping[str, Any], owner: Owner, plan: GroupPlan,
                 runtimes: RuntimeLookup | None = None) -> tuple[JsonDict, ...]:
    """The virtual pods of one gang of a suspended owner ``obj`` (read as ``owner``, its gang
    ``plan``): for each role of the gang, ``max_pods`` copies of the role's template, named as
    :func:`~gpufleet.policy.grouping.virtual_gang` names them, labelled with the gang's group. A
    TrainJob's template is its runtime's (found through ``runtimes``). Empty when a role's template
    is not found: such an owner is never admitted."""
    templates = _role_templates(obj, owner, runtimes)
    # Every role of the gang (plan.member_roles names pod labels, not roles: a RayJob's worker groups
    # are all "worker" pods; its submitter is no role). One role per gang when grouped per role.
    roles = [role for role in owner.roles if owner.unit is not GangUnit.ROLE or role.name == plan.unit]
    if any(role.name not in templates for role in roles):
        return ()
    names = iter(virtual_gang(plan).pods)
    out: list[JsonDict] = []
    for role in roles:
        template = templates[role.name]
        meta = _dict(template.get("metadata"))
        for _ in range(role.max_pods):
            name = next(names, None)
            if name is None:
                return tuple(out)
            out.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": name, "namespace": plan.owner.namespace,
                    "labels": {**_dict(meta.get("labels")), LABEL_POD_GROUP: plan.name},
                    "annotations": dict(_dict(meta.get("annotations"))),
                },
                "spec": copy.deepcopy(dict(_dict(template.get("spec")))),
                "status": {"phase": "Pending"},
            })
    return tuple(out)
