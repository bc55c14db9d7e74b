"""Cluster spec YAML (``kind: ClusterSpec``) and trace node lists -> domain :class:`Node` objects.

A cluster spec describes a simulated cluster as pools of identical nodes::

    apiVersion: gpufleet.dev/v1alpha1
    kind: ClusterSpec
    metadata: {name: demo}
    spec:
      pools:
      - name: a100                  # lowercase DNS label; node names are <namePrefix or name>-<index>
        count: 16
        gpusPerNode: 8
        gpuModel: A100-80GB         # label nvidia.com/gpu.product
        gpuMemory: 80Gi             # label nvidia.com/gpu.memory (MiB)
        cpu: "96"
        memory: 1Ti
        labels: {topology.gpufleet.dev/rack: "a100-rack-{index//8}"}
        nvlinkDomains: "0-3;4-7"    # annotation gpufleet.dev/nvlink-domains
        pricePerGpuHour: 2.5        # or pricePerNodeHour
        spot: false

Label values are templates: ``{pool}``, ``{index}`` (0-based within the pool) and
``{cluster_index}`` (0-based over all pools, in order), the two numbers optionally floor-divided
(``{index//8}``) and zero-padded (``{index//8:03}``). See docs/trace-formats.md ("Cluster spec").
Every problem is one :class:`InputError` line: ``FILE: spec.pools[0].gpuMemory: message``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, StrictStr
from pydantic_core import ErrorDetails

from gpufleet.adapters._documents import one_document
from gpufleet.adapters._fields import FieldError
from gpufleet.adapters._k8s_core import _nvlink_domains
from gpufleet.adapters._k8s_models import _message
from gpufleet.adapters.errors import InputError, describe
from gpufleet.adapters.quantity import to_milli
from gpufleet.adapters.traces.records import TraceNode
from gpufleet.domain import (
    ANNOTATION_NVLINK_DOMAINS,
    CPU,
    GPU,
    LABEL_GPU_MEMORY,
    LABEL_GPU_PRODUCT,
    MEMORY,
    MILLI,
    PODS,
    Node,
    NodeName,
    Taint,
    TaintEffect,
)
from gpufleet.domain import API_GROUP_VERSION as API_VERSION
from gpufleet.domain import LABEL_POOL as POOL_LABEL
from gpufleet.domain import LABEL_RACK as RACK_LABEL
from gpufleet.domain import LABEL_SPOT as SPOT_LABEL
from gpufleet.domain.units import MILLI_PER_MIB, mib_to_milli

__all__ = [
    "API_VERSION",
    "BUNDLED_CLUSTER_SPECS",
    "HOSTNAME_LABEL",
    "KIND",
    "POOL_LABEL",
    "RACK_LABEL",
    "SPOT_LABEL",
    "ClusterLayout",
    "cluster_from_trace_nodes",
    "load_bundled_cluster_spec",
    "load_cluster_spec_file",
    "load_cluster_spec_text",
    "trace_nodes_to_domain",
]

KIND = "ClusterSpec"
HOSTNAME_LABEL = "kubernetes.io/hostname"
DEFAULT_PODS_PER_NODE = 110  # the Kubernetes default
MAX_NODES = 200_000
MAX_GPUS_PER_NODE = 64
_RESERVED_LABELS = {
    HOSTNAME_LABEL: "the node name",
    LABEL_GPU_PRODUCT: "gpuModel",
    LABEL_GPU_MEMORY: "gpuMemory",
    POOL_LABEL: "the pool name",
    SPOT_LABEL: "spot",
}
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?"
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_PLACEHOLDER = re.compile(r"\{(pool|index|cluster_index)(?://([1-9][0-9]{0,8}))?(?::([0-9]{1,2}))?\}")


# ---------------------------------------------------------------------------------- the YAML model


def _quantity(value: object) -> int:
    return to_milli(value)  # QuantityError is a ValueError: pydantic reports our message


Quantity = Annotated[int, BeforeValidator(_quantity)]
Price = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaintSpec(_Model):
    key: Annotated[StrictStr, Field(min_length=1)]
    value: StrictStr = ""
    effect: TaintEffect


class PoolSpec(_Model):
    name: Annotated[StrictStr, Field(pattern=f"^{_DNS_LABEL}$")]
    count: Annotated[StrictInt, Field(ge=0, le=MAX_NODES)]
    namePrefix: Annotated[StrictStr, Field(pattern=f"^{_DNS_LABEL}$")] | None = None
    gpusPerNode: Annotated[StrictInt, Field(ge=0, le=MAX_GPUS_PER_NODE)] = 0
    gpuModel: Annotated[StrictStr, Field(min_length=1, max_length=63)] | None = None
    gpuMemory: Quantity | None = None
    cpu: Quantity
    memory: Quantity
    pods: Annotated[StrictInt, Field(ge=1, le=100_000)] = DEFAULT_PODS_PER_NODE
    extraResources: dict[StrictStr, Quantity] = Field(default_factory=dict)
    labels: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    annotations: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    taints: list[TaintSpec] = Field(default_factory=list)
    nvlinkDomains: StrictStr | None = None
    pricePerGpuHour: Price | None = None
    pricePerNodeHour: Price | None = None
    spot: StrictBool = False


class ClusterSpecBody(_Model):
    pools: Annotated[list[PoolSpec], Field(min_length=1)]


class ClusterMetadata(_Model):
    name: Annotated[StrictStr, Field(min_length=1)]


class ClusterSpecDocument(_Model):
    apiVersion: Literal["gpufleet.dev/v1alpha1"]
    kind: Literal["ClusterSpec"]
    metadata: ClusterMetadata
    spec: ClusterSpecBody


def _error_message(error: ErrorDetails) -> str:
    if error["type"] == "literal_error":
        return f"must be {error.get('ctx', {}).get('expected', '?')}, got {describe(error.get('input'))}"
    if error["type"] == "too_short":
        return f"must have at least {error.get('ctx', {}).get('min_length', 1)} item(s)"
    if error["type"] == "string_pattern_mismatch":
        return (
            "must be a lowercase DNS label (a-z, 0-9, '-', at most 40 characters), "
            f"got {describe(error.get('input'))}"
        )
    return _message(error)


# ------------------------------------------------------------------------------------- the output


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    """A simulated cluster: its nodes, and what the simulator needs beyond them."""

    name: str
    nodes: tuple[Node, ...]
    price_per_hour: Mapping[NodeName, float]  # per node-hour; 0.0 where no price was given
    pool_of: Mapping[NodeName, str]
    spot: frozenset[NodeName] = frozenset()

    @property
    def total_gpus(self) -> int:
        return sum(node.gpu_count for node in self.nodes)


# ----------------------------------------------------------------------------------- label templates


def _render(template: str, pool: str, index: int, cluster_index: int) -> str:
    def one(match: re.Match[str]) -> str:
        var, divisor, width = match.groups()
        if var == "pool":
            if divisor or width:
                raise FieldError("", f"{{pool}} takes no //N or :W, got {describe(match.group(0))}")
            return pool
        value = index if var == "index" else cluster_index
        if divisor:
            value //= int(divisor)
        return str(value).zfill(int(width)) if width else str(value)

    text = _PLACEHOLDER.sub(one, template)
    if "{" in text or "}" in text:
        raise FieldError(
            "",
            f"unknown placeholder in {describe(template)} (use {{pool}}, {{index}} or {{cluster_index}}, "
            "optionally {index//N} and {index:W})",
        )
    return text


def _check_label_key(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if _LABEL_NAME.fullmatch(name) is None or (prefix and _LABEL_PREFIX.fullmatch(prefix) is None):
        return f"invalid label key {describe(key)}"
    if key in _RESERVED_LABELS:
        return f"gpufleet sets {key} from {_RESERVED_LABELS[key]}; do not set it here"
    return None


def _label_value(template: str, pool: str, index: int, cluster_index: int, path: str) -> str:
    try:
        value = _render(template, pool, index, cluster_index)
    except FieldError as err:
        raise FieldError(path, err.message) from None
    if len(value) > 63 or _LABEL_VALUE.fullmatch(value) is None:
        raise FieldError(path, f"invalid label value {describe(value)} (node {index} of pool {pool})")
    return value


# ---------------------------------------------------------------------------------- pools -> nodes


@dataclass(frozen=True, slots=True)
class _PoolShape:
    """What every node of one pool shares."""

    allocatable: Mapping[str, int]
    annotations: Mapping[str, str]
    taints: tuple[Taint, ...]
    nvlink: tuple[tuple[int, ...], ...]
    gpu_memory_mib: int | None
    price: float  # per node-hour


def _shape(pool: PoolSpec, path: str) -> _PoolShape:
    allocatable = {CPU: pool.cpu, MEMORY: pool.memory, PODS: pool.pods * MILLI, GPU: pool.gpusPerNode * MILLI}
    for name, amount in pool.extraResources.items():
        if name in allocatable:
            raise FieldError(f"{path}.extraResources.{name}", "set by cpu, memory, pods or gpusPerNode")
        allocatable[name] = amount
    gpu_memory: int | None = None
    if pool.gpuMemory is not None:
        if pool.gpusPerNode == 0:
            raise FieldError(f"{path}.gpuMemory", "needs gpusPerNode > 0")
        gpu_memory = pool.gpuMemory // MILLI_PER_MIB
        if gpu_memory < 1:
            got = pool.gpuMemory // MILLI
            raise FieldError(f"{path}.gpuMemory", f"must be at least 1Mi (e.g. 80Gi), got {got} bytes")
    annotations = dict(pool.annotations)
    nvlink: tuple[tuple[int, ...], ...] = ()
    if pool.nvlinkDomains is not None:
        nvlink = _nvlink_domains(pool.nvlinkDomains, f"{path}.nvlinkDomains")
        too_big = [i for domain in nvlink for i in domain if i >= pool.gpusPerNode]
        if too_big:
            raise FieldError(
                f"{path}.nvlinkDomains", f"GPU {too_big[0]} does not exist on a node of {pool.gpusPerNode} GPUs"
            )
        annotations[ANNOTATION_NVLINK_DOMAINS] = pool.nvlinkDomains
    if pool.pricePerGpuHour is not None and pool.pricePerNodeHour is not None:
        raise FieldError(f"{path}.pricePerGpuHour", "give either pricePerGpuHour or pricePerNodeHour, not both")
    if pool.pricePerGpuHour is not None and pool.gpusPerNode == 0:
        raise FieldError(f"{path}.pricePerGpuHour", "a pool without GPUs needs pricePerNodeHour")
    price = pool.pricePerNodeHour or 0.0
    if pool.pricePerGpuHour is not None:
        price = pool.pricePerGpuHour * pool.gpusPerNode
    for key, template in pool.labels.items():
        problem = _check_label_key(key)
        if problem is not None:
            raise FieldError(f"{path}.labels.{key}", problem)
        _label_value(template, pool.name, 0, 0, f"{path}.labels.{key}")  # checked even when count is 0
    taints = tuple(Taint(key=t.key, value=t.value, effect=t.effect) for t in pool.taints)
    return _PoolShape(allocatable, annotations, taints, nvlink, gpu_memory, price)


def _pool_nodes(pool: PoolSpec, path: str, first_index: int) -> tuple[list[Node], float]:
    """The pool's nodes and the price of one node-hour."""
    shape = _shape(pool, path)
    prefix = pool.namePrefix or pool.name
    width = max(3, len(str(max(pool.count - 1, 0))))
    base = {POOL_LABEL: pool.name}
    if pool.gpuModel is not None:
        base[LABEL_GPU_PRODUCT] = pool.gpuModel
    if shape.gpu_memory_mib is not None:
        base[LABEL_GPU_MEMORY] = str(shape.gpu_memory_mib)
    if pool.spot:
        base[SPOT_LABEL] = "true"
    nodes: list[Node] = []
    for index in range(pool.count):
        name = NodeName(f"{prefix}-{index:0{width}d}")
        labels = dict(base)
        labels[HOSTNAME_LABEL] = name
        for key, template in pool.labels.items():
            labels[key] = _label_value(template, pool.name, index, first_index + index, f"{path}.labels.{key}")
        nodes.append(
            Node(
                name=name,
                labels=labels,
                annotations=shape.annotations,
                allocatable=shape.allocatable,
                taints=shape.taints,
                nvlink_domains=shape.nvlink,
                gpu_memory_mib=shape.gpu_memory_mib,
                gpu_product=pool.gpuModel,
            )
        )
    return nodes, shape.price


