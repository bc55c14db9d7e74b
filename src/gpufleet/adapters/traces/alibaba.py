"""The other Alibaba traces: PAI 2020 machine spec, spot-GPU 2026 node list, DLRM serving 2025.

- ``pai_machine_spec.csv`` (no header): ``machine,gpu_type,cap_cpu,cap_mem,cap_gpu`` with vCPUs,
  memory in GB (read as GiB) and GPUs per machine; ``gpu_type`` ``CPU`` is a CPU-only machine.
- ``node_info_df.csv``: ``gpu_model,gpu_capacity_num,cpu_num,node_name``; no memory column, so
  ``memory_mib`` is 0 (unknown).
- ``disaggregated_DLRM_trace.csv``: one long-running inference instance per row, with requests
  (vCPU, whole GPUs, memory in GiB) and times in seconds from the trace start, empty when the
  instance existed before the trace window (creation) or outlived it (deletion).
"""

from __future__ import annotations

from gpufleet.adapters.traces._csv import RowError, Rows, check_header, opt_number, req_int, req_number
from gpufleet.adapters.traces.gpu_models import gpu_memory_mib
from gpufleet.adapters.traces.records import LoadReport, TraceJob, TraceNode
from gpufleet.domain import MILLI

__all__ = [
    "DLRM_COLUMNS",
    "PAI_GPU_TYPES",
    "SPOT_COLUMNS",
    "looks_like_pai_machines",
    "parse_dlrm",
    "parse_pai_machines",
    "parse_spot_nodes",
]

PAI_COLUMNS = ("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu")
PAI_GPU_TYPES = frozenset({"P100", "T4", "MISC", "V100", "V100M32", "CPU"})
SPOT_COLUMNS = ("gpu_model", "gpu_capacity_num", "cpu_num", "node_name")
DLRM_COLUMNS = (
    "instance_sn",
    "role",
    "app_name",
    "cpu_request",
    "cpu_limit",
    "gpu_request",
    "gpu_limit",
    "rdma_request",
    "rdma_limit",
    "memory_request",
    "memory_limit",
    "disk_request",
    "disk_limit",
    "max_instance_per_node",
    "creation_time",
    "scheduled_time",
    "deletion_time",
)
MAX_GPUS_PER_NODE = 64
MIB_PER_GIB = 1024


def looks_like_pai_machines(first_row: list[str]) -> bool:
    """The PAI machine spec has no header: recognise it by its first data row."""
    if len(first_row) != len(PAI_COLUMNS) or first_row[1].strip() not in PAI_GPU_TYPES:
        return False
    try:
        for cell in first_row[2:]:
            float(cell)
    except ValueError:
        return False
    return True


def _cpu_milli(text: str, field: str) -> int:
    return round(req_number(text, field) * MILLI)


def _pai_machine(rows: Rows, line: int, row: list[str]) -> TraceNode:
    name = rows.claim(row[0], "machine", line)
    gpu_type = row[1].strip()
    if gpu_type not in PAI_GPU_TYPES:
        raise RowError("gpu_type", f"must be one of {', '.join(sorted(PAI_GPU_TYPES))}, got {gpu_type!r}")
    gpus = req_int(row[4], "cap_gpu", 0, MAX_GPUS_PER_NODE)
    if gpu_type == "CPU" and gpus:
        raise RowError("cap_gpu", f"must be 0 for a CPU machine, got {gpus}")
    model = "" if gpu_type == "CPU" else gpu_type
    return TraceNode(
        name=name,
        cpu_milli=_cpu_milli(row[2], "cap_cpu"),
        memory_mib=round(req_number(row[3], "cap_mem") * MIB_PER_GIB),
        gpus=gpus,
        gpu_model=model,
        gpu_memory_mib=gpu_memory_mib(model),
    )


def parse_pai_machines(rows: Rows) -> tuple[list[TraceNode], LoadReport]:
    nodes = rows.parse_all(len(PAI_COLUMNS), lambda line, row: _pai_machine(rows, line, row))
    return nodes, rows.report(len(nodes), "pai-machines")


def _spot_node(rows: Rows, line: int, row: list[str]) -> TraceNode:
    name = rows.claim(row[3], "node_name", line)
    model = row[0].strip()
    gpus = req_int(row[1], "gpu_capacity_num", 0, MAX_GPUS_PER_NODE)
    if gpus and not model:
        raise RowError("gpu_model", f"required for a node with {gpus} GPUs")
    return TraceNode(
        name=name,
        cpu_milli=_cpu_milli(row[2], "cpu_num"),
        memory_mib=0,
        gpus=gpus,
        gpu_model=model,
        gpu_memory_mib=gpu_memory_mib(model),
    )


def parse_spot_nodes(rows: Rows) -> tuple[list[TraceNode], LoadReport]:
    check_header(rows, SPOT_COLUMNS)
    nodes = rows.parse_all(len(SPOT_COLUMNS), lambda line, row: _spot_node(rows, line, row))
    return nodes, rows.report(len(nodes), "spot-nodes")


def _dlrm(rows: Rows, line: int, row: list[str]) -> TraceJob:
    name = rows.claim(row[0], "instance_sn", line)
    role = row[1].strip()
    if not role:
        raise RowError("role", "required value missing")
    cpu_milli = _cpu_milli(row[3], "cpu_request")
    req_number(row[4], "cpu_limit")
    gpus = req_int(row[5], "gpu_request", 0, MAX_GPUS_PER_NODE)
    req_int(row[6], "gpu_limit", 0, MAX_GPUS_PER_NODE)
    rdma = req_number(row[7], "rdma_request")
    req_number(row[8], "rdma_limit")
    memory_mib = round(req_number(row[9], "memory_request") * MIB_PER_GIB)
    req_number(row[10], "memory_limit")
    disk = req_number(row[11], "disk_request")
    req_number(row[12], "disk_limit")
    per_node = req_int(row[13], "max_instance_per_node", -1)
    if per_node == 0:
        raise RowError("max_instance_per_node", "must be -1 (no cap) or >= 1, got 0")
    created = opt_number(row[14], "creation_time")
    scheduled = opt_number(row[15], "scheduled_time")
    deleted = opt_number(row[16], "deletion_time")
    if created is not None and scheduled is not None and scheduled < created:
        raise RowError("scheduled_time", f"{scheduled:g} is before creation_time {created:g}")
    started = scheduled if scheduled is not None else created if created is not None else 0.0
    if deleted is not None and deleted < started:
        raise RowError("deletion_time", f"{deleted:g} is before the instance started ({started:g})")
    attrs = {"app": row[2].strip(), "role": role, "rdma_percent": f"{rdma:g}", "disk_gib": f"{disk:g}"}
    if per_node > 0:
        attrs["max_instance_per_node"] = str(per_node)
    if created is None:
        attrs["present_at_start"] = "true"
    return TraceJob(
        name=name,
        submit_s=created if created is not None else 0.0,
        duration_s=None if deleted is None else deleted - started,
        num_gpu=gpus,
        gpu_milli=1000 if gpus else 0,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        attrs=attrs,
    )


def parse_dlrm(rows: Rows) -> tuple[list[TraceJob], LoadReport]:
    check_header(rows, DLRM_COLUMNS)
    jobs = rows.parse_all(len(DLRM_COLUMNS), lambda line, row: _dlrm(rows, line, row))
    return jobs, rows.report(len(jobs), "dlrm")
