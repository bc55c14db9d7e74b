"""The domain model: plain frozen dataclasses that every layer shares.

Quantities are integers in *milli-units* of their resource (``MILLI`` per unit): cpu "500m" is 500,
memory "1Gi" is 1073741824000, one whole GPU is 1000 and one GPU block (1/100 of a GPU) is 10.
Keeping every resource in one integer unit lets the engine do exact arithmetic on NumPy int64
arrays with no float rounding anywhere in quota or capacity checks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import repeat
from typing import NewType, TypeVar

from gpufleet.domain.wire import SCHEDULER_NAME

_T = TypeVar("_T")

NodeName = NewType("NodeName", str)
PodKey = NewType("PodKey", str)  # "namespace/name"
QueueName = NewType("QueueName", str)
# A host port a pod asks for: (protocol, host IP, port); protocol TCP/UDP/SCTP, WILDCARD_IP for all.
HostPort = tuple[str, str, int]
WILDCARD_IP = "0.0.0.0"  # a hostPort with no hostIP: every address of the node
GroupKey = NewType("GroupKey", str)  # "namespace/name" of a PodGroup

MILLI = 1000
GPU = "nvidia.com/gpu"
CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
BLOCKS_PER_GPU = 100
MILLI_PER_BLOCK = MILLI // BLOCKS_PER_GPU  # 10

DEFAULT_NON_PREEMPTIBLE_PRIORITY = 100


class TaintEffect(str, Enum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Placement(str, Enum):
    BINPACK = "binpack"
    SPREAD = "spread"
    DEFRAG = "defrag"  # least fragmentation of the target workload (docs/placement-defrag.md)


class WithinQueue(str, Enum):
    LOWER_PRIORITY = "LowerPriority"
    NEVER = "Never"


class FlavorChoice(str, Enum):
    """How a gang of one pod picks among the flavors of a tier (docs/semantics.md, "GPU-model quotas")."""

    IN_ORDER = "InOrder"  # the first flavor of the queue's order that admits it
    BEST_PLACEMENT = "BestPlacement"  # the placement's best node over all flavors of the tier


class EvictionReason(str, Enum):
    RECLAIM = "reclaim"
    PREEMPT = "preempt"
    IDLE = "idle"  # a Project's idle policy stopped it: the controller's, never the engine's decision
    # Drains (gpufleet.policy.drain_plan; docs/semantics-notes.md, "Draining nodes and failed GPUs"):
    # the controller's and the simulator's, never the engine's decision.
    SPOT = "spot"  # its spot node got an interruption notice
    MAINTENANCE = "maintenance"  # its node is going for maintenance (a notice, or a marked cordon)
    GPU_FAILURE = "gpu-failure"  # a pod of its gang holds a GPU listed unhealthy (onGPUFailure: evict)
    RESERVATION = "reservation"  # evicted for a due reservation (docs/semantics.md, "Reservation and backfill")
    # A consolidation move carried out by the controller (docs/semantics.md, "Consolidation"): the engine
    # reports moves, never evictions of this reason.
    CONSOLIDATION = "consolidation"


class GpuFailurePolicy(str, Enum):
    """What happens to a running pod on a GPU listed unhealthy: its gang evicted, or kept running."""

    EVICT = "evict"
    KEEP = "keep"


class AdmissionMode(str, Enum):
    """How owners of a suspendable kind are admitted (docs/semantics-notes.md, "Admission by
    suspension"): pod by pod, or unsuspended only once their whole gang is placed."""

    PODS = "pods"
    SUSPEND = "suspend"


# The taint or label keys of the common interruption handlers (docs/semantics-notes.md, "Draining
# nodes and failed GPUs"): a node carrying one of them is drained.
DEFAULT_INTERRUPTION_KEYS = (
    "aws-node-termination-handler/spot-itn",
    "aws-node-termination-handler/scheduled-maintenance",
    "aws-node-termination-handler/asg-lifecycle-termination",
    "cloud.google.com/impending-node-termination",
    "karpenter.sh/disrupted",
    "karpenter.sh/disruption",
    "aks-node-termination-handler/preempt",
)


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: TaintEffect


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration. ``key=None`` with operator Exists tolerates every taint."""

    key: str | None
    operator: str  # "Equal" | "Exists"
    value: str
    effect: TaintEffect | None  # None: all effects


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    """One expression of a required node-affinity term (matchExpressions)."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """A nodeSelectorTerm: all its expressions must hold. ``fields`` are matchFields (metadata.name)."""

    expressions: tuple[SelectorRequirement, ...] = ()
    fields: tuple[SelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A metav1.LabelSelector over pod labels: every pair and every expression must hold
    (expressions use In, NotIn, Exists, DoesNotExist). An empty selector matches every pod."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[SelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """One term of podAffinity / podAntiAffinity. ``selector=None``: matches no pod.
    ``namespaces`` and ``namespace_selector`` both empty: the pod's own namespace.
    ``weight`` 0: a required term; 1..100: a preferred one."""

    topology_key: str
    selector: LabelSelector | None = None
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None
    weight: int = 0


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One topologySpreadConstraint (``matchLabelKeys`` already merged into ``selector``)."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str = "DoNotSchedule"  # DoNotSchedule | ScheduleAnyway
    selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"  # Honor | Ignore
    node_taints_policy: str = "Ignore"  # Honor | Ignore

    @property
    def hard(self) -> bool:
        return self.when_unsatisfiable == "DoNotSchedule"


@dataclass(frozen=True, slots=True)
class Node:
    name: NodeName
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    # status.allocatable in milli-units, resource name -> amount ("nvidia.com/gpu" included)
    allocatable: Mapping[str, int] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    unhealthy_gpus: frozenset[int] = frozenset()
    # GPU index groups joined by NVLink; empty: unknown (any GPUs of the node may be combined)
    nvlink_domains: tuple[tuple[int, ...], ...] = ()
    gpu_memory_mib: int | None = None  # label nvidia.com/gpu.memory
    gpu_product: str | None = None

    @property
    def gpu_count(self) -> int:
        return self.allocatable.get(GPU, 0) // MILLI


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    scheduler_name: str = SCHEDULER_NAME
    # Effective requests in milli-units (Kubernetes rules: max(sum of containers, max of init
    # containers), limits standing in for missing requests). Whole GPUs are under "nvidia.com/gpu";
    # "pods" is not included (every pod takes one pod slot).
    requests: Mapping[str, int] = field(default_factory=dict)
    gpu_blocks: int | None = None  # annotation gpu-blocks (1..100): fraction of ONE GPU
    gpu_memory_bytes: int | None = None  # annotation gpu-memory, turned into blocks per node
    priority: int | None = None  # spec.priority; the PriorityClass named below wins when it exists
    priority_class_name: str | None = None
    preemptible_label: bool | None = None  # label gpufleet.dev/preemptible
    queue_label: QueueName | None = None
    group_label: str | None = None  # PodGroup name in the same namespace
    node_name: NodeName | None = None
    phase: str = "Pending"
    creation_time: float = 0.0  # seconds since the epoch; 0 when unknown
    start_time: float | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[SelectorTerm, ...] = ()  # required node affinity: any one term must match
    tolerations: tuple[Toleration, ...] = ()
    gpu_index: tuple[int, ...] = ()  # annotation gpu-index on bound pods
    scheduling_gates: tuple[str, ...] = ()  # spec.schedulingGates names: not scheduled while any is left
    host_ports: tuple[HostPort, ...] = ()  # containers[].ports[] with a hostPort, sorted
    # spec.affinity.podAffinity / podAntiAffinity terms (required: weight 0, preferred: weight > 0)
    affinity_terms: tuple[PodAffinityTerm, ...] = ()
    anti_affinity_terms: tuple[PodAffinityTerm, ...] = ()
    spread_constraints: tuple[SpreadConstraint, ...] = ()  # spec.topologySpreadConstraints
    # PVC names in the pod's namespace: persistentVolumeClaim volumes, and "<pod>-<volume>" for
    # generic ephemeral volumes (in spec.volumes order, without repeats)
    claims: tuple[str, ...] = ()
    ephemeral_claims: frozenset[str] = frozenset()  # those of ``claims`` made for ephemeral volumes
    # nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution: (weight 1..100, preference term)
    preferred_affinity: tuple[tuple[int, SelectorTerm], ...] = ()
    submitted_by: str | None = None  # annotation gpufleet.dev/submitted-by (written by the webhook)
    queue_grant: QueueName | None = None  # annotation gpufleet.dev/queue-grant (written by the webhook)
    resource_claims: tuple[PodClaim, ...] = ()  # spec.resourceClaims (DRA)
    # Set by reading the pod's DRA claims (gpufleet.adapters.devices): why they cannot be allocated
    # now (the pod and its gang wait), and the nodes whose GPU devices satisfy them (None: any node).
    device_wait: str | None = None
    device_nodes: frozenset[str] | None = None

    @property
    def key(self) -> PodKey:
        return PodKey(f"{self.namespace}/{self.name}")

    @property
    def ours(self) -> bool:
        return self.scheduler_name == SCHEDULER_NAME

    @property
    def whole_gpus(self) -> int:
        return self.requests.get(GPU, 0) // MILLI

    @property
    def is_fractional(self) -> bool:
        return self.gpu_blocks is not None or self.gpu_memory_bytes is not None

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def bound(self) -> bool:
        return self.node_name is not None and not self.finished


@dataclass(frozen=True, slots=True)
class VolumeClaim:
    """A PersistentVolumeClaim, as volume binding reads it (docs/semantics-notes.md, "Volumes")."""

    namespace: str
    name: str
    uid: str = ""
    storage_class: str | None = None  # spec.storageClassName; None: the default class, "": none
    volume_name: str | None = None  # spec.volumeName: bound (or pre-bound) to this PV
    request_bytes: int = 0  # spec.resources.requests.storage
    access_modes: tuple[str, ...] = ()
    volume_mode: str = "Filesystem"
    selector: LabelSelector | None = None  # spec.selector over PV labels
    selected_node: NodeName | None = None  # annotation volume.kubernetes.io/selected-node
    deleting: bool = False  # metadata.deletionTimestamp set

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    storage_class: str = ""  # spec.storageClassName ("": none)
    capacity_bytes: int = 0  # spec.capacity.storage
    access_modes: tuple[str, ...] = ()
    volume_mode: str = "Filesystem"
    node_affinity: tuple[SelectorTerm, ...] = ()  # spec.nodeAffinity.required: any one term; (): every node
    claim: str | None = None  # spec.claimRef as "namespace/name"
    phase: str = "Available"  # status.phase (Available when absent)


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str = ""
    wait_for_first_consumer: bool = False  # volumeBindingMode: WaitForFirstConsumer
    allowed_topologies: tuple[SelectorTerm, ...] = ()  # any one term; (): every node
    is_default: bool = False  # annotation storageclass.kubernetes.io/is-default-class: "true"
    creation_time: float = 0.0


@dataclass(frozen=True, slots=True)
class VolumeBinding:
    """A volume chosen with a pod's node: the PV bound to an unbound claim, or (``volume`` None)
    the claim to provision on the pod's node."""

    claim: str  # claim name, in the pod's namespace
    volume: str | None = None


# -- Dynamic Resource Allocation (docs/semantics-notes.md, "Dynamic Resource Allocation") ----------

# A device attribute's value as the API gives it: string, int, bool, or a version (kept as its string).
AttributeValue = str | int | bool


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice. Attribute and capacity names are qualified: an unqualified
    name in the API is qualified with the slice's driver ("gpu.nvidia.com/index")."""

    name: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)  # qualified name -> quantity, as written


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    driver: str
    pool: str
    node: NodeName | None = None  # spec.nodeName; None: not local to one node (not used by gpufleet)
    generation: int = 0  # spec.pool.generation
    devices: tuple[Device, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    """An opaque device configuration: ``requests`` empty means every request of the claim."""

    driver: str
    parameters: Mapping[str, object] = field(default_factory=dict)  # JSON, passed through
    requests: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()  # CEL expressions
    config: tuple[DeviceConfig, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One ``spec.devices.requests[]`` entry of a claim (its ``exactly`` form)."""

    name: str
    device_class: str = ""
    count: int = 1
    selectors: tuple[str, ...] = ()  # CEL expressions
    unsupported: str | None = None  # what it asks that gpufleet does not allocate ("firstAvailable", ...)


@dataclass(frozen=True, slots=True)
class DeviceResult:
    """One allocated device: ``status.allocation.devices.results[]``."""

    request: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str = ""
    requests: tuple[DeviceRequest, ...] = ()
    config: tuple[DeviceConfig, ...] = ()
    unsupported: str | None = None  # claim-wide features gpufleet does not allocate ("constraints")
    allocation: tuple[DeviceResult, ...] = ()  # status.allocation.devices.results
    allocated_node: NodeName | None = None  # from status.allocation.nodeSelector (metadata.name)
    reserved_for: tuple[str, ...] = ()  # names of the pods in status.reservedFor (same namespace)
    deleting: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def allocated(self) -> bool:
        return bool(self.allocation)


@dataclass(frozen=True, slots=True)
class ClaimTemplate:
    """A ResourceClaimTemplate: the claim spec kube-controller-manager copies for each pod."""

    namespace: str
    name: str
    requests: tuple[DeviceRequest, ...] = ()
    config: tuple[DeviceConfig, ...] = ()
    unsupported: str | None = None


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One ``spec.resourceClaims[]`` entry of a pod: the claim it names directly (``claim``), or the
    template (``template``) and the claim made from it for this pod (``generated``, from
    ``status.resourceClaimStatuses``; None until kube-controller-manager creates it)."""

    name: str
    claim: str | None = None
    template: str | None = None
    generated: str | None = None

    @property
    def claim_name(self) -> str | None:
        return self.claim if self.claim is not None else self.generated


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """The devices a binding allocates to one claim of its pod."""

    claim: str  # claim name in the pod's namespace
    results: tuple[DeviceResult, ...] = ()
    shared: bool = False  # the claim was already held: the pod only joins reservedFor


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    global_default: bool = False


@dataclass(frozen=True, slots=True)
class QueueResource:
    quota: int | None = None  # milli-units; None: the sum of the children's quotas
    limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class Queue:
    name: QueueName
    parent: QueueName | None = None
    weight: float = 1.0
    resources: Mapping[str, QueueResource] = field(default_factory=dict)
    reclaim_borrowed: bool = True
    within_queue: WithinQueue = WithinQueue.LOWER_PRIORITY
    # Disruption guards and decayed usage (docs/semantics.md): seconds; 0: none.
    min_runtime: float = 0.0  # spec.preemption.minRuntime: its running gangs younger than this are no victims
    preemption_delay: float = 0.0  # spec.preemption.preemptionDelay: its gangs evict only after waiting this
    # status.decayedUsage (milli-units per resource) as of status.decayedUsageTime (None: unknown).
    decayed_usage: Mapping[str, int] = field(default_factory=dict)
    decayed_at: float | None = None
    # GPU-model quotas (docs/semantics.md, "GPU-model quotas"): the queue's flavors, in fallback order.
    flavors: tuple[QueueFlavor, ...] = ()
    flavor_choice: FlavorChoice = FlavorChoice.IN_ORDER


@dataclass(frozen=True, slots=True)
class QueueFlavor:
    """One entry of a Queue's ``spec.flavors``: quota, limit and lending limit per resource on the
    nodes of ResourceFlavor ``name``."""

    name: str
    resources: Mapping[str, QueueResource] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ResourceFlavor:
    """A cluster-scoped ResourceFlavor: the nodes carrying every one of ``node_labels``."""

    name: str
    node_labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class PodGroup:
    namespace: str
    name: str
    min_member: int = 1
    queue: QueueName | None = None
    priority_class_name: str | None = None
    topology_required: str | None = None
    topology_preferred: str | None = None
    # spec.placement: the strategy for this gang's pods (binpack or spread), over the config's; None: the config's.
    placement: Placement | None = None
    # The gang's age kept across a drain (annotation gpufleet.dev/queued-at, written by the controller),
    # never earlier than the PodGroup's creation; None: none.
    queued_at: float | None = None
    # Its gpufleet.dev/moved-at (docs/semantics.md, "Consolidation"), as written: the gang's move history.
    moved_at: str | None = None

    @property
    def key(self) -> GroupKey:
        return GroupKey(f"{self.namespace}/{self.name}")


@dataclass(frozen=True, slots=True)
class Consolidation:
    """Consolidation (docs/semantics.md, "Consolidation"): moves of checkpointed preemptible gangs that
    make room for a gang free capacity holds in total but not in shape."""

    enabled: bool = False
    max_moves_per_cycle: int = 8  # moved pods per schedule() call
    max_moves_per_pod_per_hour: int = 1
    min_wait_s: float = 0.0  # a gang waits this long (its age) before moves are planned for it
    gpus_per_move: int = 4  # a plan moves at most max(1, GPUs W asks // this) pods (0: no such bound)


@dataclass(frozen=True, slots=True)
class ReservationConfig:
    """Reservation and backfill (docs/semantics.md, "Reservation and backfill")."""

    after: float  # seconds a gang waits before it may hold a reservation
    max: int = 4  # reservations held at once
    percentile: int = 90  # of completed runtimes, for whoever fills observed_runtime
    observed_runtime: Mapping[str, float] = field(default_factory=dict)  # leaf queue -> seconds


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    default_queue: QueueName = QueueName("default")
    topology_levels: tuple[str, ...] = ()
    non_preemptible_priority: int = DEFAULT_NON_PREEMPTIBLE_PRIORITY
    placement: Placement = Placement.BINPACK
    require_project: bool = False  # pods of namespaces in no Project wait (docs/semantics-notes.md, "Projects")
    # Drains (docs/semantics-notes.md, "Draining nodes and failed GPUs")
    on_gpu_failure: GpuFailurePolicy = GpuFailurePolicy.EVICT
    interruption_keys: tuple[str, ...] = DEFAULT_INTERRUPTION_KEYS
    drain_cordoned: bool = False  # every cordoned node drains, not only those annotated gpufleet.dev/drain
    admission: AdmissionMode = AdmissionMode.PODS  # docs/semantics-notes.md, "Admission by suspension"
    # The snapshot's own time, seconds since the epoch (docs/semantics.md, "The snapshot's time"): the
    # controller and the simulator set it every cycle, replay reads it from the file or --now. None:
    # unknown, and every rule that needs a time (ages, runtimes, decay) is off.
    now: float | None = None
    # spec.fairShare.usageHalfLife in seconds (docs/semantics.md, "Fairness over time"); 0: off.
    usage_half_life: float = 0.0
    consolidation: Consolidation | None = None  # None: off (docs/semantics.md, "Consolidation")
    reservation: ReservationConfig | None = None  # None: off (docs/semantics.md, "Reservation and backfill")


# Volume kinds a Project allows when it says nothing (docs/semantics-notes.md, "Projects").
DEFAULT_VOLUME_KINDS = (
    "persistentVolumeClaim", "configMap", "secret", "emptyDir", "projected", "downwardAPI", "ephemeral",
)


@dataclass(frozen=True, slots=True)
class NodePool:
    """A named set of nodes a Project's pods may use: the nodes matching ``selector``."""

    name: str
    selector: LabelSelector = field(default_factory=LabelSelector)


@dataclass(frozen=True, slots=True)
class ImagePolicy:
    allowed: tuple[str, ...] = ()  # glob patterns; (): any image
    denied: tuple[str, ...] = ()
    require_digest: bool = False


@dataclass(frozen=True, slots=True)
class VolumePolicy:
    kinds: tuple[str, ...] = DEFAULT_VOLUME_KINDS
    storage_classes: tuple[str, ...] | None = None  # None: any
    claim_names: tuple[str, ...] | None = None  # glob patterns; None: any


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    """A Project's opt-in idle policy (docs/semantics-notes.md, "Idle policy"): a bound pod of ours whose
    GPUs stayed under the controller's idle threshold for ``idle_seconds`` is stopped, with a warning
    ``warn_seconds`` before. ``pod_selector`` None: every such pod of the Project."""

    idle_seconds: int
    warn_seconds: int = 900
    pod_selector: LabelSelector | None = None


@dataclass(frozen=True, slots=True)
class Project:
    """A tenant: namespaces bound to queues, and the policy of everything they submit to gpufleet."""

    name: str
    namespace_names: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None  # over Namespace labels; None: names only
    queues: tuple[QueueName, ...] = ()
    default_queue: QueueName | None = None
    node_pools: tuple[NodePool, ...] = ()  # (): every node
    priority_classes: tuple[str, ...] | None = None  # None: any
    allow_non_preemptible: bool = False
    max_gpus_per_user: int | None = None  # whole GPUs (fractions count as blocks/100)
    max_pending_gangs_per_user: int | None = None
    images: ImagePolicy = field(default_factory=ImagePolicy)
    volumes: VolumePolicy = field(default_factory=VolumePolicy)
    idle_policy: IdlePolicy | None = None  # None: the Project's pods are never stopped for idling


@dataclass(frozen=True, slots=True)
class Namespace:
    """A v1 Namespace: its name and labels (what namespace selectors match). The API server sets
    the label ``kubernetes.io/metadata.name`` to the name; a namespace with no Namespace object in
    a snapshot is seen with that one label (``gpufleet.domain.selectors.namespace_labels``)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A whole cluster state as the scheduler sees it: the engine's only input."""

    nodes: tuple[Node, ...] = ()
    pods: tuple[Pod, ...] = ()
    priority_classes: tuple[PriorityClass, ...] = ()
    queues: tuple[Queue, ...] = ()
    pod_groups: tuple[PodGroup, ...] = ()
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    claims: tuple[VolumeClaim, ...] = ()
    volumes: tuple[PersistentVolume, ...] = ()
    storage_classes: tuple[StorageClass, ...] = ()
    namespaces: tuple[Namespace, ...] = ()  # v1 Namespaces (for namespaceSelector): may be none
    projects: tuple[Project, ...] = ()
    resource_slices: tuple[ResourceSlice, ...] = ()
    device_classes: tuple[DeviceClass, ...] = ()
    resource_claims: tuple[ResourceClaim, ...] = ()
    claim_templates: tuple[ClaimTemplate, ...] = ()
    flavors: tuple[ResourceFlavor, ...] = ()  # ResourceFlavors (docs/semantics.md, "GPU-model quotas")


@dataclass(frozen=True, slots=True)
class Binding:
    pod: PodKey
    node: NodeName
    gpus: tuple[int, ...] = ()
    gpu_blocks: int | None = None  # set for fractional pods
    volumes: tuple[VolumeBinding, ...] = ()  # volumes chosen with the node, sorted by claim
    devices: tuple[ClaimAllocation, ...] = ()  # DRA devices allocated to its claims, in spec order
    flavor: str | None = None  # the ResourceFlavor it took (docs/semantics.md, "GPU-model quotas")


@dataclass(frozen=True, slots=True)
class Eviction:
    pod: PodKey
    reason: EvictionReason
    by: PodKey  # the first pod (by name) of the gang that caused it


@dataclass(frozen=True, slots=True)
class Move:
    """A running pod moved to make room for a pending gang (docs/semantics.md, "Consolidation")."""

    pod: PodKey
    from_node: NodeName
    from_gpus: tuple[int, ...]
    to_node: NodeName
    to_gpus: tuple[int, ...]
    for_gang: str  # the key of the gang it made room for
    to_blocks: int | None = None  # fractional pods: their blocks on the target GPU


@dataclass(frozen=True, slots=True)
class PendingPod:
    pod: PodKey
    reason: str


def pending_pods(pods: Sequence[PodKey], reasons: Sequence[str]) -> tuple[PendingPod, ...]:
    """``PendingPod(pod, reason)`` of each pair, equal to those the constructor makes (a large call
    leaves tens of thousands of pods pending): see :func:`_made`."""
    return tuple(_made(PendingPod, len(pods), (pods, reasons)))


def bindings_of(pods: Sequence[PodKey], nodes: Sequence[NodeName], gpus: Sequence[tuple[int, ...]],
             blocks: Sequence[int | None], volumes: Sequence[tuple[VolumeBinding, ...]],
             flavors: Sequence[str | None]) -> tuple[Binding, ...]:
    """``Binding(pod, node, gpus, blocks, volumes, flavor=flavor)`` of each row (no DRA devices),
    equal to those the constructor makes: see :func:`_made`."""
    return tuple(_made(Binding, len(pods), (pods, nodes, gpus, blocks, volumes, repeat(()), flavors)))


def _made(cls: type[_T], n: int, columns: Sequence[Iterable[object]]) -> list[_T]:
    """``n`` instances of the frozen, slotted dataclass ``cls``, field ``k`` from ``columns[k]`` (every
    field, in order): set by the slots' own member descriptors, not by the frozen ``__init__``'s
    ``object.__setattr__`` call per field (the same objects, for tens of thousands of rows)."""
    out: list[_T] = list(map(object.__new__, repeat(cls, n)))
    names = cls.__dict__["__slots__"]
    assert isinstance(names, tuple) and len(names) == len(columns)
    for name, column in zip(names, columns, strict=True):
        deque(map(cls.__dict__[name].__set__, out, column), maxlen=0)
    return out


@dataclass(frozen=True, slots=True)
class Decisions:
    """What one replay (cycles until nothing changes) decided. Each list is sorted by pod key."""

    bindings: tuple[Binding, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    pending: tuple[PendingPod, ...] = ()
    warnings: tuple[str, ...] = ()
    cycles: int = 0
    moves: tuple[Move, ...] | None = None  # None: consolidation off; else sorted by pod
    reservations: tuple[Reservation, ...] = ()  # sorted by gang


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held for a gang that waited too long (docs/semantics.md, "Reservation and backfill")."""

    gang: str  # PodGroup key, or the pod key of a gang of one
    nodes: tuple[NodeName, ...]  # in name order
    start: float  # when it is expected to fit there (seconds since the epoch)
    gpus: int  # whole GPUs it needs
