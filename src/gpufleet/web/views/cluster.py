"""The Cluster page: every node and GPU, grouped (rack, pool, GPU model), each group a summary bar
that opens into its nodes; inside a node its GPUs by NVLink domain, coloured by queue or by project.

Counting is NumPy over the fleet's GPU arrays (one ``bincount`` for all groups), so a page of 5,000
nodes costs the same handful of array operations as one of three. A caller sees by name the GPUs of
the pods it may see (their project's or their queue's); GPUs held by others are ``OTHER``, unnamed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufleet.domain import BLOCKS_PER_GPU, LABEL_POOL, LABEL_RACK
from gpufleet.web.access import Visibility
from gpufleet.web.fleet import FREE, NO_GPU, BoolArray, Fleet, IntArray

__all__ = ["COLORINGS", "GROUPINGS", "OTHER", "Cell", "ClusterView", "GroupSummary", "NodeRow", "cluster_group",
           "cluster_view"]

OTHER = -3  # a GPU held by a queue the caller may not see
GROUPINGS = ("rack", "pool", "model", "none")
COLORINGS = ("queue", "project")
NODES_PER_PAGE = 100  # nodes of one group shown at once (more: a "next" link)
MAX_BAR = 8  # queues named in a group's bar; the rest are summed as "others"


@dataclass(frozen=True, slots=True)
class GroupSummary:
    key: str
    nodes: int
    gpus: int
    held: float  # GPUs held (fractions as blocks/100)
    unhealthy: int
    cordoned: int
    bar: tuple[tuple[int, float], ...]  # (colour index or OTHER, GPUs), largest first
    measured: int = 0  # whole GPUs held (visible to the caller) whose pod's utilisation the ledger has
    used: float = 0.0  # their utilisation summed in GPUs (a GPU at 40% counts 0.4)

    @property
    def free(self) -> float:
        return max(0.0, self.gpus - self.held)


@dataclass(frozen=True, slots=True)
class ClusterView:
    by: str
    color: str  # queue | project
    groups: tuple[GroupSummary, ...]
    names: tuple[str, ...]  # the fleet's queue or project names (colour indexes index them)
    nodes: int
    gpus: int
    held: float
    unhealthy: int
    cordoned: int
    measured: int = 0  # as GroupSummary's, over the whole cluster
    used: float = 0.0


@dataclass(frozen=True, slots=True)
class Cell:
    gpu: int
    color: int  # queue or project index, FREE or OTHER (a fractional GPU: the first share's)
    pod: str | None  # the whole-GPU pod, when visible
    shares: tuple[tuple[int, int, str | None], ...]  # fractional: (colour or OTHER, blocks, pod or None)
    unhealthy: bool
    used: float | None = None  # the pod's measured GPU utilisation (%), when the ledger has it

    @property
    def free_blocks(self) -> int:
        return BLOCKS_PER_GPU - sum(b for _, b, _ in self.shares)


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    product: str
    cordoned: bool
    domains: tuple[tuple[Cell, ...], ...]  # GPUs by NVLink domain (one domain when none is declared)


@dataclass(frozen=True, slots=True)
class GroupPage:
    by: str
    color: str
    key: str
    nodes: tuple[NodeRow, ...]
    offset: int
    total: int
    next_offset: int | None


def _group_label(fleet: Fleet, by: str) -> str:
    if by == "rack":
        levels = [k for k in fleet.snapshot.config.topology_levels if k != "kubernetes.io/hostname"]
        return levels[0] if levels else LABEL_RACK
    return LABEL_POOL


def group_ids(fleet: Fleet, by: str) -> tuple[list[str], IntArray]:
    """The group names (sorted) and each node's group index."""
    cache = fleet.group_cache
    if by in cache:
        return cache[by]
    if by == "none":
        keys = ["all nodes"] * len(fleet.nodes)
    elif by == "model":
        keys = [n.gpu_product or "(no GPU model)" for n in fleet.nodes]
    else:
        label = _group_label(fleet, by)
        keys = [n.labels.get(label, f"(no {label})") for n in fleet.nodes]
    names = sorted(set(keys))
    where = {k: i for i, k in enumerate(names)}
    ids: IntArray = np.fromiter((where[k] for k in keys), dtype=np.int32, count=len(keys))
    cache[by] = (names, ids)
    return names, ids


def _masks(fleet: Fleet, vis: Visibility) -> tuple[BoolArray, BoolArray]:
    """Per queue and per project: may the caller see its pods."""
    queues: BoolArray = np.array([vis.sees_queue(q) or any(vis.sees_queue(q, p) for p in fleet.queue_projects(q))
                                  for q in fleet.queue_names], dtype=np.bool_)
    projects: BoolArray = np.array([vis.all or p in vis.projects for p in fleet.project_names[:-1]] + [vis.all],
                                   dtype=np.bool_)
    return queues, projects


