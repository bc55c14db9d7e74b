"""What the node's GPUs say about the Node: its labels and annotations, and the patch that makes them so.

Pure functions of :class:`~gpufleet.agent.gpus.GpuInfo` (no I/O); the agent's service reads the GPUs,
calls :func:`node_gpu_metadata`, and sends :func:`metadata_patch`'s answer as a JSON merge patch.

The keys are those the engine reads (docs api.md, "Node labels and annotations"), named as NVIDIA's
GPU feature discovery (GFD) names them where it has a name:

- label ``nvidia.com/gpu.product``: GPU 0's product, spaces turned to dashes
  (``NVIDIA-H100-80GB-HBM3``), as GFD writes it;
- label ``nvidia.com/gpu.memory``: memory per GPU in MiB (the smallest GPU's, on a mixed node: the
  engine turns a pod's ``gpu-memory`` into blocks of it, and must not promise more than a GPU has);
- label ``nvidia.com/gpu.count``: the GPUs of the node;
- labels ``nvidia.com/mig-<profile>.count`` and ``.memory``: the MIG instances of each profile (GFD's
  mixed strategy), for people and node selectors: the engine counts MIG slices from the node's
  ``nvidia.com/mig-<profile>`` resources;
- annotation ``gpufleet.dev/nvlink-domains``: the GPUs joined by NVLink, ``"0-3;4-7"``.

Where GFD runs beside the agent, ``feature_labels=False`` leaves its labels alone and the agent
writes the annotation only. ``gpufleet.dev/unhealthy-gpus`` is the health rules', not discovery's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.agent.gpus import GpuInfo
from gpufleet.domain import ANNOTATION_NVLINK_DOMAINS, LABEL_GPU_MEMORY, LABEL_GPU_PRODUCT

__all__ = [
    "LABEL_GPU_COUNT",
    "MIG_LABEL_PREFIX",
    "MetadataPatch",
    "NodeGpuMetadata",
    "format_nvlink_domains",
    "metadata_patch",
    "node_gpu_metadata",
    "nvlink_domains",
    "owns_annotation",
    "owns_label",
    "product_label",
]

LABEL_GPU_COUNT = "nvidia.com/gpu.count"
MIG_LABEL_PREFIX = "nvidia.com/mig-"  # + "<profile>.count" / "<profile>.memory"
_MIG_LABEL = re.compile(r"nvidia\.com/mig-[0-9a-z.+-]+\.(count|memory)")
_FEATURE_LABELS = frozenset({LABEL_GPU_PRODUCT, LABEL_GPU_MEMORY, LABEL_GPU_COUNT})
_NOT_IN_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")
_LABEL_VALUE_MAX = 63


@dataclass(frozen=True, slots=True)
class NodeGpuMetadata:
    """The labels and annotations the node's GPUs call for (only the agent's own keys)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MetadataPatch:
    """Keys to set, and keys to delete (``None``), as a JSON merge patch writes them."""

    labels: Mapping[str, str | None] = field(default_factory=dict)
    annotations: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.labels and not self.annotations

    def merge_patch(self) -> dict[str, Any]:
        """The body of a ``PATCH`` with ``application/merge-patch+json``."""
        metadata: dict[str, Any] = {}
        if self.labels:
            metadata["labels"] = dict(self.labels)
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        return {"metadata": metadata}


def product_label(product: str) -> str:
    """``"NVIDIA H100 80GB HBM3"`` -> ``"NVIDIA-H100-80GB-HBM3"`` (GFD's form); anything a label value
    may not hold becomes a dash, and the value is cut to 63 characters."""
    value = _NOT_IN_LABEL_VALUE.sub("-", product.strip())[:_LABEL_VALUE_MAX]
    return value.strip("-_.")