def _layout(doc: ClusterSpecDocument) -> ClusterLayout:
    nodes: list[Node] = []
    price: dict[NodeName, float] = {}
    pool_of: dict[NodeName, str] = {}
    spot: set[NodeName] = set()
    pool_names: dict[str, int] = {}
    for i, pool in enumerate(doc.spec.pools):
        path = f"spec.pools[{i}]"
        if pool.name in pool_names:
            raise FieldError(f"{path}.name", f"pool {describe(pool.name)} repeats spec.pools[{pool_names[pool.name]}]")
        pool_names[pool.name] = i
        pool_nodes, node_price = _pool_nodes(pool, path, len(nodes))
        for node in pool_nodes:
            if node.name in pool_of:
                other = pool_of[node.name]
                raise FieldError(f"{path}.namePrefix", f"node name {node.name} is also made by pool {other}")
            nodes.append(node)
            pool_of[node.name] = pool.name
            price[node.name] = node_price
            if pool.spot:
                spot.add(node.name)
    if len(nodes) > MAX_NODES:
        raise FieldError("spec.pools", f"{len(nodes)} nodes in all; at most {MAX_NODES}")
    return ClusterLayout(
        name=doc.metadata.name, nodes=tuple(nodes), price_per_hour=price, pool_of=pool_of, spot=frozenset(spot)
    )


