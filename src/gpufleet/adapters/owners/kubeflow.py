"""Kubeflow: kubeflow.org/v1 PyTorchJob, kubeflow.org/v2beta1 MPIJob, trainer.kubeflow.org/v1alpha1
TrainJob. Role names are the operators' replica-type label values (lower case)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from gpufleet.adapters._fields import FieldError
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
from gpufleet.adapters.owners.batch import JobSpec
from gpufleet.policy.grouping import Owner, OwnerRef, Role

__all__ = [
    "RuntimeLookup", "RuntimeRef", "read_mpijob", "read_pytorchjob", "read_trainjob", "runtime_of", "runtime_ref",
    "trainjob_templates",
]

JsonDict = dict[str, Any]


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


TRAINER_GROUP = "trainer.kubeflow.org"
# The label a runtime's replicated job carries to say it is the trainer's (upstream's "ancestor step").
LABEL_ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_JOB = "node"  # the trainer's replicated job and container, as upstream names them


@dataclass(frozen=True, slots=True)
class RuntimeRef:
    """The runtime a TrainJob names (``spec.runtimeRef``): a TrainingRuntime of its namespace, or a
    ClusterTrainingRuntime (``namespace`` "")."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


# What finds a runtime (the controller's informers): None when it does not exist.
RuntimeLookup = Callable[[RuntimeRef], Mapping[str, Any] | None]


class _Resources(Foreign):
    # Quantities, read as the pods' are (the virtual pods' reader checks them).
    limits: dict[StrictStr, Any] = Field(default_factory=dict)
    requests: dict[StrictStr, Any] = Field(default_factory=dict)


class _Trainer(Foreign):
    numNodes: Count | None = None
    resourcesPerNode: _Resources | None = None


class _RuntimeRefModel(Foreign):
    name: Annotated[StrictStr, Field(min_length=1)]
    apiGroup: StrictStr = TRAINER_GROUP
    kind: Literal["TrainingRuntime", "ClusterTrainingRuntime"] = "ClusterTrainingRuntime"


class TrainJobSpec(Foreign):
    runtimeRef: _RuntimeRefModel | None = None
    trainer: _Trainer = _Trainer()
    suspend: StrictBool = False


class _JobMeta(Foreign):
    labels: dict[StrictStr, StrictStr] = Field(default_factory=dict)


class _RuntimeJobTemplate(Foreign):
    metadata: _JobMeta = _JobMeta()
    spec: JobSpec = JobSpec()


class _RuntimeJob(Foreign):
    name: StrictStr
    template: _RuntimeJobTemplate = _RuntimeJobTemplate()


class _RuntimeJobSet(Foreign):
    replicatedJobs: list[_RuntimeJob] = Field(min_length=1)


class _JobSetTemplate(Foreign):
    spec: _RuntimeJobSet


class _MLPolicy(Foreign):
    numNodes: Count | None = None


class TrainingRuntimeSpec(Foreign):
    mlPolicy: _MLPolicy | None = None
    template: _JobSetTemplate


def runtime_ref(namespace: str, spec: Mapping[str, Any]) -> RuntimeRef:
    """The runtime a TrainJob of ``namespace`` names in its ``spec`` (its defaults: a ClusterTrainingRuntime of
    trainer.kubeflow.org); :class:`FieldError` when the reference is missing or names another group."""
    job = validate_spec(TrainJobSpec, spec)
    if job.runtimeRef is None:
        raise FieldError("spec.runtimeRef", "required field missing")
    if job.runtimeRef.apiGroup != TRAINER_GROUP:
        raise FieldError("spec.runtimeRef.apiGroup", f"{job.runtimeRef.apiGroup} is not {TRAINER_GROUP}")
    kind = job.runtimeRef.kind
    return RuntimeRef(kind, namespace if kind == "TrainingRuntime" else "", job.runtimeRef.name)


def runtime_of(obj: Mapping[str, Any]) -> RuntimeRef | None:
    """The runtime a TrainJob object names; None when its reference is bad (its read says why)."""
    meta = obj.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    spec = obj.get("spec")
    try:
        return runtime_ref(namespace if isinstance(namespace, str) and namespace else "default",
                           spec if isinstance(spec, Mapping) else {})
    except FieldError:
        return None


