"""gpufleet's wire vocabulary: every name another program sees, spelled once.

The API group and version of gpufleet's custom resources, the labels and annotations it reads
and writes on Kubernetes objects, the schedulerName pods ask for, the name its Events report.
They are part of gpufleet's public contract (users write them in YAML, Helm charts select on
them, kubectl users grep for them), so a change here is a breaking change: keeping them in one
module makes that visible, and keeps the loader, the controller, the webhook, the manifests and
the simulator from drifting apart. Resource names (``nvidia.com/gpu``, ``cpu``) stay with the
domain model, whose quantities are keyed by them.
"""

from __future__ import annotations

__all__ = [
    "ANNOTATION_BOUND_AT",
    "ANNOTATION_BOUND_BY_CONTROLLER",
    "ANNOTATION_CHECKPOINTED",
    "ANNOTATION_DEFAULT_CLASS",
    "ANNOTATION_DEVICES_ALLOCATED",
    "ANNOTATION_DRAIN",
    "ANNOTATION_EXPECTED_RUNTIME",
    "ANNOTATION_GPU_BLOCKS",
    "ANNOTATION_GPU_INDEX",
    "ANNOTATION_GPU_MEMORY",
    "ANNOTATION_MOVED_AT",
    "ANNOTATION_MPS_MEM_LIMIT",
    "ANNOTATION_NVLINK_DOMAINS",
    "ANNOTATION_QUEUED_AT",
    "ANNOTATION_QUEUE_GRANT",
    "ANNOTATION_SELECTED_NODE",
    "ANNOTATION_SUBMITTED_BY",
    "ANNOTATION_UNHEALTHY_GPUS",
    "API_GROUP",
    "API_GROUP_VERSION",
    "API_VERSION",
    "LABEL_GPU_MEMORY",
    "LABEL_GPU_PRODUCT",
    "LABEL_POD_GROUP",
    "LABEL_POOL",
    "LABEL_PREEMPTIBLE",
    "LABEL_PREFIX",
    "LABEL_QUEUE",
    "LABEL_RACK",
    "LABEL_SPOT",
    "MPS_HOST_ROOT",
    "MPS_PIPE_IN_CONTAINER",
    "NO_PROVISIONER",
    "REPORTING_CONTROLLER",
    "RESOURCE_MPS_SHARE",
    "SCHEDULER_NAME",
    "UNVERIFIED_USER",
    "VOLUME_ZONE_LABELS",
]

# The custom resources (Queue, PodGroup, SchedulerConfig, and the ClusterSpec of the simulator).
API_GROUP = "gpufleet.dev"
API_VERSION = "v1alpha1"
API_GROUP_VERSION = f"{API_GROUP}/{API_VERSION}"  # the apiVersion field

# Pods ask for gpufleet with spec.schedulerName; its Events name it as their reporting controller.
SCHEDULER_NAME = "gpufleet"
REPORTING_CONTROLLER = f"{API_GROUP}/scheduler"

