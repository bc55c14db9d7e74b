"""One entry point per record type: :func:`load_trace` for jobs, :func:`load_nodes` for node lists.

The format (``kind``) is recognised from the header line when not given. The names ``openb`` and
``openb-default`` stand for the copies of the openb default task list and GPU node list bundled in
the package (``gpufleet/data/openb``), so nothing outside the installed package is needed for them.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TypeVar

from gpufleet.adapters._gc import no_gc
from gpufleet.adapters.errors import InputError, describe
from gpufleet.adapters.traces import alibaba, generic, openb, philly, summaries
from gpufleet.adapters.traces._csv import Rows, decode, read_text
from gpufleet.adapters.traces.records import LoadReport, TraceJob, TraceNode

__all__ = [
    "BUNDLED_NODE_NAMES",
    "BUNDLED_TASK_NAMES",
    "JOB_KINDS",
    "NODE_KINDS",
    "bundled_openb_nodes",
    "bundled_openb_tasks",
    "detect_kind",
    "load_nodes",
    "load_trace",
]

T = TypeVar("T")
Parser = Callable[[Rows], tuple[list[T], LoadReport]]

JOB_KINDS: dict[str, Parser[TraceJob]] = {
    "openb-pods": openb.parse_openb_pods,
    "philly": philly.parse_philly,
    "dlrm": alibaba.parse_dlrm,
    "generic": generic.parse_generic,
}
NODE_KINDS: dict[str, Parser[TraceNode]] = {
    "openb-nodes": openb.parse_openb_nodes,
    "pai-machines": alibaba.parse_pai_machines,
    "spot-nodes": alibaba.parse_spot_nodes,
}
_OTHER_TABLES = {
    "helios-vc-gpus": "a per-VC GPU count table (read it with load_vc_gpu_counts)",
    "summary": "a per-cluster summary table (read it with load_summary_table)",
}

BUNDLED_PACKAGE = "gpufleet"
BUNDLED_TASKS_FILE = "data/openb/openb_pod_list_default.csv"
BUNDLED_NODES_FILE = "data/openb/openb_node_list_gpu_node.csv"
BUNDLED_TASK_NAMES = ("openb", "openb-default")
BUNDLED_NODE_NAMES = ("openb", "openb-default", "openb-gpu-nodes")


def detect_kind(header: list[str]) -> str | None:
    """The format whose header (or, for the header-less PAI machine spec, first row) this is."""
    cells = [cell.strip() for cell in header]
    if tuple(cells) in (openb.POD_COLUMNS, openb.POD_COLUMNS_SHORT):
        return "openb-pods"
    if tuple(cells) == openb.NODE_COLUMNS:
        return "openb-nodes"
    if tuple(cells) == philly.COLUMNS:
        return "philly"
    if tuple(cells) == alibaba.DLRM_COLUMNS:
        return "dlrm"
    if tuple(cells) == alibaba.SPOT_COLUMNS:
        return "spot-nodes"
    if alibaba.looks_like_pai_machines(cells):
        return "pai-machines"
    if summaries.is_vc_gpu_header(cells):
        return "helios-vc-gpus"
    if summaries.is_summary_header(cells):
        return "summary"
    if generic.is_generic_header(cells):
        return "generic"
    return None


def _describe_kind(kind: str) -> str:
    if kind in JOB_KINDS:
        return f"a job trace ({kind}; read it with load_trace)"
    if kind in NODE_KINDS:
        return f"a node list ({kind}; read it with load_nodes)"
    return _OTHER_TABLES[kind]


def _bundled(file: str) -> tuple[str, str]:
    """(text, source name for messages) of a bundled data file."""
    data = resources.files(BUNDLED_PACKAGE).joinpath(file).read_bytes()
    return decode(data, f"{Path(file).name} (bundled)"), f"{Path(file).name} (bundled)"


def _load(
    path_or_name: str | Path,
    kind: str | None,
    skip_bad_rows: bool,
    kinds: dict[str, Parser[T]],
    what: str,
    bundled: tuple[tuple[str, ...], str],
) -> tuple[list[T], LoadReport]:
    if kind is not None and kind not in kinds:
        raise InputError(f"unknown {what} kind {describe(kind)} (expected one of {', '.join(kinds)})")
    names, file = bundled
    if isinstance(path_or_name, str) and path_or_name in names:
        text, source = _bundled(file)
    else:
        text, source = read_text(path_or_name), str(path_or_name)
    rows = Rows(text, source, skip_bad_rows=skip_bad_rows)
    detected = detect_kind(rows.header)
    if kind is None:
        if detected is None:
            raise rows.header_error(
                f"not a {what} format gpufleet knows ({', '.join(kinds)}); "
                f"got {describe(','.join(rows.header))}"
            )
        if detected not in kinds:
            raise rows.header_error(f"this is {_describe_kind(detected)}, not a {what}")
        kind = detected
    if kind == "pai-machines":  # no header line: the first line is data
        rows = Rows(text, source, skip_bad_rows=skip_bad_rows, has_header=False)
    with no_gc():
        return kinds[kind](rows)


def load_trace(
    path_or_name: str | Path, kind: str | None = None, skip_bad_rows: bool = False
) -> tuple[list[TraceJob], LoadReport]:
    """The jobs of a trace file, in file order, and what was read.

    ``kind``: one of :data:`JOB_KINDS` (``openb-pods``, ``philly``, ``dlrm``, ``generic``); None
    recognises it from the header. ``path_or_name`` ``openb`` / ``openb-default``: the bundled
    openb default task list. A malformed row raises :class:`InputError` (``FILE:LINE: field:
    problem``) unless ``skip_bad_rows``, which skips it and counts it in the report.
    """
    return _load(path_or_name, kind, skip_bad_rows, JOB_KINDS, "job trace", (BUNDLED_TASK_NAMES, BUNDLED_TASKS_FILE))


def load_nodes(
    path_or_name: str | Path, kind: str | None = None, skip_bad_rows: bool = False
) -> tuple[list[TraceNode], LoadReport]:
    """The machines of a node-list file, in file order, and what was read.

    ``kind``: one of :data:`NODE_KINDS` (``openb-nodes``, ``pai-machines``, ``spot-nodes``); None
    recognises it. ``openb`` / ``openb-default`` / ``openb-gpu-nodes``: the bundled openb GPU node
    list (1213 nodes, 6212 GPUs).
    """
    return _load(path_or_name, kind, skip_bad_rows, NODE_KINDS, "node list", (BUNDLED_NODE_NAMES, BUNDLED_NODES_FILE))


def bundled_openb_tasks() -> list[TraceJob]:
    """The openb default task list (8152 tasks) bundled in the package."""
    return load_trace(BUNDLED_TASK_NAMES[0])[0]


def bundled_openb_nodes() -> list[TraceNode]:
    """The openb GPU node list (1213 nodes, 6212 GPUs) bundled in the package."""
    return load_nodes(BUNDLED_NODE_NAMES[0])[0]
