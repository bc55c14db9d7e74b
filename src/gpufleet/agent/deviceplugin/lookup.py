"""Which pod the kubelet is starting, and whether the devices it asks for are the ones gpufleet chose.

The device plugin API does not say which pod an Allocate is for. Like HAMi and Volcano, the plugin
finds it among the pods bound to its node (the rules below, docs/gpu-assignment.md "Device plugin
path"). Everything here is pure: pods arrive as :class:`PodRecord` (read from the API objects by
:func:`pod_record`), GPUs as :class:`~gpufleet.agent.gpus.GpuInfo`; the service turns a
:class:`Refusal` into a gRPC error.

A pod is a *candidate* for a request of ``k`` devices of a resource when it is gpufleet's
(``schedulerName: gpufleet``), bound to this node, not running nor finished (the kubelet allocates
before it starts the containers), carries the scheduler's
``gpufleet.dev/gpu-index`` annotation, is whole-GPU (for ``nvidia.com/gpu``) or fractional (for
``gpufleet.dev/mps-share``), and has a container that asks for exactly ``k`` of that resource and
that the plugin has not served yet. Candidates are taken in the kubelet's admission order: earliest
``creationTimestamp``, then namespace and name.

- GetPreferredAllocation (no devices chosen yet): the first candidate whose devices are all
  available; else the first candidate.
- Allocate (devices chosen): the first candidate whose annotated GPUs hold every requested device.
  None: refused, naming the first candidate and the devices it was given, or saying there is none.
- Refused as well: a whole GPU that a fractional pod of the node holds, a GPU shared by MPS that a
  whole-GPU pod holds, a whole GPU that another pod holds, a GPU whose fractional pods would hold
  more than 100 blocks, annotated GPUs the node does not have, and annotations that do not parse
  (tenants can write annotations: nothing is guessed). A pod *holds* its GPUs once it runs or the
  plugin served one of its containers, until it finishes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.agent.gpus import GpuInfo
from gpufleet.domain import (
    ANNOTATION_GPU_BLOCKS,
    ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_MPS_MEM_LIMIT,
    BLOCKS_PER_GPU,
    GPU,
    SCHEDULER_NAME,
)
from gpufleet.domain.wire import ANNOTATION_DEVICES_ALLOCATED, RESOURCE_MPS_SHARE

__all__ = [
    "SHARES_PER_GPU",
    "Choice",
    "ContainerAsk",
    "PodRecord",
    "Refusal",
    "choose_for_allocate",
    "choose_preferred",
    "pod_record",
    "served_annotation",
    "share_device_id",
    "share_gpu_uuid",
]

# Virtual gpufleet.dev/mps-share devices per healthy GPU: one per block, so as many containers as a
# GPU can have fractional pods (each holds at least one block). Not a capacity: the blocks are.
SHARES_PER_GPU = BLOCKS_PER_GPU
_SHARE_SEPARATOR = "::"
_FINISHED = ("Succeeded", "Failed")
_MEM_LIMIT = re.compile(r"0=[1-9][0-9]{0,8}M")


def share_device_id(uuid: str, n: int) -> str:
    """The ID of the ``n``-th mps-share device of a GPU: ``GPU-<uuid>::07`` (44 characters; the API
    allows 63)."""
    return f"{uuid}{_SHARE_SEPARATOR}{n:02d}"


def share_gpu_uuid(device_id: str) -> str:
    """The GPU UUID of an mps-share device ID ("" when it is not one)."""
    uuid, sep, _ = device_id.rpartition(_SHARE_SEPARATOR)
    return uuid if sep else ""


@dataclass(frozen=True, slots=True)
class ContainerAsk:
    name: str
    gpus: int  # nvidia.com/gpu
    shares: int  # gpufleet.dev/mps-share

    def amount(self, resource: str) -> int:
        return self.gpus if resource == GPU else self.shares if resource == RESOURCE_MPS_SHARE else 0


@dataclass(frozen=True, slots=True)
class PodRecord:
    """What the plugin needs of one pod of gpufleet's on its node."""

    namespace: str
    name: str
    uid: str
    created: str  # creationTimestamp, RFC 3339 in UTC (compares as text)
    live: bool  # not Succeeded or Failed
    running: bool  # phase Running: its containers hold their devices
    gpu_indices: tuple[int, ...]  # the scheduler's gpu-index annotation; () when absent
    problem: str  # why the annotations cannot be used, "" when they can
    fractional: bool  # gpu-blocks or gpu-memory: an MPS share of one GPU
    blocks: int  # blocks held (fractional pods), 0 otherwise
    mem_limit: str  # the mps-mem-limit annotation, "" when absent
    containers: tuple[ContainerAsk, ...]  # init containers first, as the kubelet starts them
    served: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)  # container -> resource -> ids

    @property
    def holds(self) -> bool:
        """Its GPUs are in use: it runs, or the plugin has served one of its containers."""
        return self.live and (self.running or bool(self.served))

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def order(self) -> tuple[str, str, str]:
        return (self.created, self.namespace, self.name)

    def waiting_container(self, resource: str, count: int) -> str | None:
        """The first container not served yet that asks for exactly ``count`` of ``resource``."""
        for container in self.containers:
            if container.amount(resource) == count and resource not in self.served.get(container.name, {}):
                return container.name
        return None


