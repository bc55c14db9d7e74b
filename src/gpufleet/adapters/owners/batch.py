"""batch/v1 Job and jobset.x-k8s.io/v1alpha2 JobSet (a JobSet's replicated jobs are Jobs)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from gpufleet.adapters.owners._base import Count, Foreign, Meta, PodTemplateModel, StrictStr, template_of, validate_spec
from gpufleet.policy.grouping import ANNOTATION_GROUP_PER, GangUnit, Owner, OwnerRef, Role

__all__ = ["read_job", "read_jobset"]


class JobSpec(Foreign):
    parallelism: Count | None = None  # default 1
    completions: Count | None = None  # none: done when one pod succeeds (work queue)
    template: PodTemplateModel = PodTemplateModel()

    @property
    def pods(self) -> int:
        """The pods that run at once: parallelism, no more than completions."""
        parallel = 1 if self.parallelism is None else self.parallelism
        return parallel if self.completions is None else min(parallel, self.completions)


def read_job(ref: OwnerRef, meta: Meta, spec: Mapping[str, Any]) -> Owner:
    job = validate_spec(JobSpec, spec)
    return Owner(ref, meta.labels, meta.annotations, (Role("job", job.pods, template_of(job.template)),))


class _JobTemplate(Foreign):
    spec: JobSpec = JobSpec()


class _ReplicatedJob(Foreign):
    name: StrictStr
    replicas: Count = 1
    template: _JobTemplate = _JobTemplate()


class JobSetSpec(Foreign):
    replicatedJobs: list[_ReplicatedJob] = Field(min_length=1)


def read_jobset(ref: OwnerRef, meta: Meta, spec: Mapping[str, Any]) -> Owner:
    jobset = validate_spec(JobSetSpec, spec)
    roles = tuple(Role(rj.name, rj.replicas, template_of(rj.template.spec.template),
                       pods_per_replica=rj.template.spec.pods) for rj in jobset.replicatedJobs)
    per_job = meta.annotations.get(ANNOTATION_GROUP_PER) == "replicated-job"
    return Owner(ref, meta.labels, meta.annotations, roles, GangUnit.ROLE if per_job else GangUnit.OWNER)
