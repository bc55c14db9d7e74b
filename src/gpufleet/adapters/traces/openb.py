"""Alibaba GPU trace v2023 "openb" (Weng et al., ATC'23): pod (task) lists and node lists.

Pod lists have 11 columns (``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
creation_time,deletion_time,scheduled_time``) or, in the ``multigpu*`` variants, only the first 5.
Times are seconds from the trace start. ``submit_s`` is ``creation_time``; ``duration_s`` is
``deletion_time - scheduled_time`` (the time the pod held its resources) or, for pods never
scheduled (pending when the trace was taken), ``deletion_time - creation_time`` (see
docs/trace-formats.md). The 5-column lists have no times: every task is submitted at 0 and never ends.
"""

from __future__ import annotations

from gpufleet.adapters.errors import describe
from gpufleet.adapters.traces._csv import RowError, Rows, check_header, opt_number, req_int, req_number
from gpufleet.adapters.traces.gpu_models import gpu_memory_mib
from gpufleet.adapters.traces.records import LoadReport, TraceJob, TraceNode

__all__ = [
    "NODE_COLUMNS",
    "POD_COLUMNS",
    "POD_COLUMNS_SHORT",
    "gpu_models",
    "gpu_request",
    "parse_openb_nodes",
    "parse_openb_pods",
]

POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
POD_COLUMNS_SHORT = POD_COLUMNS[:5]
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")

MAX_GPUS_PER_TASK = 1024
MAX_GPUS_PER_NODE = 64


def gpu_request(num_text: str, milli_text: str, num_field: str, milli_field: str) -> tuple[int, int]:
    """(num_gpu, gpu_milli) with the openb rules: milli 0..1000, fractions only on one GPU."""
    num_gpu = req_int(num_text, num_field, 0, MAX_GPUS_PER_TASK)
    gpu_milli = req_int(milli_text, milli_field, 0, 1000)
    if num_gpu == 0 and gpu_milli != 0:
        raise RowError(milli_field, f"must be 0 when {num_field} is 0, got {gpu_milli}")
    if num_gpu > 0 and gpu_milli == 0:
        raise RowError(milli_field, f"must be 1..1000 when {num_field} is {num_gpu}, got 0")
    if num_gpu > 1 and gpu_milli != 1000:
        raise RowError(milli_field, f"a fraction of a GPU ({gpu_milli}) needs {num_field} 1, got {num_gpu}")
    return num_gpu, gpu_milli


def gpu_models(text: str, field: str) -> tuple[str, ...]:
    """ "V100M16|V100M32" -> ("V100M16", "V100M32"); "" -> (); repeats dropped, order kept."""
    if not text.strip():
        return ()
    models: list[str] = []
    for part in text.split("|"):
        model = part.strip()
        if not model:
            raise RowError(field, f'must be GPU models separated by "|", got {describe(text)}')
        if model not in models:
            models.append(model)
    return tuple(models)


def _pod(rows: Rows, line: int, row: list[str]) -> TraceJob:
    name = rows.claim(row[0], "name", line)
    cpu_milli = req_int(row[1], "cpu_milli")
    memory_mib = req_int(row[2], "memory_mib")
    num_gpu, gpu_milli = gpu_request(row[3], row[4], "num_gpu", "gpu_milli")
    if len(row) == len(POD_COLUMNS_SHORT):
        return TraceJob(
            name=name,
            submit_s=0.0,
            duration_s=None,
            num_gpu=num_gpu,
            gpu_milli=gpu_milli,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
        )
    gpu_spec = gpu_models(row[5], "gpu_spec")
    creation = req_number(row[8], "creation_time")
    deletion = opt_number(row[9], "deletion_time")
    scheduled = opt_number(row[10], "scheduled_time")
    attrs = {"qos": row[6].strip(), "pod_phase": row[7].strip()}
    if scheduled is not None:
        if scheduled < creation:
            raise RowError("scheduled_time", f"{scheduled:g} is before creation_time {creation:g}")
        attrs["wait_s"] = f"{scheduled - creation:g}"
    started = creation if scheduled is None else scheduled
    duration: float | None = None
    if deletion is not None:
        if deletion < started:
            which = "creation_time" if scheduled is None else "scheduled_time"
            raise RowError("deletion_time", f"{deletion:g} is before {which} {started:g}")
        duration = deletion - started
        attrs["duration_from"] = "creation" if scheduled is None else "scheduled"
    return TraceJob(
        name=name,
        submit_s=creation,
        duration_s=duration,
        num_gpu=num_gpu,
        gpu_milli=gpu_milli,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        gpu_models=gpu_spec,
        attrs=attrs,
    )


def parse_openb_pods(rows: Rows) -> tuple[list[TraceJob], LoadReport]:
    width = len(rows.header)
    if width == len(POD_COLUMNS_SHORT):
        check_header(rows, POD_COLUMNS_SHORT)
    else:
        check_header(rows, POD_COLUMNS)
    jobs = rows.parse_all(width, lambda line, row: _pod(rows, line, row))
    return jobs, rows.report(len(jobs), "openb-pods")


def _node(rows: Rows, line: int, row: list[str]) -> TraceNode:
    name = rows.claim(row[0], "sn", line)
    gpus = req_int(row[3], "gpu", 0, MAX_GPUS_PER_NODE)
    model = row[4].strip()
    if gpus > 0 and not model:
        raise RowError("model", f"required for a node with {gpus} GPUs")
    return TraceNode(
        name=name,
        cpu_milli=req_int(row[1], "cpu_milli"),
        memory_mib=req_int(row[2], "memory_mib"),
        gpus=gpus,
        gpu_model=model if gpus > 0 else "",
        gpu_memory_mib=gpu_memory_mib(model) if gpus > 0 else 0,
    )


def parse_openb_nodes(rows: Rows) -> tuple[list[TraceNode], LoadReport]:
    check_header(rows, NODE_COLUMNS)
    nodes = rows.parse_all(len(NODE_COLUMNS), lambda line, row: _node(rows, line, row))
    return nodes, rows.report(len(nodes), "openb-nodes")