def load_cluster_spec_text(text: str, source: str = "<cluster spec>") -> ClusterLayout:
    """The cluster described by one ``ClusterSpec`` YAML document; InputError for any problem."""
    doc = one_document(text, source, ClusterSpecDocument, "ClusterSpec", "a ClusterSpec (a mapping)", _error_message)
    try:
        return _layout(doc)
    except FieldError as err:
        raise InputError(f"{source}: {err}") from None


# ClusterSpecs shipped with the package, by the name `--cluster` takes (their files say what they model).
BUNDLED_CLUSTER_SPECS = {"openb-small": "data/clusters/openb-small.yaml"}


def load_bundled_cluster_spec(name: str) -> ClusterLayout:
    """A ClusterSpec shipped with the package (:data:`BUNDLED_CLUSTER_SPECS`)."""
    resource = resources.files("gpufleet").joinpath(BUNDLED_CLUSTER_SPECS[name])
    return load_cluster_spec_text(resource.read_text(encoding="utf-8"), name)


def load_cluster_spec_file(path: str | Path) -> ClusterLayout:
    """:func:`load_cluster_spec_text` of a file."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{source}: no such file") from None
    except UnicodeDecodeError:
        raise InputError(f"{source}: not UTF-8 text") from None
    except OSError as err:
        raise InputError(f"{source}: cannot read: {err.strerror or err}") from None
    except ValueError as err:  # e.g. a NUL character in the path
        raise InputError(f"{describe(source)}: cannot read: {err}") from None
    return load_cluster_spec_text(text, source)


# ------------------------------------------------------------------------------- trace node lists


def trace_nodes_to_domain(
    nodes: Iterable[TraceNode],
    *,
    pods_per_node: int = DEFAULT_PODS_PER_NODE,
    rack_size: int | None = None,
    unknown_memory_mib: int | None = None,
    names: Sequence[str] | None = None,
) -> tuple[Node, ...]:
    """Domain nodes for a trace's node list, in the same order: the one TraceNode -> Node
    conversion (the simulator's runs and its fill experiment both use it).

    ``names`` replaces the trace's node names (same order; the fill experiment names nodes after
    a seeded tie-break rank). Pod slots: ``pods_per_node``.
    Labels: ``kubernetes.io/hostname``, ``nvidia.com/gpu.product`` (the trace's model name, e.g.
    ``V100M32``, the same names as ``TraceJob.gpu_models``), ``nvidia.com/gpu.memory`` where the
    model's memory is known, ``gpufleet.dev/pool`` (the model, or ``cpu``) and, with ``rack_size``,
    ``topology.gpufleet.dev/rack`` = ``rack-NNNN`` for consecutive groups of that many nodes.
    A node whose memory the trace does not give (``memory_mib == 0``) gets ``unknown_memory_mib``,
    or no memory capacity at all when that is None.
    """
    if rack_size is not None and rack_size < 1:
        raise ValueError(f"rack_size must be >= 1, got {rack_size}")
    listed = list(nodes)
    if names is not None and len(names) != len(listed):
        raise ValueError(f"{len(names)} names for {len(listed)} nodes")
    out: list[Node] = []
    for i, trace_node in enumerate(listed):
        name = NodeName(trace_node.name if names is None else names[i])
        memory_mib = trace_node.memory_mib or unknown_memory_mib or 0
        allocatable = {CPU: trace_node.cpu_milli, PODS: pods_per_node * MILLI, GPU: trace_node.gpus * MILLI}
        if memory_mib:
            allocatable[MEMORY] = mib_to_milli(memory_mib)
        labels = {HOSTNAME_LABEL: name, POOL_LABEL: trace_node.gpu_model or "cpu"}
        if trace_node.gpu_model:
            labels[LABEL_GPU_PRODUCT] = trace_node.gpu_model
        if trace_node.gpu_memory_mib:
            labels[LABEL_GPU_MEMORY] = str(trace_node.gpu_memory_mib)
        if rack_size is not None:
            labels[RACK_LABEL] = f"rack-{i // rack_size:04d}"
        out.append(
            Node(
                name=name,
                labels=labels,
                allocatable=allocatable,
                gpu_memory_mib=trace_node.gpu_memory_mib or None,
                gpu_product=trace_node.gpu_model or None,
            )
        )
    return tuple(out)


def cluster_from_trace_nodes(
    name: str,
    nodes: Iterable[TraceNode],
    *,
    pods_per_node: int = DEFAULT_PODS_PER_NODE,
    rack_size: int | None = None,
    unknown_memory_mib: int | None = None,
) -> ClusterLayout:
    """A :class:`ClusterLayout` of a trace's node list (no prices: 0.0; pools by GPU model)."""
    domain = trace_nodes_to_domain(
        nodes, pods_per_node=pods_per_node, rack_size=rack_size, unknown_memory_mib=unknown_memory_mib
    )
    return ClusterLayout(
        name=name,
        nodes=domain,
        price_per_hour={node.name: 0.0 for node in domain},
        pool_of={node.name: node.labels[POOL_LABEL] for node in domain},
    )
