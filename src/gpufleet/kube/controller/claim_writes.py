"""The ResourceClaim writes before a pod's Binding, as kube-scheduler's DynamicResources PreBind makes them.

For each claim a binding allocates (:attr:`gpufleet.domain.Binding.devices`, docs/semantics-notes.md,
"Dynamic Resource Allocation"), the claim's ``status`` gets, through the status subresource:

- ``allocation``: ``devices.results`` (the devices, as :meth:`gpufleet.adapters.DeviceView.attach`
  listed them), ``devices.config`` (the DeviceClass's opaque configs of each request, ``source:
  FromClass``, then the claim's own, ``FromClaim``, then for a fractional pod the DRA driver's MPS
  :func:`mps_config`, last; the resolver keeps a fractional pod whose claim sets a ``sharing`` of its
  own waiting), and ``nodeSelector`` (``matchFields
  metadata.name In [node]``);
- ``reservedFor``: the pod (``resource: pods``, its name and uid).

A claim another pod already holds (``shared``) only gets the pod appended to ``reservedFor``. Pods of
one :meth:`~gpufleet.kube.controller.binder.Binder.bind_gangs` call that name one claim share one
write. A write already in place (an earlier cycle wrote it and the Binding failed, or the controller
restarted in between) is not made again. :func:`release_status` is the write that clears an allocation
no pod holds (:attr:`gpufleet.adapters.DeviceView.stale`). This module only says what to write;
:class:`gpufleet.kube.controller.binder.Binder` writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.adapters import device_config_document
from gpufleet.domain import (
    BLOCKS_PER_GPU,
    Binding,
    ClaimAllocation,
    DeviceClass,
    DeviceConfig,
    PodKey,
    ResourceClaim,
    Snapshot,
)
from gpufleet.kube.client.port import Kind

__all__ = [
    "MPS_CONFIG_API_VERSION",
    "ClaimContext",
    "ClaimWrite",
    "ClaimWriteProblem",
    "allocation_status",
    "claim_writes",
    "mps_config",
    "release_status",
]

JsonDict = dict[str, Any]
CachedObject = Callable[[Kind, str, str], Mapping[str, Any] | None]  # (kind, namespace, name) -> object

MPS_CONFIG_API_VERSION = "resource.nvidia.com/v1beta1"  # NVIDIA's DRA driver's GpuConfig
FROM_CLASS = "FromClass"
FROM_CLAIM = "FromClaim"


class ClaimWriteProblem(Exception):
    """A claim write that cannot even be made (its claim is not in the cache), in one line."""


@dataclass(frozen=True, slots=True)
class ClaimWrite:
    namespace: str
    name: str
    status: JsonDict  # a JSON merge patch of the claim's status
    what: str  # for messages: 'resourceclaim "p-gpu-x7k2": its allocation'

    @property
    def target(self) -> tuple[Kind, str, str]:
        return (Kind.RESOURCE_CLAIM, self.namespace, self.name)


@dataclass(frozen=True)
class ClaimContext:
    """What a cycle read that the claim writes need: the claims and DeviceClasses (domain objects),
    and each node's GPU memory in MiB (from its labels or its GPU devices: the resolved snapshot)."""

    claims: Mapping[str, ResourceClaim] = field(default_factory=dict)  # "namespace/name" -> claim
    classes: Mapping[str, DeviceClass] = field(default_factory=dict)
    gpu_memory: Mapping[str, int | None] = field(default_factory=dict)  # node -> MiB per GPU

    @classmethod
    def of(cls, snapshot: Snapshot) -> ClaimContext:
        if not snapshot.resource_claims:
            return cls()
        return cls(
            claims={c.key: c for c in snapshot.resource_claims},
            classes={c.name: c for c in snapshot.device_classes},
            gpu_memory={n.name: n.gpu_memory_mib for n in snapshot.nodes},
        )


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    meta = obj.get("metadata") if obj is not None else None
    return meta if isinstance(meta, Mapping) else {}


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else {}


def mps_config(blocks: int, gpu_memory_mib: int | None) -> JsonDict:
    """The parameters of the DRA driver's ``GpuConfig`` that give a fractional pod its share of one
    GPU through MPS: ``blocks`` % of its threads and, when the GPU's memory is known, the blocks'
    share of it in MiB (rounded down)."""
    mps: JsonDict = {"defaultActiveThreadPercentage": blocks}
    if gpu_memory_mib:
        mps["defaultPinnedDeviceMemoryLimit"] = f"{blocks * gpu_memory_mib // BLOCKS_PER_GPU}Mi"
    return {"apiVersion": MPS_CONFIG_API_VERSION, "kind": "GpuConfig",
            "sharing": {"strategy": "MPS", "mpsConfig": mps}}


def _config(source: str, config: DeviceConfig, requests: Sequence[str]) -> JsonDict:
    return {"source": source, **device_config_document(replace(config, requests=tuple(requests)))}


