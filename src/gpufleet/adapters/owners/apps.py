"""leaderworkerset.x-k8s.io/v1 LeaderWorkerSet (a gang per group) and apps/v1 Deployment and
StatefulSet (a gang per pod)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.adapters.owners._base import Count, Foreign, Meta, PodTemplateModel, template_of, validate_spec
from gpufleet.policy.grouping import GangUnit, Owner, OwnerRef, Role

__all__ = ["read_leaderworkerset", "read_replicated"]


class _LeaderWorkerTemplate(Foreign):
    size: Count = 1
    leaderTemplate: PodTemplateModel | None = None  # none: the leader uses the worker template
    workerTemplate: PodTemplateModel


class LeaderWorkerSetSpec(Foreign):
    replicas: Count = 1
    leaderWorkerTemplate: _LeaderWorkerTemplate


def read_leaderworkerset(ref: OwnerRef, meta: Meta, spec: Mapping[str, Any]) -> Owner:
    lws = validate_spec(LeaderWorkerSetSpec, spec)
    lwt = lws.leaderWorkerTemplate
    leader = template_of(lwt.leaderTemplate or lwt.workerTemplate)
    roles: tuple[Role, ...] = (Role("leader", 1, leader),)
    if lwt.size > 1:
        roles += (Role("worker", lwt.size - 1, template_of(lwt.workerTemplate)),)
    return Owner(ref, meta.labels, meta.annotations, roles, GangUnit.REPLICA, replica_count=lws.replicas)


class ReplicatedSpec(Foreign):
    replicas: Count = 1
    template: PodTemplateModel = PodTemplateModel()


def read_replicated(ref: OwnerRef, meta: Meta, spec: Mapping[str, Any]) -> Owner:
    """A Deployment or a StatefulSet: each pod its own gang."""
    workload = validate_spec(ReplicatedSpec, spec)
    return Owner(ref, meta.labels, meta.annotations, (Role("pod", workload.replicas, template_of(workload.template)),),
                 GangUnit.POD)
