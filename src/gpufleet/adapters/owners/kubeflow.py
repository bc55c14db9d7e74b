"""Kubeflow: kubeflow.org/v1 PyTorchJob, kubeflow.org/v2beta1 MPIJob, trainer.kubeflow.org/v1alpha1
TrainJob. Role names are the operators' replica-type label values (lower case)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field

from gpufleet.adapters.owners._base import Count, Foreign, Meta, PodTemplateModel, template_of, validate_spec
from gpufleet.policy.grouping import Owner, OwnerRef, Role

__all__ = ["read_mpijob", "read_pytorchjob", "read_trainjob"]


class _ReplicaSpec(Foreign):
    replicas: Count = 1  # the operators' default
    template: PodTemplateModel = PodTemplateModel()


class _ElasticPolicy(Foreign):
    minReplicas: Count | None = None
    maxReplicas: Count | None = None


class PyTorchJobSpec(Foreign):
    pytorchReplicaSpecs: dict[Literal["Master", "Worker"], _ReplicaSpec] = Field(min_length=1)
    elasticPolicy: _ElasticPolicy | None = None


def read_pytorchjob(ref: OwnerRef, meta: Meta, spec: Mapping[str, Any]) -> Owner:
    job = validate_spec(PyTorchJobSpec, spec)
    roles: list[Role] = []
    master = job.pytorchReplicaSpecs.get("Master")
    if master is not None:
        roles.append(Role("master", master.replicas, template_of(master.template)))
    worker = job.pytorchReplicaSpecs.get("Worker")
    if worker is not None:
        elastic = job.elasticPolicy
        roles.append(Role("worker", worker.replicas, template_of(worker.template),
                          min_replicas=elastic.minReplicas if elastic else None,
                          max_replicas=elastic.maxReplicas if elastic else None))
    return Owner(ref, meta.labels, meta.annotations, tuple(roles))


class MPIJobSpec(Foreign):
    mpiReplicaSpecs: dict[Literal["Launcher", "Worker"], _ReplicaSpec] = Field(min_length=1)
    launcherCreationPolicy: Literal["AtStartup", "WaitForWorkersReady"] = "AtStartup"


def read_mpijob(ref: OwnerRef, meta: Meta, spec: Mapping[str, Any]) -> Owner:
    job = validate_spec(MPIJobSpec, spec)
    roles: list[Role] = []
    launcher = job.mpiReplicaSpecs.get("Launcher")
    if launcher is not None:
        # Made only once the workers run: counting it would hold the workers forever.
        roles.append(Role("launcher", launcher.replicas, template_of(launcher.template),
                          counted=job.launcherCreationPolicy == "AtStartup"))
    worker = job.mpiReplicaSpecs.get("Worker")
    if worker is not None:
        roles.append(Role("worker", worker.replicas, template_of(worker.template)))
    return Owner(ref, meta.labels, meta.annotations, tuple(roles))


class _Trainer(Foreign):
    numNodes: Count


class TrainJobSpec(Foreign):
    trainer: _Trainer


def read_trainjob(ref: OwnerRef, meta: Meta, spec: Mapping[str, Any]) -> Owner:
    job = validate_spec(TrainJobSpec, spec)
    # The pod template lives in the runtime (not read): no priority class, no grant from here.
    return Owner(ref, meta.labels, meta.annotations, (Role("node", job.trainer.numNodes),))
