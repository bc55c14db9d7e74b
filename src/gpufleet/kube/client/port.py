"""Ports of the controller: the Kubernetes API it talks to and the clock it reads.

The controller, its informers and its leader election only see these protocols. Two adapters
implement :class:`ClusterApi`: :class:`gpufleet.kube.client.lightkube_api.LightkubeApi` over HTTP, and the
in-memory :class:`gpufleet.testing.fake_cluster.FakeCluster` used by unit tests (and, behind an HTTP front,
by the contract tests). Objects cross the port as plain JSON-like dicts, exactly as the API server
sends them, so that the controller converts them with the same functions ``gpufleet replay`` uses.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from gpufleet.domain import API_GROUP, API_VERSION

__all__ = [
    "ApiError",
    "Clock",
    "ClusterAccessError",
    "ClusterApi",
    "FieldSelector",
    "Kind",
    "ObjectList",
    "RealClock",
    "WatchEvent",
    "access_error",
    "object_key",
]

JsonDict = dict[str, Any]


class Kind(Enum):
    """The resources the controller reads or writes: (group, version, kind, plural, namespaced)."""

    NODE = ("", "v1", "Node", "nodes", False)
    POD = ("", "v1", "Pod", "pods", True)
    PRIORITY_CLASS = ("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", False)
    # Created only (create_access_review), never stored: the API server answers it in its status.
    SUBJECT_ACCESS_REVIEW = ("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews", False)
    # Likewise: who a bearer token belongs to (the dashboard's authentication, gpufleet.web.auth).
    TOKEN_REVIEW = ("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", False)
    QUEUE = (API_GROUP, API_VERSION, "Queue", "queues", False)
    POD_GROUP = (API_GROUP, API_VERSION, "PodGroup", "podgroups", True)
    SCHEDULER_CONFIG = (API_GROUP, API_VERSION, "SchedulerConfig", "schedulerconfigs", False)
    PDB = ("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True)
    LEASE = ("coordination.k8s.io", "v1", "Lease", "leases", True)
    EVENT = ("events.k8s.io", "v1", "Event", "events", True)
    PERSISTENT_VOLUME_CLAIM = ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True)
    PERSISTENT_VOLUME = ("", "v1", "PersistentVolume", "persistentvolumes", False)
    STORAGE_CLASS = ("storage.k8s.io", "v1", "StorageClass", "storageclasses", False)
    NAMESPACE = ("", "v1", "Namespace", "namespaces", False)
    # Tenancy (docs/tenancy.md): Projects for the controller; the RBAC kinds for snapshots.
    PROJECT = (API_GROUP, API_VERSION, "Project", "projects", False)
    # GPU-model quotas (docs/semantics.md): the flavors Queues give quota on.
    RESOURCE_FLAVOR = (API_GROUP, API_VERSION, "ResourceFlavor", "resourceflavors", False)
    ROLE = ("rbac.authorization.k8s.io", "v1", "Role", "roles", True)
    CLUSTER_ROLE = ("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False)
    ROLE_BINDING = ("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True)
    CLUSTER_ROLE_BINDING = ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False)
    # Dynamic Resource Allocation (docs/semantics-notes.md): read by informers and snapshots; the
    # controller writes ResourceClaims' status (allocation, reservedFor) before a pod's Binding.
    RESOURCE_SLICE = ("resource.k8s.io", "v1", "ResourceSlice", "resourceslices", False)
    DEVICE_CLASS = ("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", False)
    RESOURCE_CLAIM = ("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims", True)
    RESOURCE_CLAIM_TEMPLATE = ("resource.k8s.io", "v1", "ResourceClaimTemplate", "resourceclaimtemplates", True)
    # Workload owners the pod-grouper reads (gpufleet.policy.grouping.KINDS, one Kind per kind and
    # version read), and ReplicaSets, the link between a Deployment and its pods. Those of CRDs may
    # not be served (the pod-grouper skips them).
    JOB = ("batch", "v1", "Job", "jobs", True)
    REPLICA_SET = ("apps", "v1", "ReplicaSet", "replicasets", True)
    DEPLOYMENT = ("apps", "v1", "Deployment", "deployments", True)
    STATEFUL_SET = ("apps", "v1", "StatefulSet", "statefulsets", True)
    JOB_SET = ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", True)
    PYTORCH_JOB = ("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", True)
    MPI_JOB = ("kubeflow.org", "v2beta1", "MPIJob", "mpijobs", True)
    TRAIN_JOB = ("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs", True)
    # A TrainJob's pod templates live in its runtime (read for admission by suspension).
    TRAINING_RUNTIME = ("trainer.kubeflow.org", "v1alpha1", "TrainingRuntime", "trainingruntimes", True)
    CLUSTER_TRAINING_RUNTIME = ("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime",
                                "clustertrainingruntimes", False)
    RAY_CLUSTER = ("ray.io", "v1", "RayCluster", "rayclusters", True)
    RAY_JOB = ("ray.io", "v1", "RayJob", "rayjobs", True)
    LEADER_WORKER_SET = ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets", True)

    @property
    def group(self) -> str:
        return self.value[0]

    @property
    def version(self) -> str:
        return self.value[1]

    @property
    def kind(self) -> str:
        return self.value[2]

    @property
    def plural(self) -> str:
        return self.value[3]

    @property
    def namespaced(self) -> bool:
        return self.value[4]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


class ApiError(Exception):
    """A failed API call. ``status`` is the HTTP status (409 Conflict, 404 Not Found, 410 Gone,
    429 Too Many Requests, ...), or 0 when no answer came (connection refused or dropped,
    timeout): then the call may or may not have been applied."""

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def retryable(self) -> bool:
        """Worth trying again as is: no answer, a conflict, throttling or a server-side failure."""
        return self.status in (0, 409, 429) or self.status >= 500


class ClusterAccessError(Exception):
    """The cluster cannot be used, in one line for the user. ``exit_code`` 2: the user's input is
    wrong (a bad kubeconfig, a pod that does not exist); 1: the cluster or the network failed."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        line = " ".join(part.strip() for part in message.splitlines() if part.strip())
        super().__init__(line)
        self.exit_code = exit_code


