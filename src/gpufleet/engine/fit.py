"""The engine's fit test, as NumPy over all nodes: does a pod fit a node now, and which GPUs may a
share take. The placement, its pending reasons and the simulator's fill experiment all call these,
so that "fits" means one thing everywhere.

:func:`blocks_for_memory` is the vector form of the domain's scalar rule
:func:`gpufleet.domain.units.blocks_for_gpu_memory` (a property test checks they agree).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np

from gpufleet.domain import BLOCKS_PER_GPU
from gpufleet.domain.units import BYTES_PER_MIB
from gpufleet.engine.cluster import BoolArray, ClusterState, IntArray

__all__ = ["ResourceFit", "blocks_for_memory", "gpu_fit", "node_fit", "resources_fit", "share_cells"]

# Requests are clamped to this many bytes before the int64 arithmetic (x 100 blocks stays below
# 2**63): a larger request exceeds every GPU of up to 2**36 MiB (2**56 bytes) either way.
_MAX_EXACT_BYTES = 2**56 + 1


def blocks_for_memory(memory_bytes: int, gpu_memory_mib: IntArray) -> IntArray:
    """:func:`~gpufleet.domain.units.blocks_for_gpu_memory` for each node's GPU memory, with 0 where
    the scalar rule says None (unknown GPU memory, or more than one GPU's memory).

    Integer arithmetic like the scalar rule, exact for GPUs of up to 2**36 MiB."""
    known = gpu_memory_mib > 0
    gpu_bytes = np.where(known, gpu_memory_mib, 1) * BYTES_PER_MIB
    memory = min(max(memory_bytes, 0), _MAX_EXACT_BYTES)
    blocks = -(-(memory * BLOCKS_PER_GPU) // gpu_bytes)
    out: IntArray = np.where(known & (memory <= gpu_bytes), np.maximum(blocks, 1), 0).astype(np.int64)
    return out


def resources_fit(cluster: ClusterState, res: IntArray, columns: Sequence[int] | IntArray | None = None) -> BoolArray:
    """Nodes whose free amounts cover ``res`` (a vector over ``cluster.resources``) on ``columns``
    (default: every resource ``res`` asks for)."""
    # Called once per placement attempt: array methods, not the slower np.all/np.asarray wrappers.
    cols = np.flatnonzero(res) if columns is None else columns
    fit = cast(BoolArray, (cluster.free[:, cols] >= res[cols]).all(axis=1))
    return fit


def share_cells(cluster: ClusterState, need: IntArray | int) -> BoolArray:
    """(node, GPU) cells a share of ``need`` blocks (one number, or one per node; 0: cannot go
    there) may take now: a GPU not given out whole with that many free blocks."""
    need_col = np.asarray(need, dtype=np.int64).reshape(-1, 1)
    cells: BoolArray = (cluster.gpu_free >= need_col) & ~cluster.gpu_whole & (need_col > 0)
    return cells


def gpu_fit(cluster: ClusterState, whole: int, share: IntArray | int | None = None) -> BoolArray:
    """Nodes with room for a pod's GPUs now: ``whole`` free GPUs, or a GPU a share of ``share``
    blocks may take (see :func:`share_cells`); a pod with neither fits every node."""
    if share is not None:
        shares = cast(BoolArray, share_cells(cluster, share).any(axis=1))
        return shares
    fit: BoolArray = cluster.free_whole >= whole
    return fit


def node_fit(cluster: ClusterState, static: BoolArray, res: IntArray, whole: int,
             share: IntArray | int | None = None) -> BoolArray:
    """Nodes where a pod fits now: ``static`` (taints, selectors: StaticFeasibility's mask), its
    requests ``res`` within the free amounts, and its GPUs (see :func:`gpu_fit`)."""
    fit = static & resources_fit(cluster, res)
    if whole or share is not None:
        fit &= gpu_fit(cluster, whole, share)
    return fit


class ResourceFit:
    """:func:`resources_fit` for one request vector, kept up to date from ``ClusterState.dirty``:
    only the nodes changed since the last call are compared again (pods alike ask alike)."""

    def __init__(self, cluster: ClusterState, res: IntArray) -> None:
        self.cluster = cluster
        self.res = res.copy()
        self.cols = np.flatnonzero(res)
        self._need = self.res[self.cols]
        self._fit = resources_fit(cluster, self.res)
        self._seen = len(cluster.dirty)

    def mask(self) -> BoolArray:
        """Nodes whose free amounts cover the request now (read-only: do not write to it)."""
        dirty = self.cluster.dirty
        if len(dirty) > self._seen:
            if len(dirty) - self._seen > len(self._fit) // 16:
                self._fit = resources_fit(self.cluster, self.res)
            else:
                nodes = np.array(dirty[self._seen:], dtype=np.int64)
                self._fit[nodes] = (self.cluster.free[nodes][:, self.cols] >= self._need).all(axis=1)
            self._seen = len(dirty)
        return self._fit