def _int(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _asks(spec: Mapping[str, Any]) -> tuple[ContainerAsk, ...]:
    asks: list[ContainerAsk] = []
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or []:
            if not isinstance(container, Mapping):
                continue
            resources = container.get("resources") or {}
            limits = resources.get("limits") or {} if isinstance(resources, Mapping) else {}
            requests = resources.get("requests") or {} if isinstance(resources, Mapping) else {}
            if not isinstance(limits, Mapping) or not isinstance(requests, Mapping):
                continue

            def amount(resource: str, limits: Mapping[str, Any] = limits,
                       requests: Mapping[str, Any] = requests) -> int:
                return _int(limits.get(resource, requests.get(resource, 0)))

            asks.append(ContainerAsk(str(container.get("name") or ""), amount(GPU), amount(RESOURCE_MPS_SHARE)))
    return tuple(asks)


def _served(raw: Any) -> dict[str, dict[str, tuple[str, ...]]]:
    """The devices-allocated annotation; nothing when it does not parse (it only ever hides a pod's
    own containers from the plugin)."""
    try:
        data = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {}
    served: dict[str, dict[str, tuple[str, ...]]] = {}
    if isinstance(data, dict):
        for container, resources in data.items():
            if isinstance(resources, dict):
                served[str(container)] = {str(r): tuple(str(i) for i in ids) for r, ids in resources.items()
                                          if isinstance(ids, list)}
    return served


def served_annotation(served: Mapping[str, Mapping[str, Sequence[str]]]) -> str:
    """The devices-allocated annotation's value: ``{"<container>": {"<resource>": ["<id>", ...]}}``."""
    return json.dumps({c: {r: list(ids) for r, ids in sorted(res.items())} for c, res in sorted(served.items())},
                      separators=(",", ":"))


def pod_record(pod: Mapping[str, Any]) -> PodRecord:
    """A pod object (as the API server sends it) as the plugin reads it."""
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    assert isinstance(meta, Mapping) and isinstance(spec, Mapping) and isinstance(status, Mapping)
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    assert isinstance(annotations, Mapping)
    problem = ""
    indices: tuple[int, ...] = ()
    raw_index = annotations.get(ANNOTATION_GPU_INDEX)
    if raw_index is not None:
        parts = str(raw_index).split(",")
        if all(part.isdigit() and len(part) <= 3 for part in parts) and len(set(parts)) == len(parts):
            indices = tuple(int(part) for part in parts)
        else:
            problem = f"its {ANNOTATION_GPU_INDEX} annotation {str(raw_index)[:40]!r} is not a list of GPU indices"
    fractional = ANNOTATION_GPU_BLOCKS in annotations or ANNOTATION_GPU_MEMORY in annotations
    blocks = 0
    mem_limit = ""
    if fractional and not problem:
        raw_blocks = str(annotations.get(ANNOTATION_GPU_BLOCKS, ""))
        blocks = int(raw_blocks) if raw_blocks.isdigit() and len(raw_blocks) <= 3 else 0
        mem_limit = str(annotations.get(ANNOTATION_MPS_MEM_LIMIT, ""))
        if not 1 <= blocks <= BLOCKS_PER_GPU:
            problem = f"its {ANNOTATION_GPU_BLOCKS} annotation {raw_blocks[:40]!r} is not 1..{BLOCKS_PER_GPU}"
        elif len(indices) > 1:
            problem = f"it is fractional and its {ANNOTATION_GPU_INDEX} annotation names {len(indices)} GPUs"
        elif mem_limit and not _MEM_LIMIT.fullmatch(mem_limit):
            problem = f"its {ANNOTATION_MPS_MEM_LIMIT} annotation {mem_limit[:40]!r} is not 0=<MiB>M"
    return PodRecord(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        created=str(meta.get("creationTimestamp") or ""),
        live=status.get("phase") not in _FINISHED,
        running=status.get("phase") == "Running",
        gpu_indices=indices,
        problem=problem,
        fractional=fractional,
        blocks=blocks,
        mem_limit=mem_limit,
        containers=_asks(spec),
        served=_served(annotations.get(ANNOTATION_DEVICES_ALLOCATED)),
    )


def plugin_pod(pod: Mapping[str, Any], node: str) -> bool:
    """A pod the plugin keeps: gpufleet's, bound to ``node``."""
    spec = pod.get("spec")
    return isinstance(spec, Mapping) and spec.get("nodeName") == node and spec.get("schedulerName") == SCHEDULER_NAME


# ------------------------------------------------------------------------------------ choosing


@dataclass(frozen=True, slots=True)
class Refusal:
    message: str


@dataclass(frozen=True, slots=True)
class Choice:
    pod: PodRecord
    container: str
    gpus: tuple[GpuInfo, ...]  # the pod's annotated GPUs, in annotation order


def _ids(ids: Iterable[str]) -> str:
    return ",".join(ids) or "none"


def _candidates(pods: Iterable[PodRecord], resource: str, count: int) -> list[tuple[PodRecord, str]]:
    fractional = resource == RESOURCE_MPS_SHARE
    found = []
    for pod in pods:
        if not pod.live or pod.running or not (pod.gpu_indices or pod.problem) or pod.fractional != fractional:
            continue
        container = pod.waiting_container(resource, count)
        if container is not None:
            found.append((pod, container))
    found.sort(key=lambda pair: pair[0].order)
    return found


def _annotated(pod: PodRecord, gpus: Mapping[int, GpuInfo], node: str) -> tuple[GpuInfo, ...] | Refusal:
    if pod.problem:
        return Refusal(f"pod {pod.ref} on node {node}: {pod.problem}")
    missing = [index for index in pod.gpu_indices if index not in gpus]
    if missing:
        return Refusal(f"pod {pod.ref} was given GPU {','.join(map(str, missing))} by gpufleet, which node {node} "
                       f"does not have (or has in MIG mode)")
    return tuple(gpus[index] for index in pod.gpu_indices)


def _no_pod(resource: str, count: int, node: str, devices: Sequence[str]) -> Refusal:
    return Refusal(f"no pod of gpufleet's bound to node {node} waits for {count} {resource} with a "
                   f"{ANNOTATION_GPU_INDEX} annotation; refusing devices {_ids(devices)}")


def _conflict(pod: PodRecord, held: tuple[GpuInfo, ...], pods: Iterable[PodRecord]) -> Refusal | None:
    """Another pod of the node holds one of ``pod``'s GPUs (it runs or was served) in a way that cannot
    go with it: the first pod to start keeps its GPUs."""
    indices = {gpu.index: gpu for gpu in held}
    blocks = pod.blocks
    for other in sorted(pods, key=lambda p: p.order):
        if other.uid == pod.uid or not other.holds or other.problem:
            continue
        for index in other.gpu_indices:
            gpu = indices.get(index)
            if gpu is None:
                continue
            if pod.fractional and other.fractional:
                blocks += other.blocks
                continue
            kind = "the fractional pod" if other.fractional else "the whole-GPU pod"
            why = ("a whole GPU and MPS shares never go together" if pod.fractional != other.fractional
                   else "a whole GPU goes to one pod")
            return Refusal(f"GPU {index} ({gpu.uuid}) of pod {pod.ref} is held by {kind} {other.ref}: {why}")
    if pod.fractional and blocks > BLOCKS_PER_GPU:
        gpu = held[0]
        return Refusal(f"GPU {gpu.index} ({gpu.uuid}) of pod {pod.ref} would hold {blocks} blocks of fractional "
                       f"pods, more than {BLOCKS_PER_GPU}")
    return None


def choose_preferred(pods: Iterable[PodRecord], gpus: Sequence[GpuInfo], node: str, resource: str,
                     available: Sequence[str], must_include: Sequence[str], size: int) -> list[str] | Refusal:
    """GetPreferredAllocation for one container: the device IDs to prefer."""
    usable = {gpu.index: gpu for gpu in gpus if not gpu.mig_enabled}
    pods = list(pods)
    candidates = _candidates(pods, resource, size)
    if not candidates:
        return _no_pod(resource, size, node, must_include)
    free = set(available) | set(must_include)
    wanted: dict[str, list[str]] = {}
    for pod, _ in candidates:
        held = _annotated(pod, usable, node)
        if isinstance(held, Refusal):
            continue
        wanted[pod.uid] = _wanted_ids(held, resource, free, size)
        if set(wanted[pod.uid]) <= free and len(wanted[pod.uid]) == size:
            return wanted[pod.uid]
    first = candidates[0][0]
    held = _annotated(first, usable, node)
    return held if isinstance(held, Refusal) else wanted[first.uid]


def _wanted_ids(held: tuple[GpuInfo, ...], resource: str, free: set[str], size: int) -> list[str]:
    if resource == GPU:
        return [gpu.uuid for gpu in held]
    uuid = held[0].uuid
    shares = sorted(device for device in free if share_gpu_uuid(device) == uuid)
    return shares[:size]


def choose_for_allocate(pods: Iterable[PodRecord], gpus: Sequence[GpuInfo], node: str, resource: str,
                        devices: Sequence[str]) -> Choice | Refusal:
    """Allocate for one container: the pod it is for, or why it is refused."""
    usable = {gpu.index: gpu for gpu in gpus if not gpu.mig_enabled}
    pods = list(pods)
    count = len(devices)
    candidates = _candidates(pods, resource, count)
    if not candidates:
        return _no_pod(resource, count, node, devices)
    asked = set(devices) if resource == GPU else {share_gpu_uuid(device) for device in devices}
    for pod, container in candidates:
        held = _annotated(pod, usable, node)
        if isinstance(held, Refusal):
            continue
        if asked <= {gpu.uuid for gpu in held} and (resource == GPU or len(held) == 1):
            conflict = _conflict(pod, held, pods)
            return conflict if conflict is not None else Choice(pod, container, held)
    first = candidates[0][0]
    held = _annotated(first, usable, node)
    if isinstance(held, Refusal):
        return Refusal(f"{held.message}; refusing devices {_ids(devices)}")
    given = _ids(gpu.uuid for gpu in held)
    return Refusal(f"pod {first.ref} waits for {count} {resource} on node {node} and gpufleet gave it {given}; "
                   f"refusing devices {_ids(devices)}")