def nvlink_domains(gpus: Iterable[GpuInfo]) -> tuple[tuple[int, ...], ...]:
    """The node's GPUs grouped by NVLink: the connected components of ``nvlink_peers`` (a link counts
    whichever end reports it), with every GPU on an NVSwitch in one domain. A GPU with no link is in
    no domain; peers that are not GPUs of the list are ignored. Domains in order of their first GPU."""
    listed = {gpu.index: gpu for gpu in gpus}
    parent = {index: index for index in listed}

    def root(index: int) -> int:
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    def join(a: int, b: int) -> None:
        first, second = root(a), root(b)
        if first != second:
            parent[max(first, second)] = min(first, second)

    switched = sorted(index for index, gpu in listed.items() if gpu.nvswitch)
    for index in switched[1:]:
        join(switched[0], index)
    for index, gpu in listed.items():
        for peer in gpu.nvlink_peers:
            if peer in listed and peer != index:
                join(index, peer)
    groups: dict[int, list[int]] = {}
    for index in sorted(listed):
        groups.setdefault(root(index), []).append(index)
    return tuple(tuple(members) for members in sorted(groups.values()) if len(members) > 1)


def format_nvlink_domains(domains: Iterable[Iterable[int]]) -> str:
    """``((0, 1, 2, 3), (4, 5, 7))`` -> ``"0-3;4,5,7"``: runs of three or more as ranges, as the engine's
    annotation parser reads them."""
    return ";".join(_runs(sorted(domain)) for domain in domains)


def _runs(indices: list[int]) -> str:
    parts: list[str] = []
    start = 0
    while start < len(indices):
        end = start
        while end + 1 < len(indices) and indices[end + 1] == indices[end] + 1:
            end += 1
        if end - start >= 2:
            parts.append(f"{indices[start]}-{indices[end]}")
        else:
            parts.extend(str(i) for i in indices[start:end + 1])
        start = end + 1
    return ",".join(parts)


def node_gpu_metadata(gpus: Iterable[GpuInfo], *, feature_labels: bool = True) -> NodeGpuMetadata:
    """The labels and annotations for a node with these GPUs (see the module's docstring)."""
    listed = sorted(gpus, key=lambda gpu: gpu.index)
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    if feature_labels:
        labels[LABEL_GPU_COUNT] = str(len(listed))
        product = product_label(listed[0].product) if listed else ""
        if product:
            labels[LABEL_GPU_PRODUCT] = product
        memory = [gpu.memory_mib for gpu in listed if gpu.memory_mib > 0]
        if memory:
            labels[LABEL_GPU_MEMORY] = str(min(memory))
        counts: dict[str, int] = {}
        memory_of: dict[str, int] = {}
        for gpu in listed:
            for instance in gpu.mig_instances if gpu.mig_enabled else ():
                counts[instance.profile] = counts.get(instance.profile, 0) + 1
                memory_of[instance.profile] = min(memory_of.get(instance.profile, instance.memory_mib),
                                                  instance.memory_mib)
        for profile in sorted(counts):
            labels[f"{MIG_LABEL_PREFIX}{profile}.count"] = str(counts[profile])
            labels[f"{MIG_LABEL_PREFIX}{profile}.memory"] = str(memory_of[profile])
    domains = nvlink_domains(listed)
    if domains:
        annotations[ANNOTATION_NVLINK_DOMAINS] = format_nvlink_domains(domains)
    return NodeGpuMetadata(labels=labels, annotations=annotations)


def owns_label(key: str, *, feature_labels: bool = True) -> bool:
    """Whether discovery writes (and so may delete) this label."""
    return feature_labels and (key in _FEATURE_LABELS or _MIG_LABEL.fullmatch(key) is not None)


def owns_annotation(key: str) -> bool:
    return key == ANNOTATION_NVLINK_DOMAINS


def metadata_patch(desired: NodeGpuMetadata, labels: Mapping[str, str], annotations: Mapping[str, str],
                   *, feature_labels: bool = True) -> MetadataPatch:
    """The patch that takes the Node's ``labels`` and ``annotations`` to ``desired``: discovery's keys
    set or deleted, every other key left as it is (the Node is the operator's)."""
    label_patch = _patch(desired.labels, labels, lambda key: owns_label(key, feature_labels=feature_labels))
    annotation_patch = _patch(desired.annotations, annotations, owns_annotation)
    return MetadataPatch(labels=label_patch, annotations=annotation_patch)


def _patch(desired: Mapping[str, str], current: Mapping[str, str],
           owned: Callable[[str], bool]) -> dict[str, str | None]:
    out: dict[str, str | None] = {key: value for key, value in desired.items() if current.get(key) != value}
    out.update({key: None for key in current if key not in desired and owned(key)})
    return out
