"""KubeRay: ray.io/v1 RayCluster and RayJob (whose cluster is its spec.rayClusterSpec)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from gpufleet.adapters.owners._base import (
    Count,
    Foreign,
    Meta,
    PodTemplateModel,
    StrictBool,
    StrictStr,
    template_of,
    validate_spec,
)
from gpufleet.policy.grouping import Owner, OwnerRef, Role

__all__ = ["read_raycluster", "read_rayjob"]


class _HeadGroup(Foreign):
    template: PodTemplateModel = PodTemplateModel()


class _WorkerGroup(Foreign):
    groupName: StrictStr
    replicas: Count | None = None  # KubeRay: minReplicas when absent
    minReplicas: Count = 0
    maxReplicas: Count | None = None
    numOfHosts: Count = 1
    template: PodTemplateModel = PodTemplateModel()


class RayClusterSpec(Foreign):
    headGroupSpec: _HeadGroup
    workerGroupSpecs: list[_WorkerGroup] = Field(default_factory=list)
    enableInTreeAutoscaling: StrictBool = False


def _roles(cluster: RayClusterSpec) -> tuple[Role, ...]:
    roles = [Role("head", 1, template_of(cluster.headGroupSpec.template))]
    for group in cluster.workerGroupSpecs:
        replicas = group.minReplicas if group.replicas is None else group.replicas
        autoscaled = cluster.enableInTreeAutoscaling
        roles.append(Role(group.groupName, replicas, template_of(group.template), pods_per_replica=group.numOfHosts,
                          min_replicas=min(group.minReplicas, replicas) if autoscaled else None,
                          max_replicas=group.maxReplicas if autoscaled else None))
    return tuple(roles)


def read_raycluster(ref: OwnerRef, meta: Meta, spec: Mapping[str, Any]) -> Owner:
    return Owner(ref, meta.labels, meta.annotations, _roles(validate_spec(RayClusterSpec, spec)))


class RayJobSpec(Foreign):
    # Required here: a RayJob on an existing cluster (clusterSelector) is grouped by that RayCluster.
    rayClusterSpec: RayClusterSpec


def read_rayjob(ref: OwnerRef, meta: Meta, spec: Mapping[str, Any]) -> Owner:
    return Owner(ref, meta.labels, meta.annotations, _roles(validate_spec(RayJobSpec, spec).rayClusterSpec))