def access_error(server: str, what: str, err: Exception) -> ClusterAccessError:
    """``err``, met while doing ``what`` against the API server at ``server``, as one line."""
    if not isinstance(err, ApiError):  # a reply the client could not decode: still one line
        return ClusterAccessError(f"{server}: {what}: {type(err).__name__}: {err}")
    if err.status == 0:
        if "timeout" in f"{err.reason} {err.message}".lower():
            return ClusterAccessError(f"{server}: {what}: the API server did not answer in time")
        detail = f" ({err.message})" if err.message else ""
        return ClusterAccessError(f"{server}: {what}: cannot reach the API server{detail}")
    return ClusterAccessError(f"{server}: {what}: HTTP {err.status}: {err.message or err.reason}")



@dataclass(frozen=True, slots=True)
class ObjectList:
    items: list[JsonDict]
    resource_version: str


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED (BOOKMARK events only move the resource version)
    object: JsonDict


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of an object; namespace "" for cluster-scoped objects."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ("", "")
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


# The fields the API server lets a pod list select on (pods' field label conversion), and for every
# kind metadata.name and metadata.namespace. Enough for the agent; others are refused as the API
# server refuses them, so that a selector that works on the emulator works on a cluster.
_SELECTABLE_FIELDS = {
    "": frozenset({"metadata.name", "metadata.namespace"}),
    "Pod": frozenset({"metadata.name", "metadata.namespace", "spec.nodeName", "spec.schedulerName",
                      "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
                      "status.nominatedNodeName"}),
}


@dataclass(frozen=True, slots=True)
class FieldSelector:
    """A field selector, as ``kubectl --field-selector`` takes it: terms ``field=value``,
    ``field==value`` or ``field!=value`` joined by commas, all of which must hold.
    ``FieldSelector.parse("spec.nodeName=node-1")``; :meth:`matches` is how the API server (and
    the emulator) applies it to an object, :meth:`text` what goes in the ``fieldSelector`` query."""

    terms: tuple[tuple[str, str, bool], ...]  # (field, value, equal)

    @classmethod
    def parse(cls, text: str) -> FieldSelector:
        """ValueError in one line naming the term when ``text`` is not a field selector."""
        terms: list[tuple[str, str, bool]] = []
        for part in text.split(","):
            op = next((op for op in ("!=", "==", "=") if op in part), "=")
            field, sep, value = part.partition(op)
            if not sep or not field.strip() or "=" in value or "!" in field:
                raise ValueError(f"field selector: expected field=value or field!=value, got {part!r}")
            terms.append((field.strip(), value.strip(), op != "!="))
        return cls(tuple(terms))

    @classmethod
    def equals(cls, field: str, value: str) -> FieldSelector:
        return cls(((field, value, True),))

    def text(self) -> str:
        return ",".join(f"{f}{'=' if equal else '!='}{v}" for f, v, equal in self.terms)

    def check(self, kind_name: str) -> None:
        """ValueError (the API server's 400) when a field cannot be selected on for this kind."""
        allowed = _SELECTABLE_FIELDS.get(kind_name, _SELECTABLE_FIELDS[""])
        for field, _, _ in self.terms:
            if field not in allowed:
                raise ValueError(f'field label not supported: "{field}"')

    def matches(self, obj: Mapping[str, Any]) -> bool:
        for field, value, equal in self.terms:
            node: Any = obj
            for step in field.split("."):
                node = node.get(step) if isinstance(node, Mapping) else None
            have = "" if node is None else str(node).lower() if isinstance(node, bool) else str(node)
            if (have == value) != equal:
                return False
        return True