# Labels and annotations of gpufleet's own (snapshots keep every key with this prefix).
LABEL_PREFIX = f"{API_GROUP}/"
LABEL_QUEUE = f"{LABEL_PREFIX}queue"
LABEL_POD_GROUP = f"{LABEL_PREFIX}pod-group"
LABEL_PREEMPTIBLE = f"{LABEL_PREFIX}preemptible"
LABEL_POOL = f"{LABEL_PREFIX}pool"  # informational: lets pods select a node pool with a node selector
LABEL_SPOT = f"{LABEL_PREFIX}spot"  # "true" on spot nodes
LABEL_RACK = f"topology.{API_GROUP}/rack"
ANNOTATION_GPU_BLOCKS = f"{LABEL_PREFIX}gpu-blocks"
# When the controller bound the pod (RFC 3339, microseconds): the usage ledger's interval identity.
ANNOTATION_BOUND_AT = f"{LABEL_PREFIX}bound-at"
ANNOTATION_GPU_MEMORY = f"{LABEL_PREFIX}gpu-memory"
# On a PodGroup, written by the controller before it drains the gang: the gang's age (RFC 3339), so that
# its recreated pods queue at their original position. Guarded like bound-at.
ANNOTATION_QUEUED_AT = f"{LABEL_PREFIX}queued-at"
# A pod's declared runtime (docs/semantics.md, "Reservation and backfill"): tenant-written, a promise
# the reservation guard holds it to.
ANNOTATION_EXPECTED_RUNTIME = f"{LABEL_PREFIX}expected-runtime"
# On a cordoned Node, the operator's: "true" drains it (docs/semantics-notes.md, "Draining nodes").
ANNOTATION_DRAIN = f"{LABEL_PREFIX}drain"
# Consolidation (docs/semantics.md): "true" on a pod makes it movable (tenant-writable: it only costs
# its own pods); the controller's history of a pod's moves (times, comma-separated).
ANNOTATION_CHECKPOINTED = f"{LABEL_PREFIX}checkpointed"
ANNOTATION_MOVED_AT = f"{LABEL_PREFIX}moved-at"
ANNOTATION_GPU_INDEX = f"{LABEL_PREFIX}gpu-index"
# The ResourceFlavor a bound pod took (docs/semantics.md, "GPU-model quotas"): written by the
# controller for people, never read by the engine.
ANNOTATION_FLAVOR = f"{LABEL_PREFIX}flavor"
ANNOTATION_MPS_MEM_LIMIT = f"{LABEL_PREFIX}mps-mem-limit"
ANNOTATION_UNHEALTHY_GPUS = f"{LABEL_PREFIX}unhealthy-gpus"
ANNOTATION_NVLINK_DOMAINS = f"{LABEL_PREFIX}nvlink-domains"
# Written by the admission webhook only (the chart's ValidatingAdmissionPolicy refuses any other
# writer): the verified creator of a pod, and a queue its creator may use by RBAC (verb "use").
ANNOTATION_SUBMITTED_BY = f"{LABEL_PREFIX}submitted-by"
ANNOTATION_QUEUE_GRANT = f"{LABEL_PREFIX}queue-grant"
UNVERIFIED_USER = "unverified"  # the user of a pod without a submitted-by annotation

# Node labels of NVIDIA's GPU feature discovery, read for a node's GPU model and memory (MiB).
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
LABEL_GPU_MEMORY = "nvidia.com/gpu.memory"

# Kubernetes' own storage vocabulary that volume binding reads and writes (docs/semantics-notes.md, "Volumes").
ANNOTATION_SELECTED_NODE = "volume.kubernetes.io/selected-node"  # on a PVC: provision for this node
ANNOTATION_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"  # on a PV whose claimRef we set
ANNOTATION_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
NO_PROVISIONER = "kubernetes.io/no-provisioner"  # a StorageClass of pre-created (local) PVs only
VOLUME_ZONE_LABELS = (
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
)

# GPU delivery on the node (docs/gpu-assignment.md). Fractional pods ask the kubelet for one
# ``gpufleet.dev/mps-share`` per container (the webhook adds it); gpufleet's device plugin answers
# with the GPU, the MPS pipe and the shared memory of the GPU the scheduler chose for the pod.
RESOURCE_MPS_SHARE = f"{API_GROUP}/mps-share"
# The MPS DaemonSet's host layout: one directory per GPU, gpu-<index>/{pipe,shm,log}.
MPS_HOST_ROOT = "/run/gpufleet/mps"
MPS_PIPE_IN_CONTAINER = "/run/gpufleet/mps-pipe"  # where a client sees its GPU's pipe directory
# Written by gpufleet's device plugin on a pod it served (docs/gpu-assignment.md): the containers
# served so far and their devices, "<container>=<resource>:<id>,<id>;...", so that a restarted plugin
# never serves a container twice.
ANNOTATION_DEVICES_ALLOCATED = f"{LABEL_PREFIX}devices-allocated"