def _colored(fleet: Fleet, vis: Visibility, color: str) -> tuple[IntArray, list[str], BoolArray, BoolArray]:
    """(each cell's colour index, FREE, NO_GPU or OTHER; the names; the queue and project masks)."""
    qmask, pmask = _masks(fleet, vis)
    grid, cp = fleet.grid, fleet.cell_project
    held = grid >= 0
    seen = held & (qmask[np.clip(grid, 0, None)] | pmask[np.clip(cp, 0, None)]) if grid.size else held
    source = cp if color == "project" else grid
    cells: IntArray = np.where(held & ~seen, OTHER, source).astype(np.int32)
    names = fleet.project_names if color == "project" else fleet.queue_names
    return cells, names, qmask, pmask


def cluster_view(fleet: Fleet, vis: Visibility, by: str = "rack", color: str = "queue") -> ClusterView:
    """The group summaries: per group its nodes, GPUs, GPUs held per queue (or project), unhealthy GPUs,
    cordoned nodes."""
    by = by if by in GROUPINGS else "rack"
    color = color if color in COLORINGS else "queue"
    names, ids = group_ids(fleet, by)
    cells, colors, qmask, pmask = _colored(fleet, vis, color)
    n_groups, n_colors = len(names), len(colors)
    other = n_colors  # the column of OTHER in the matrix
    held = cells != FREE
    held &= cells != NO_GPU
    column = np.where(cells == OTHER, other, cells)
    rows = np.broadcast_to(ids[:, None], cells.shape)
    matrix = np.zeros((n_groups, n_colors + 1))
    np.add.at(matrix, (rows[held], column[held]), 1.0)
    for (i, _g), shares in fleet.shares.items():
        for s in shares:
            index = s.project if color == "project" else s.queue
            matrix[ids[i], index if qmask[s.queue] or pmask[s.project] else other] += s.blocks / BLOCKS_PER_GPU
    gpus = np.bincount(ids, weights=(fleet.grid != NO_GPU).sum(axis=1), minlength=n_groups)
    bad = np.bincount(ids, weights=fleet.unhealthy.sum(axis=1), minlength=n_groups)
    cordoned = np.bincount(ids, weights=fleet.cordoned, minlength=n_groups)
    count = np.bincount(ids, minlength=n_groups)
    measured = np.zeros(n_groups)
    used = np.zeros(n_groups)
    if fleet.used is not None:  # allocated against used: the visible whole GPUs with a sample
        sampled = (cells >= 0) & ~np.isnan(fleet.used)
        measured = np.bincount(ids, weights=sampled.sum(axis=1), minlength=n_groups).astype(np.float64)
        used = np.bincount(ids, weights=np.where(sampled, fleet.used, 0.0).sum(axis=1) / 100.0,
                           minlength=n_groups).astype(np.float64)
    groups = []
    for k, name in enumerate(names):
        row = matrix[k]
        order = [int(q) for q in np.argsort(-row[:n_colors], kind="stable")[:MAX_BAR] if row[q] > 0]
        rest = float(row.sum() - row[order].sum())
        bar = tuple((q, float(row[q])) for q in order) + (((OTHER, rest),) if rest > 1e-9 else ())
        groups.append(GroupSummary(name, int(count[k]), int(gpus[k]), float(row.sum()), int(bad[k]), int(cordoned[k]),
                                   bar, int(measured[k]), float(used[k])))
    return ClusterView(by, color, tuple(groups), tuple(colors), len(fleet.nodes), int(gpus.sum()),
                       float(matrix.sum()), int(bad.sum()), int(cordoned.sum()), int(measured.sum()), float(used.sum()))


def cluster_group(fleet: Fleet, vis: Visibility, by: str, key: str, offset: int = 0,
                  limit: int = NODES_PER_PAGE, color: str = "queue") -> GroupPage | None:
    """One group's nodes (``limit`` from ``offset``), each GPU a cell; None for an unknown group."""
    if by not in GROUPINGS:
        return None
    color = color if color in COLORINGS else "queue"
    names, ids = group_ids(fleet, by)
    if key not in names:
        return None
    members = np.flatnonzero(ids == names.index(key))
    offset = max(0, offset)
    shown = members[offset:offset + limit]
    cells, _colors, qmask, pmask = _colored(fleet, vis, color)
    rows: list[NodeRow] = []
    for i in (int(x) for x in shown):
        node = fleet.nodes[i]
        row: list[Cell] = []
        for g in range(node.gpu_count):
            c = int(cells[i, g])
            shares = tuple(
                ((s.project if color == "project" else s.queue), s.blocks, s.pod) if qmask[s.queue] or pmask[s.project]
                else (OTHER, s.blocks, None)
                for s in fleet.shares.get((i, g), ()))
            if c == FREE and shares:
                c = shares[0][0]
            pod = fleet.cell_pods.get((i, g)) if int(cells[i, g]) >= 0 else None
            used = float(fleet.used[i, g]) if pod is not None and fleet.used is not None else None
            row.append(Cell(g, c, pod, shares, bool(fleet.unhealthy[i, g]),
                            None if used is None or np.isnan(used) else used))
        domains = node.nvlink_domains or (tuple(range(node.gpu_count)),)
        grouped = tuple(tuple(row[g] for g in d if g < len(row)) for d in domains)
        rows.append(NodeRow(node.name, node.gpu_product or "", bool(fleet.cordoned[i]), grouped))
    end = offset + len(shown)
    return GroupPage(by, color, key, tuple(rows), offset, len(members), end if end < len(members) else None)
