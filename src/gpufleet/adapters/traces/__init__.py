"""Loaders for public GPU-cluster traces and a generic CSV format.

Public API (see docs/trace-formats.md for every format and field mapping)::

    load_trace(path_or_name, kind=None, skip_bad_rows=False) -> (list[TraceJob], LoadReport)
    load_nodes(path_or_name, kind=None, skip_bad_rows=False) -> (list[TraceNode], LoadReport)
    bundled_openb_tasks() -> list[TraceJob];  bundled_openb_nodes() -> list[TraceNode]
    load_vc_gpu_counts(path) -> (VcGpuCounts, LoadReport);  suggest_vc_quotas(counts, day=None) -> {vc: gpus}
    load_summary_table(path) -> {cluster: {column: value}}
    dump_generic_csv(jobs) -> str
"""

from gpufleet.adapters.traces.generic import dump_generic_csv
from gpufleet.adapters.traces.gpu_models import GPU_MEMORY_MIB, gpu_memory_mib
from gpufleet.adapters.traces.load import (
    BUNDLED_NODE_NAMES,
    BUNDLED_TASK_NAMES,
    JOB_KINDS,
    NODE_KINDS,
    bundled_openb_nodes,
    bundled_openb_tasks,
    detect_kind,
    load_nodes,
    load_trace,
)
from gpufleet.adapters.traces.records import LoadReport, TraceJob, TraceNode
from gpufleet.adapters.traces.summaries import VcGpuCounts, load_summary_table, load_vc_gpu_counts, suggest_vc_quotas

__all__ = [
    "BUNDLED_NODE_NAMES",
    "BUNDLED_TASK_NAMES",
    "GPU_MEMORY_MIB",
    "JOB_KINDS",
    "NODE_KINDS",
    "LoadReport",
    "TraceJob",
    "TraceNode",
    "VcGpuCounts",
    "bundled_openb_nodes",
    "bundled_openb_tasks",
    "detect_kind",
    "dump_generic_csv",
    "gpu_memory_mib",
    "load_nodes",
    "load_summary_table",
    "load_trace",
    "load_vc_gpu_counts",
    "suggest_vc_quotas",
]