def allocation_status(claim: ResourceClaim, allocation: ClaimAllocation, node: str, classes: Mapping[str, DeviceClass],
                      blocks: int | None = None, gpu_memory_mib: int | None = None) -> JsonDict:
    """The ``status.allocation`` of ``claim`` allocated ``allocation`` on ``node`` (see the module text)."""
    configs: list[JsonDict] = []
    for request in claim.requests:
        device_class = classes.get(request.device_class)
        for config in device_class.config if device_class is not None else ():
            configs.append(_config(FROM_CLASS, config, (request.name,)))
    configs.extend(_config(FROM_CLAIM, config, config.requests) for config in claim.config)
    if blocks is not None and allocation.results:  # last, so that it is the config the driver applies
        first = allocation.results[0]
        configs.append(_config(FROM_CLAIM, DeviceConfig(first.driver, mps_config(blocks, gpu_memory_mib)),
                               (first.request,)))
    devices: JsonDict = {"results": [{"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device}
                                     for r in allocation.results]}
    if configs:
        devices["config"] = configs
    return {"devices": devices, "nodeSelector": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}


def release_status() -> JsonDict:
    """The status patch that clears an allocation no pod holds."""
    return {"allocation": None, "reservedFor": None}


def _reference(pod: PodKey, uid: str) -> JsonDict:
    ref: JsonDict = {"resource": "pods", "name": str(pod).partition("/")[2]}
    if uid:
        ref["uid"] = uid
    return ref


def _reserved(current: Iterable[Any], pods: Iterable[tuple[PodKey, str]]) -> list[JsonDict]:
    """``current`` reservedFor entries with the pods appended that it does not name yet."""
    out = [dict(e) for e in current if isinstance(e, Mapping)]
    named = {e.get("name") for e in out if e.get("resource") == "pods" and not e.get("apiGroup")}
    for pod, uid in pods:
        ref = _reference(pod, uid)
        if ref["name"] not in named:
            out.append(ref)
            named.add(ref["name"])
    return out


@dataclass
class _Plan:
    """One claim's write, gathered over the bindings of a call."""

    claim: ResourceClaim
    obj: Mapping[str, Any]
    allocation: JsonDict | None = None  # set: a new allocation
    pods: list[tuple[PodKey, str]] = field(default_factory=list)  # (pod, uid) to reserve it for


def claim_writes(bindings: Iterable[Binding], context: ClaimContext, cached: CachedObject,
                 pod_uid: Callable[[PodKey], str]) -> tuple[dict[tuple[Kind, str, str], ClaimWrite],
                                                            dict[PodKey, list[tuple[Kind, str, str]]],
                                                            dict[PodKey, str]]:
    """The claim writes ``bindings`` still need: (writes by target, the targets each pod waits for,
    the pods whose writes cannot be made and why)."""
    plans: dict[tuple[Kind, str, str], _Plan] = {}
    uses: dict[PodKey, list[tuple[Kind, str, str]]] = {}
    problems: dict[PodKey, str] = {}
    for binding in bindings:
        namespace = str(binding.pod).partition("/")[0]
        for allocation in binding.devices:
            target = (Kind.RESOURCE_CLAIM, namespace, allocation.claim)
            plan = plans.get(target)
            if plan is None:
                obj = cached(Kind.RESOURCE_CLAIM, namespace, allocation.claim)
                claim = context.claims.get(f"{namespace}/{allocation.claim}")
                if obj is None or claim is None:
                    problems[binding.pod] = f'resourceclaim "{allocation.claim}" not found'
                    break
                plan = plans[target] = _Plan(claim, obj)
            if not allocation.shared and plan.allocation is None:
                plan.allocation = allocation_status(plan.claim, allocation, binding.node, context.classes,
                                                    binding.gpu_blocks, context.gpu_memory.get(binding.node))
            plan.pods.append((binding.pod, pod_uid(binding.pod)))
            uses.setdefault(binding.pod, []).append(target)
    writes: dict[tuple[Kind, str, str], ClaimWrite] = {}
    for target, plan in plans.items():
        _, namespace, name = target
        current = _status(plan.obj)
        if plan.allocation is not None:
            status: JsonDict = {"allocation": plan.allocation, "reservedFor": _reserved((), plan.pods)}
            if current.get("allocation") == status["allocation"]:
                status["reservedFor"] = _reserved(current.get("reservedFor") or (), plan.pods)
            what = f'resourceclaim "{name}": its allocation'
        else:  # the holders the cycle saw (the cache may not show a write of the last cycle yet), then these
            seen = [(PodKey(f"{namespace}/{n}"), pod_uid(PodKey(f"{namespace}/{n}"))) for n in plan.claim.reserved_for]
            status = {"reservedFor": _reserved(current.get("reservedFor") or (), [*seen, *plan.pods])}
            what = f'resourceclaim "{name}": its reservedFor'
        if all(current.get(k) == v for k, v in status.items()):
            continue  # already in place
        writes[target] = ClaimWrite(namespace, name, status, what)
    return writes, uses, problems
