"""The modelled cluster: domain nodes with their pool, price and spot flag, and the simulator's own
record of what every GPU holds.

The engine keeps no state between cycles, so the simulator is the one that remembers which GPUs
each running pod holds. :class:`Occupancy` mirrors that in NumPy arrays and refuses any binding
that would over-commit a GPU, CPU or memory: an independent check of the engine's decisions at
every event, and the base of the fragmentation measure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpufleet.adapters.cluster_spec import ClusterLayout
from gpufleet.domain import BLOCKS_PER_GPU, CPU, MEMORY, MILLI, MILLI_PER_BLOCK, Node

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


class OvercommitError(RuntimeError):
    """A binding asked for capacity that is not free: a bug in the engine or the simulator."""


@dataclass(frozen=True, slots=True)
class SimNode:
    node: Node
    pool: str = ""
    price_per_gpu_hour: float = 0.0  # currency units per GPU-hour; 0: unpriced
    spot: bool = False


@dataclass(frozen=True, slots=True)
class SimCluster:
    nodes: tuple[SimNode, ...]

    def __post_init__(self) -> None:
        names = [n.node.name for n in self.nodes]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ValueError(f"node {dup} appears twice")

    @property
    def total_gpus(self) -> int:
        return sum(n.node.gpu_count - len(n.node.unhealthy_gpus) for n in self.nodes)

    def index(self) -> dict[str, int]:
        return {n.node.name: i for i, n in enumerate(self.nodes)}

    @classmethod
    def from_layout(cls, layout: ClusterLayout) -> SimCluster:
        """The cluster of a ClusterSpec or a trace node list; a node-hour price is spread over its GPUs
        (CPU-only nodes cost nothing: costs are per GPU-hour)."""
        nodes = []
        for node in layout.nodes:
            price = layout.price_per_hour.get(node.name, 0.0)
            nodes.append(SimNode(
                node=node,
                pool=layout.pool_of.get(node.name, ""),
                price_per_gpu_hour=price / node.gpu_count if node.gpu_count else 0.0,
                spot=node.name in layout.spot,
            ))
        return cls(tuple(nodes))


@dataclass(frozen=True, slots=True)
class Typical:
    """The pod the fragmentation measure asks about: whole GPUs, or blocks of one GPU, plus cpu/memory."""

    whole: int
    blocks: int  # 0 unless fractional
    cpu: int
    memory: int


class Occupancy:
    """Free capacity per node and per GPU, updated as the simulator binds and releases pods."""

    def __init__(self, cluster: SimCluster) -> None:
        nodes = [n.node for n in cluster.nodes]
        width = max(1, max((n.gpu_count for n in nodes), default=0))
        self.gpu_free: IntArray = np.full((len(nodes), width), -1, dtype=np.int64)  # -1: no such GPU
        for i, node in enumerate(nodes):
            for g in range(node.gpu_count):
                if g not in node.unhealthy_gpus:
                    self.gpu_free[i, g] = BLOCKS_PER_GPU
        self.gpu_whole: BoolArray = np.zeros((len(nodes), width), dtype=np.bool_)
        self.cpu_free: IntArray = np.array([n.allocatable.get(CPU, 0) for n in nodes], dtype=np.int64)
        self.mem_free: IntArray = np.array([n.allocatable.get(MEMORY, 0) for n in nodes], dtype=np.int64)
        self.up: BoolArray = np.array([not n.unschedulable for n in nodes], dtype=np.bool_)
        self.names = [n.name for n in nodes]
        self.gpus_per_node: IntArray = (self.gpu_free >= 0).sum(axis=1).astype(np.int64)
        self.price_per_gpu_s: list[float] = [n.price_per_gpu_hour / 3600.0 for n in cluster.nodes]

    def take(self, node: int, gpus: Sequence[int], blocks: int | None, cpu: int, memory: int) -> None:
        """Hold ``gpus`` (whole, or ``blocks`` of ``gpus[0]``), cpu and memory; raise when not free."""
        where = f"node {self.names[node]}"
        if not self.up[node]:
            raise OvercommitError(f"{where} is down")
        row, whole = self.gpu_free[node], self.gpu_whole[node]
        if blocks is not None:
            if len(gpus) != 1 or not 0 <= gpus[0] < row.size:
                raise OvercommitError(f"{where}: a fractional pod needs exactly one GPU, got {list(gpus)}")
            g = gpus[0]
            if whole[g] or row[g] < blocks:
                raise OvercommitError(f"{where} GPU {g}: {blocks} blocks asked, {max(int(row[g]), 0)} free")
        else:
            if len(set(gpus)) != len(gpus):
                raise OvercommitError(f"{where}: GPU listed twice in {list(gpus)}")
            for g in gpus:
                if not 0 <= g < row.size or row[g] != BLOCKS_PER_GPU:
                    raise OvercommitError(f"{where} GPU {g} is not free")
        if cpu > self.cpu_free[node] or memory > self.mem_free[node]:
            raise OvercommitError(f"{where}: cpu or memory over-committed")
        if blocks is not None:
            row[gpus[0]] -= blocks
        else:
            row[list(gpus)] = 0
            whole[list(gpus)] = True
        self.cpu_free[node] -= cpu
        self.mem_free[node] -= memory

    def release(self, node: int, gpus: Sequence[int], blocks: int | None, cpu: int, memory: int) -> None:
        row = self.gpu_free[node]
        if blocks is not None:
            row[gpus[0]] += blocks
        else:
            row[list(gpus)] = BLOCKS_PER_GPU
            self.gpu_whole[node, list(gpus)] = False
        self.cpu_free[node] += cpu
        self.mem_free[node] += memory

    def set_up(self, node: int, up: bool) -> None:
        self.up[node] = up

    # -- measures ---------------------------------------------------------------------------

    def capacity_milli(self) -> int:
        """GPU capacity of the nodes that are up, in milli-GPU."""
        return int(self.gpus_per_node[self.up].sum()) * MILLI

    def free_milli(self) -> IntArray:
        """Free GPU capacity per node (milli-GPU; 0 for nodes that are down)."""
        free = np.where(self.gpu_free > 0, self.gpu_free, 0).sum(axis=1) * MILLI_PER_BLOCK
        return np.where(self.up, free, 0).astype(np.int64)

    def can_host(self, typical: Typical) -> BoolArray:
        """Per node: whether one ``typical`` pod fits on its free capacity now."""
        if typical.blocks:
            gpu_ok = ((self.gpu_free >= typical.blocks) & ~self.gpu_whole).any(axis=1)
        else:
            gpu_ok = (self.gpu_free == BLOCKS_PER_GPU).sum(axis=1) >= typical.whole
        return gpu_ok & (self.cpu_free >= typical.cpu) & (self.mem_free >= typical.memory) & self.up

    def stranded_milli(self, typical: Typical) -> int:
        """Free GPU capacity on nodes that cannot host one ``typical`` pod (milli-GPU)."""
        free = self.free_milli()
        return int(free[~self.can_host(typical)].sum())