class ClusterApi(Protocol):
    """The Kubernetes API as gpufleet uses it (see :mod:`gpufleet.kube.install.rbac` for the verbs).

    Every method raises :class:`ApiError` on failure."""

    @property
    def server(self) -> str:
        """The API server's URL, for messages."""
        ...

    @property
    def default_namespace(self) -> str:
        """The namespace of the current context (what ``kubectl`` uses without ``-n``)."""
        ...

    async def list(self, kind: Kind, field_selector: FieldSelector | None = None) -> ObjectList:
        """Every object of ``kind`` (all namespaces) and the list's resourceVersion; 404 when the
        API server does not serve ``kind`` (a CRD not installed). ``field_selector``: only the
        objects it matches, chosen by the API server (the node agent's ``spec.nodeName=<node>``)."""
        ...

    def watch(self, kind: Kind, resource_version: str,
              field_selector: FieldSelector | None = None) -> AsyncIterator[WatchEvent]:
        """Changes after ``resource_version`` (of the objects ``field_selector`` matches, when
        given). Raises ApiError(410) when that version is too old (the caller relists); ends or
        raises ApiError(0) when the connection is lost."""
        ...

    async def get(self, kind: Kind, namespace: str, name: str) -> JsonDict | None:
        """One object, None when it does not exist (or its kind is not served)."""
        ...

    async def create(self, kind: Kind, obj: JsonDict) -> JsonDict:
        """Create ``obj`` (409 when it exists); returns what the server stored."""
        ...

    async def replace(self, kind: Kind, obj: JsonDict) -> JsonDict:
        """PUT ``obj``; 409 when ``metadata.resourceVersion`` is not the current one."""
        ...

    async def patch(self, kind: Kind, namespace: str, name: str, patch: JsonDict) -> JsonDict:
        """A JSON merge patch (null deletes a key)."""
        ...

    async def patch_status(self, kind: Kind, namespace: str, name: str, status: JsonDict) -> None:
        """A JSON merge patch of the ``status`` subresource: ``{"status": status}``."""
        ...

    async def delete(self, kind: Kind, namespace: str, name: str) -> None:
        """DELETE one object; 404 when it does not exist."""
        ...

    async def bind(self, namespace: str, name: str, node: str, annotations: Mapping[str, str] | None = None) -> None:
        """POST a v1 Binding of the pod to ``node`` (pods/binding). 409 when already bound. The API
        server copies the Binding's ``annotations`` onto the pod in the same write."""
        ...

    async def evict(self, namespace: str, name: str) -> None:
        """POST a policy/v1 Eviction (pods/eviction). 429 when a PodDisruptionBudget forbids it."""
        ...

    async def close(self) -> None: ...

    async def create_access_review(self, review: JsonDict) -> JsonDict:
        """POST an ``authorization.k8s.io/v1`` SubjectAccessReview; returns it with the API
        server's answer in ``status`` (``allowed``, ``denied``, ``reason``)."""
        ...

    async def create_token_review(self, review: JsonDict) -> JsonDict:
        """POST an ``authentication.k8s.io/v1`` TokenReview; returns it with the API server's answer
        in ``status`` (``authenticated``, ``user`` with ``username``, ``uid``, ``groups``, ``extra``;
        ``error``)."""
        ...


class Clock(Protocol):
    """Time as the controller sees it; tests inject :class:`gpufleet.testing.fake_cluster.VirtualClock`."""

    def now(self) -> float:
        """Seconds since the epoch (lease and event timestamps, rate limits, timeouts)."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))
