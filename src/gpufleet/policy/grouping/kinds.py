"""The owner kinds gpufleet groups, one entry each: a registry, so that the controller's informers, the
adapters' readers and the rules agree on one list (docs/semantics-notes.md, "Workload owners and their
gangs"). What a kind's fields mean is read by its reader in the adapters; what is said here is what the
rules need beyond the fields: its short name in group names, which versions are read, the pod label
that names a member's role or unit, and whether the webhook checks its pod templates."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["KINDS", "KindRule", "kind_rule"]


@dataclass(frozen=True, slots=True)
class KindRule:
    short: str  # in group names: "pytorchjob-llama-3f2a..."
    versions: tuple[str, ...]  # the apiVersions read (group/version)
    # The pod label whose value names the member's role (member_roles filter) or unit (ROLE, REPLICA).
    role_label: str | None = None
    unit_label: str | None = None
    member_roles: tuple[str, ...] = ()  # the role_label values of members; (): every pod on the chain
    # The webhook checks and stamps this kind's pod templates ("Workloads" under "Admission"), so a
    # gpufleet.dev/queue-grant there was written after a SubjectAccessReview and may be trusted.
    stamped_templates: bool = False
    inference: bool = False  # spread placement and the Project's non-preemptible class by default
    # Its pod template lives in another object (a TrainJob's runtime), not in its spec: whether it
    # schedules with gpufleet is read from that object or the objects it controls (the JobSet made
    # from the runtime).
    template_elsewhere: bool = False


_JOBSET_ROLE = "jobset.sigs.k8s.io/replicatedjob-name"

KINDS: Mapping[tuple[str, str], KindRule] = {
    ("batch", "Job"): KindRule("job", ("batch/v1",), stamped_templates=True),
    ("jobset.x-k8s.io", "JobSet"): KindRule("jobset", ("jobset.x-k8s.io/v1alpha2",), unit_label=_JOBSET_ROLE),
    ("kubeflow.org", "PyTorchJob"): KindRule(
        "pytorchjob", ("kubeflow.org/v1",), role_label="training.kubeflow.org/replica-type"),
    ("kubeflow.org", "MPIJob"): KindRule(
        "mpijob", ("kubeflow.org/v2beta1",), role_label="training.kubeflow.org/replica-type"),
    ("trainer.kubeflow.org", "TrainJob"): KindRule(
        "trainjob", ("trainer.kubeflow.org/v1alpha1",), role_label=_JOBSET_ROLE, member_roles=("node",),
        template_elsewhere=True),
    ("ray.io", "RayCluster"): KindRule("raycluster", ("ray.io/v1",), role_label="ray.io/node-type"),
    ("ray.io", "RayJob"): KindRule(
        "rayjob", ("ray.io/v1",), role_label="ray.io/node-type", member_roles=("head", "worker")),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): KindRule(
        "lws", ("leaderworkerset.x-k8s.io/v1",), unit_label="leaderworkerset.sigs.k8s.io/group-index"),
    ("apps", "Deployment"): KindRule("deploy", ("apps/v1",), stamped_templates=True, inference=True),
    ("apps", "StatefulSet"): KindRule("sts", ("apps/v1",), stamped_templates=True, inference=True),
}


def kind_rule(api_version: str, kind: str) -> KindRule | None:
    """The rule of an owner kind at this apiVersion; None: not an owner gpufleet groups."""
    rule = KINDS.get((api_version.rpartition("/")[0], kind))
    if rule is None or api_version not in rule.versions:
        return None
    return rule
