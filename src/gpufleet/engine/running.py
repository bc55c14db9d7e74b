"""The snapshot's running pods take their capacity before anything is decided.

Pods whose gpu-index annotation is complete are bound in bulk with NumPy (``Placer.commit_many``);
the others follow one by one (those whose annotation names GPUs of their node first, then in
order of start time, then name) and get the lowest free GPUs for what their annotation does not
name. A GPU held more than once is taken out of service, with a warning
(docs/semantics-notes.md, "Cluster state the engine does not trust"). Then the running members
count towards their gangs, and their usage towards their queues.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat
from operator import attrgetter, is_not, itemgetter
from typing import cast

import numpy as np

from gpufleet.domain import BLOCKS_PER_GPU, GPU, MILLI, PODS, Node
from gpufleet.engine.cluster import BoolArray, ClusterState, IntArray
from gpufleet.engine.placement import Assignment, Placer
from gpufleet.engine.quota import QuotaGates
from gpufleet.engine.workload import Gang, PodInfo

__all__ = ["bind_running", "preset_node_warnings"]

_BOUND = 1 << 31  # GPU indices from here on name no GPU (and fit in int64)


def _flavored_usage(quota: QuotaGates, ours: list[PodInfo], usage: IntArray, res_index: Mapping[str, int]) -> None:
    """Rows of ``usage`` (those of ``ours`` on a flavor's node) set to ``quota.quota_vec`` of their
    pod, by column and by (leaf, flavor) instead of pod by pod: the rows hold each pod's GPUs
    (``gpu_milli``) and requests on the resources nodes have; the other managed resources' requests
    are read here, then each flavored request moves to its flavor's dimension (FlavorBook.move)."""
    book = quota.flavors
    assert book is not None
    n = len(ours)
    flavor = np.fromiter(map(attrgetter("flavor"), ours), dtype=np.int64, count=n)
    leaf = np.fromiter(map(attrgetter("queue"), ours), dtype=np.int64, count=n)
    rows = np.flatnonzero((flavor >= 0) & np.isin(leaf, list(book.leaf_flavors)))
    if not len(rows):
        return
    managed = list(quota.forest.managed)
    column = {r: j for j, r in enumerate(managed)}
    for j, r in enumerate(managed):
        # Every resource a pod requests but GPUs is one of the cluster's (BuildSteps.cluster): the
        # others are asked by no pod, and their column stays 0.
        if r == PODS:
            usage[rows, j] = [ours[k].pod.requests.get(r, 0) for k in rows.tolist()]
    # The pods by (leaf, flavor), each group in pod order (the groups' rows are apart: any order).
    leaves, flavors = leaf[rows], flavor[rows]
    codes = leaves * (int(flavors.max()) + 1) + flavors
    order = np.argsort(codes, kind="stable")
    _, starts = np.unique(codes[order], return_index=True)
    bounds = [*starts.tolist()[1:], len(order)]
    for first, begin, end in zip(order[starts].tolist(), starts.tolist(), bounds, strict=True):
        moves = book.flavor_moves(int(leaves[first]), int(flavors[first]))
        if not moves:
            continue
        at_rows = rows[order[begin:end]]
        amounts = []  # read before any is moved, as quota_vec reads them from the pod
        for r, _, _ in moves:
            col = column.get(r)
            if col is not None:
                amounts.append(usage[at_rows, col].copy())
            elif r == GPU:
                amounts.append(_gpu_milli_column(quota, _take(ours, at_rows)))
            else:
                amounts.append(_int64([ours[k].pod.requests.get(r, 0) for k in at_rows.tolist()]))
        for (_, plain, dim), amount in zip(moves, amounts, strict=True):
            if plain >= 0:
                usage[at_rows, plain] -= amount
            usage[at_rows, dim] += amount


def _take(items: Sequence[PodInfo], at: IntArray) -> Sequence[PodInfo]:
    """``items`` at positions ``at`` (one C-level pass)."""
    if len(at) == 1:
        return [items[int(at[0])]]
    return itemgetter(*at.tolist())(items) if len(at) else []


def _gpu_milli_column(quota: QuotaGates, infos: Sequence[PodInfo]) -> IntArray:
    """:func:`_gpu_milli` as an array, by columns: a whole-GPU pod's GPUs, ``gpu_milli`` asked only of
    the fractional pods."""
    n = len(infos)
    out: IntArray = np.fromiter(map(attrgetter("whole"), infos), dtype=np.int64, count=n) * MILLI
    share = np.fromiter(map(is_not, map(attrgetter("blocks"), infos), repeat(None)), dtype=np.bool_, count=n)
    share |= np.fromiter(map(is_not, map(attrgetter("gpu_mem_bytes"), infos), repeat(None)), dtype=np.bool_, count=n)
    if share.any():
        gpu_milli = quota.gpu_milli
        for k in np.flatnonzero(share).tolist():
            out[k] = gpu_milli(infos[k])
    return out


def _int64(values: list[int]) -> IntArray:
    """``np.array(values, dtype=np.int64)`` of a long list of ints, without its per-item type discovery."""
    out: IntArray = np.fromiter(values, dtype=np.int64, count=len(values))
    return out


def _gpu_milli(quota: QuotaGates, infos: list[PodInfo]) -> list[int]:
    """``quota.gpu_milli`` of each of ``infos`` (the rule eviction subtracts by: usage never
    drifts), asked only for the fractional pods: a whole-GPU pod counts its GPUs."""
    gpu_milli = quota.gpu_milli
    return [i.whole * MILLI if i.blocks is None and i.gpu_mem_bytes is None else gpu_milli(i) for i in infos]


def bind_running(pods: Sequence[PodInfo], requests: IntArray, placer: Placer, gangs: Sequence[Gang],
                 quota: QuotaGates) -> list[str]:
    """Bind every running pod of ``pods`` (rows of ``requests``) where the snapshot has it; returns
    the warnings about GPU annotations it could not take as they are (docs/semantics-notes.md,
    "Cluster state the engine does not trust")."""
    c = placer.cluster
    width = c.gpu_free.shape[1]
    index = c.index
    counts: list[int] = c.gpu_count.tolist()  # an annotation names GPUs below its node's count
    # The pod table has no finished pod; those on nodes the cluster has are running.
    running = [p for p in pods if p.pod.node_name in index]
    # The bulk (complete gpu-index) is sorted from the rest by columns: the pods taking one GPU or
    # none, or a share of one, with NumPy; only those naming several GPUs are looked at one by one.
    n_run = len(running)
    indices = [i.pod.gpu_index for i in running]
    node_list = [index[n] for n in cast(list[str], [i.pod.node_name for i in running])]
    nodes = _int64(node_list)
    lens = np.fromiter(map(len, indices), dtype=np.int64, count=n_run)
    first = np.fromiter([t[0] if t and 0 <= t[0] < _BOUND else -1 for t in indices], dtype=np.int64, count=n_run)
    # GPUs wanted whole; -1: a share of one with its blocks indices, -2: a share by GPU memory
    wanted = np.fromiter([i.whole if i.blocks is None and i.gpu_mem_bytes is None else -1 if i.blocks is not None
                          else -2 for i in running], dtype=np.int64, count=n_run)
    one_ok = (lens == 1) & (first >= 0) & (first < c.gpu_count[nodes])
    is_share = (wanted == -1) & one_ok
    is_whole = (lens == wanted) & ((lens == 0) | one_ok)
    several = np.flatnonzero((lens == wanted) & (lens > 1)).tolist()
    for k in several:  # each GPU named once, all of the node's
        idx = indices[k]
        if min(idx) >= 0 and max(idx) < counts[node_list[k]] and len(set(idx)) == len(idx):
            is_whole[k] = True
    in_bulk = is_share | is_whole
    rest = [running[k] for k in np.flatnonzero(~in_bulk).tolist()] if not in_bulk.all() else []
    bulk_at = np.flatnonzero(in_bulk)
    b_nodes = nodes[bulk_at]
    for k, node in zip(bulk_at.tolist(), b_nodes.tolist(), strict=True):
        info = running[k]
        info.node, info.gpus = node, indices[k]
    share_at = np.flatnonzero(is_share)
    shares = (nodes[share_at], first[share_at],
              np.array([running[k].blocks for k in share_at.tolist()], dtype=np.int64))
    for k in share_at.tolist():
        info = running[k]
        info.bound_blocks = info.blocks
    one_at = np.flatnonzero(is_whole & (lens == 1))
    w_nodes, w_gpus = nodes[one_at], first[one_at]
    if several:
        many = [k for k in several if is_whole[k]]
        w_nodes = np.concatenate([w_nodes, np.repeat(nodes[many], lens[many])])
        w_gpus = np.concatenate([w_gpus, np.array([g for k in many for g in indices[k]], dtype=np.int64)])
    whole = (w_nodes, w_gpus)
    b_pods = [running[k].idx for k in bulk_at.tolist()]
    warnings: list[str] = []
    if b_pods:
        bulk = _int64(b_pods)
        twice = _held_twice(width, c.gpu_free.size, whole, shares)
        if len(twice):  # rare: name the pods with Python, then take the cells out of service
            warnings.extend(_held_twice_warnings(c.nodes, [pods[b] for b in b_pods], twice, width))
            c.retire(twice // width, twice % width)
        placer.commit_many(bulk, b_nodes, requests[bulk], whole, shares)
    usable = [_usable_index(info, counts[index[info.pod.node_name or ""]]) for info in rest]
    # Pods whose annotation names GPUs first, then those whose annotation is not usable, then the rest.
    rest_order = sorted(range(len(rest)), key=lambda i: (0 if usable[i] else 1 if rest[i].pod.gpu_index else 2,
                                                         rest[i].start, rest[i].key))
    for i in rest_order:
        info = rest[i]
        node = c.index[info.pod.node_name or ""]
        gpus = usable[i]
        annotated = info.pod.gpu_index
        bad = [g for g in annotated if not 0 <= g < counts[node]]
        if bad and (info.whole or info.fractional):
            warnings.append(f"pod {info.key} is annotated with GPU {','.join(map(str, bad))} of node "
                            f"{c.nodes[node].name}, which has {counts[node]} GPUs: it holds the lowest free GPUs "
                            "instead")
        blocks: int | None = None
        if info.fractional:
            blocks = info.blocks if info.blocks is not None else info.blocks_on(int(c.gpu_memory_mib[node]))
            blocks = blocks or 1
            gpus = gpus[:1]
            if gpus and c.healthy[node, gpus[0]] and (c.gpu_whole[node, gpus[0]]
                                                      or c.gpu_free[node, gpus[0]] < blocks):
                warnings.append(_retire_one(c, node, gpus[0], info, running))
            if not gpus:
                g = c.fractional_gpu_on(node, blocks, False)
                gpus = (g,) if g is not None else ()
            if not gpus:
                blocks = None  # nowhere to put it: holds cpu/memory only
        else:
            for g in gpus:  # the GPUs its annotation names, then the lowest free ones for the rest
                if c.healthy[node, g] and c.gpu_free[node, g] != BLOCKS_PER_GPU:
                    warnings.append(_retire_one(c, node, g, info, running))
            if len(gpus) < info.whole:
                more = [g for g in c.whole_gpus_for(node, info.whole, (), False) if g not in gpus]
                gpus = gpus + tuple(more[:info.whole - len(gpus)])
        placer.commit(Assignment(info.idx, node, gpus, blocks))
    ours = [info for info in running if info.gang >= 0]
    for info in ours:
        gangs[info.gang].alive += 1
    forest = quota.forest
    managed = forest.managed
    if ours and managed:
        # Queue usage of everything running, summed per leaf with NumPy, then added once per leaf.
        rows = _int64([i.idx for i in ours])
        leaves = _int64([i.queue for i in ours])
        usage = np.zeros((len(ours), len(managed)), dtype=np.int64)
        for j, r in enumerate(managed):
            if r == GPU:
                usage[:, j] = _int64(_gpu_milli(quota, ours))
            elif r in c.res_index and r != PODS:
                usage[:, j] = requests[rows, c.res_index[r]]
        if quota.flavors is not None:  # pods on a flavor's nodes count there (engine/flavors.py)
            _flavored_usage(quota, ours, usage, c.res_index)
        order = np.argsort(leaves, kind="stable")
        by_leaf, starts = np.unique(leaves[order], return_index=True)
        sums = np.add.reduceat(usage[order], starts, axis=0).tolist()
        for leaf, total in zip(by_leaf.tolist(), sums, strict=True):
            if leaf >= 0:
                forest.add(leaf, total)
    return warnings


def _usable_index(info: PodInfo, count: int) -> tuple[int, ...]:
    """The GPUs of its node that a running pod's gpu-index names (those below ``count``, the
    node's GPUs), as many as it holds; it gets the lowest free ones for the others."""
    return tuple(g for g in info.pod.gpu_index if 0 <= g < count)[:1 if info.fractional else info.whole]


def _held_twice(width: int, cells_total: int, whole: tuple[IntArray, IntArray],
                shares: tuple[IntArray, IntArray, IntArray]) -> IntArray:
    """Cells (``node * width + gpu``) that the bulk's running pods hold more than once: a GPU given
    out whole twice, a share on a GPU given out whole, shares adding up to more than a GPU.
    Counted per cell with ``bincount`` (linear: every running pod passes here)."""
    held = np.bincount(whole[0] * width + whole[1], minlength=cells_total)
    found = held > 1
    if len(shares[0]):
        blocks = np.bincount(shares[0] * width + shares[1], weights=shares[2], minlength=cells_total)
        found |= ((blocks > 0) & (held > 0)) | (blocks > BLOCKS_PER_GPU)
    out: IntArray = np.flatnonzero(found).astype(np.int64)
    return out


def _held_twice_warnings(nodes: Sequence[Node], bulk: Sequence[PodInfo], cells: IntArray, width: int) -> list[str]:
    holders: dict[int, list[str]] = {int(cell): [] for cell in cells.tolist()}
    for info in bulk:
        node = info.node if info.node is not None else -1
        for g in info.gpus:
            got = holders.get(node * width + g)
            if got is not None:
                got.append(info.key)
    return [_twice_text(nodes[cell // width].name, cell % width, keys) for cell, keys in sorted(holders.items())]


def _twice_text(node: str, gpu: int, keys: Sequence[str]) -> str:
    return (f"GPU {gpu} of node {node} is held by more than one running pod ({', '.join(sorted(keys))}): "
            "out of service")


def _retire_one(c: ClusterState, node: int, gpu: int, info: PodInfo, running: Sequence[PodInfo]) -> str:
    """Take one cell out of service (a pod of the rest claims a GPU already held); the warning."""
    keys = [p.key for p in running if p.node == node and gpu in p.gpus] + [info.key]
    c.retire(np.array([node], dtype=np.int64), np.array([gpu], dtype=np.int64))
    return _twice_text(c.nodes[node].name, gpu, keys)


def preset_node_warnings(pods: Sequence[PodInfo], cluster: ClusterState) -> list[str]:
    """Pods of ours still Pending on a node set in ``spec.nodeName`` by their author (no scheduler
    chose it), where the node cannot hold what is bound there: counted there all the same, as the
    kubelet runs them or rejects them; said, never hidden. One vector test when nothing is short."""
    short_res: BoolArray = cluster.free < 0
    short: BoolArray = np.logical_or(short_res.any(axis=1), (cluster.gpu_free < -1).any(axis=1))
    if not short.any():
        return []
    out: list[str] = []
    for info in pods:
        node = info.node
        pod = info.pod
        if node is None or not short[node] or pod.phase != "Pending" or info.queue < 0:
            continue
        what = [cluster.resources[j] for j in np.flatnonzero(short_res[node])]
        if (cluster.gpu_free[node] < -1).any():
            what.append("GPU blocks")
        out.append(f"pod {info.key} names node {pod.node_name} in spec.nodeName and is counted there, but the "
                    f"node is over-committed ({', '.join(what)}): the kubelet may reject it")
    return out
