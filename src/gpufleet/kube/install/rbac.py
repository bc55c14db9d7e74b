"""The Kubernetes API permissions the controller uses: exactly the calls its code makes.

One rule per call site family, so that a change of the code and of this list go together (a test
checks every :class:`~gpufleet.kube.client.port.ClusterApi` call the controller makes against it). The
install manifests and the Helm chart build the controller's ClusterRole from :data:`RULES`, with
the Lease rule in a namespaced Role (:mod:`gpufleet.kube.install.manifests`).
"""

from __future__ import annotations

from typing import Any

from gpufleet.domain import API_GROUP
from gpufleet.kube.client.port import Kind

__all__ = ["AGENT_RULES", "RULES", "allowed", "verb_of"]

RULES: tuple[dict[str, Any], ...] = (
    # Informers (list + watch) of everything a snapshot holds, and PDBs for eviction messages.
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
    # Pods: informer; the annotation patch before a binding; a get when a binding answers 409.
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
    # PodScheduled=False and nominatedNodeName of pending pods (autoscalers read them).
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["list", "watch"]},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list", "watch"]},
    # Volumes: informers (read only through them: no get), and the writes before a Binding (a chosen
    # PV's claimRef, a claim's selected-node annotation), as kube-scheduler's VolumeBinding PreBind.
    {"apiGroups": [""], "resources": ["persistentvolumeclaims", "persistentvolumes"],
     "verbs": ["list", "watch", "patch"]},
    {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["list", "watch"]},
    {"apiGroups": [API_GROUP], "resources": ["queues", "podgroups", "schedulerconfigs", "resourceflavors"],
     "verbs": ["list", "watch"]},
    {"apiGroups": [API_GROUP], "resources": ["queues/status", "podgroups/status"], "verbs": ["patch"]},
    # A drained gang's age on its PodGroup (annotation gpufleet.dev/queued-at).
    {"apiGroups": [API_GROUP], "resources": ["podgroups"], "verbs": ["patch"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
    # Namespaces: informer (their labels are what namespaceSelectors of pod affinity terms match).
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
    # Leader election (a Role in the controller's namespace).
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
    # Tenancy: Projects and the Namespaces they select (informers), and the Projects' status.
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
    {"apiGroups": [API_GROUP], "resources": ["projects"], "verbs": ["list", "watch"]},
    {"apiGroups": [API_GROUP], "resources": ["projects/status"], "verbs": ["patch"]},
    # Dynamic Resource Allocation: informers of the four kinds, and each claim's status (allocation,
    # reservedFor) written before a Binding and cleared when no pod holds it, as DynamicResources does.
    {"apiGroups": ["resource.k8s.io"],
     "resources": ["resourceslices", "deviceclasses", "resourceclaims", "resourceclaimtemplates"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["patch", "update"]},
    # The pod-grouper (kube.controller.grouper): informers of the workload owners and the objects
    # between them and their pods (pods are labelled through the pods' patch above), and the
    # PodGroups it derives (created, updated, deleted once their owner is gone).
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "watch"]},
    {"apiGroups": ["apps"], "resources": ["replicasets", "deployments", "statefulsets"], "verbs": ["list", "watch"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["list", "watch"]},
    {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs", "mpijobs"], "verbs": ["list", "watch"]},
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["list", "watch"]},
    # A TrainJob's runtime: its pod template and node count (admission by suspension builds its pods).
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainingruntimes", "clustertrainingruntimes"],
     "verbs": ["list", "watch"]},
    {"apiGroups": ["ray.io"], "resources": ["rayclusters", "rayjobs"], "verbs": ["list", "watch"]},
    {"apiGroups": ["leaderworkerset.x-k8s.io"], "resources": ["leaderworkersets"], "verbs": ["list", "watch"]},
    {"apiGroups": [API_GROUP], "resources": ["podgroups"], "verbs": ["create", "delete"]},
    # Admission by suspension (SchedulerConfig admission: suspend): spec.suspend cleared on the
    # suspendable owners whose whole gang was placed (docs/semantics-notes.md).
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["patch"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["patch"]},
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["patch"]},
    {"apiGroups": ["ray.io"], "resources": ["rayjobs"], "verbs": ["patch"]},
)  # fmt: skip

# The node agent (``gpufleet agent``, a DaemonSet): its own Node read and patched (labels, annotations,
# the uncordon request consumed), the GPUHealthy condition, Events of health changes, and the pods'
# informer for the usage export (their names and namespaces, by uid). It writes no pod: a tenant who
# could take the agent's identity could not gain a GPU through it.
AGENT_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
)  # fmt: skip

# ClusterApi method -> (Kubernetes verb, subresource)
_VERBS: dict[str, tuple[str, str]] = {
    "list": ("list", ""),
    "watch": ("watch", ""),
    "get": ("get", ""),
    "create": ("create", ""),
    "replace": ("update", ""),
    "patch": ("patch", ""),
    "patch_status": ("patch", "status"),
    "bind": ("create", "binding"),
    "evict": ("create", "eviction"),
    "delete": ("delete", ""),
}


def verb_of(operation: str, kind: Kind) -> tuple[str, str, str]:
    """(apiGroup, resource[/subresource], verb) of a ClusterApi call."""
    verb, sub = _VERBS[operation]
    resource = f"{kind.plural}/{sub}" if sub else kind.plural
    return kind.group, resource, verb


def allowed(operation: str, kind: Kind, rules: tuple[dict[str, Any], ...] = RULES) -> bool:
    """Whether ``rules`` (the controller's by default) allow the ClusterApi call."""
    group, resource, verb = verb_of(operation, kind)
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)