def _trainer_job(where: RuntimeRef, runtime: Mapping[str, Any]) -> tuple[int, TrainingRuntimeSpec]:
    """The index of the runtime's trainer job (labelled the trainer's ancestor step, else named
    "node"), and the runtime's spec; :class:`FieldError` naming the runtime when it has none."""
    try:
        spec = validate_spec(TrainingRuntimeSpec, runtime.get("spec"))
    except FieldError as err:
        raise FieldError(f"spec.runtimeRef ({where}): {err.path}", err.message) from None
    jobs = spec.template.spec.replicatedJobs
    index = next((i for i, job in enumerate(jobs) if job.template.metadata.labels.get(LABEL_ANCESTOR) == "trainer"),
                 next((i for i, job in enumerate(jobs) if job.name == TRAINER_JOB), None))
    if index is None or jobs[index].name != TRAINER_JOB:
        raise FieldError(f"spec.runtimeRef ({where})",
                         f'no replicated job "{TRAINER_JOB}" (labelled {LABEL_ANCESTOR}: trainer) in its template')
    return index, spec


def _num_nodes(job: TrainJobSpec, runtime: TrainingRuntimeSpec, index: int) -> int:
    """The trainer's pods: the TrainJob's numNodes, else the runtime's mlPolicy numNodes (1 when its
    mlPolicy says none), else the trainer job's parallelism."""
    if job.trainer.numNodes is not None:
        return job.trainer.numNodes
    if runtime.mlPolicy is not None:
        return 1 if runtime.mlPolicy.numNodes is None else runtime.mlPolicy.numNodes
    return runtime.template.spec.replicatedJobs[index].template.spec.pods


def read_trainjob(ref: OwnerRef, meta: Meta, spec: Mapping[str, Any], runtimes: RuntimeLookup | None = None) -> Owner:
    """A TrainJob: its trainer's node pods, one role. Their template and, unless the TrainJob says
    it, their number are in its runtime, read through ``runtimes``; without a lookup (a manifest read
    alone) ``spec.trainer.numNodes`` is required. A runtime not found is a :class:`FieldError` for a
    suspended TrainJob (its pods cannot be built) or one without numNodes; otherwise the TrainJob's
    numNodes is enough (its JobSet, made, names the rest)."""
    job = validate_spec(TrainJobSpec, spec)
    if runtimes is None:
        if job.trainer.numNodes is None:
            raise FieldError("spec.trainer.numNodes", "required field missing")
        return Owner(ref, meta.labels, meta.annotations, (Role(TRAINER_JOB, job.trainer.numNodes),))
    where = runtime_ref(ref.namespace, spec)
    runtime = runtimes(where)
    if runtime is None:
        if job.suspend or job.trainer.numNodes is None:
            raise FieldError("spec.runtimeRef", f"{where} not found")
        return Owner(ref, meta.labels, meta.annotations, (Role(TRAINER_JOB, job.trainer.numNodes),))
    index, runtime_spec = _trainer_job(where, runtime)
    template = runtime_spec.template.spec.replicatedJobs[index].template.spec.template
    return Owner(ref, meta.labels, meta.annotations,
                 (Role(TRAINER_JOB, _num_nodes(job, runtime_spec, index), template_of(template)),))


def trainjob_templates(ref: OwnerRef, spec: Mapping[str, Any], runtimes: RuntimeLookup) -> dict[str, JsonDict]:
    """The raw pod template of a TrainJob's trainer nodes, by role name, as its JobSet will have it:
    the runtime's, with the TrainJob's ``resourcesPerNode`` over the "node" container's resources
    (resource by resource). Empty when the runtime is not found or not readable."""
    try:
        where = runtime_ref(ref.namespace, spec)
        runtime = runtimes(where)
        if runtime is None:
            return {}
        index, _ = _trainer_job(where, runtime)
    except FieldError:
        return {}
    raw = runtime["spec"]["template"]["spec"]["replicatedJobs"][index]
    template: JsonDict = copy.deepcopy(dict(((raw.get("template") or {}).get("spec") or {}).get("template") or {}))
    per_node = validate_spec(TrainJobSpec, spec).trainer.resourcesPerNode
    containers = (template.get("spec") or {}).get("containers")
    if per_node is not None and isinstance(containers, list):
        for container in containers:
            if isinstance(container, dict) and container.get("name") == TRAINER_JOB:
                resources = container.setdefault("resources", {})
                # A limit given alone sets the request too (as Kubernetes defaults it): the runtime's
                # request of that resource is not kept below it.
                requests = {k: v for k, v in (resources.get("requests") or {}).items()
                            if k not in per_node.limits or k in per_node.requests}
                resources["limits"] = {**(resources.get("limits") or {}), **per_node.limits}
                resources["requests"] = {**requests, **per_node.requests}
    return {TRAINER_JOB: template}
