"""Utilisation per GPU and per pod, for the node agent (docs/agent.md, "Utilisation per pod").

Each poll, the agent service hands :meth:`UsageExporter.update` what NVML read
(:meth:`~gpufleet.agent.gpus.GpuReader.utilisation`) and the node's pods (a :data:`PodIndex`, e.g.
from :func:`pod_index`); the exporter finds each GPU process's pod through its cgroup
(:func:`parse_cgroup`, read through the :class:`ProcReader` port, cached per process) and serves
the result on :attr:`UsageExporter.registry` with dcgm-exporter's names and labels, so that the
controller's telemetry reads the agents like dcgm-exporters.
"""

from gpufleet.agent.usage.cgroups import CgroupOwner, parse_cgroup, parse_start_time
from gpufleet.agent.usage.exporter import (
    AGENT_GPU_MEMORY_TOTAL,
    AGENT_GPU_MEMORY_USED,
    AGENT_GPU_PROCESSES,
    AGENT_GPU_UTILISATION,
    AGENT_PROC_READS,
    AGENT_UPDATE_TIME,
    AGENT_UPDATES,
    UsageExporter,
)
from gpufleet.agent.usage.owners import UNREADABLE, Owner, ProcessOwners
from gpufleet.agent.usage.pods import PodEntry, PodIndex, pod_index
from gpufleet.agent.usage.proc import DEFAULT_PROC_ROOT, HostProcReader, ProcReader
from gpufleet.agent.usage.shares import Attribution, PodShare, UsageSample, pod_shares

__all__ = [
    "AGENT_GPU_MEMORY_TOTAL",
    "AGENT_GPU_MEMORY_USED",
    "AGENT_GPU_PROCESSES",
    "AGENT_GPU_UTILISATION",
    "AGENT_PROC_READS",
    "AGENT_UPDATES",
    "AGENT_UPDATE_TIME",
    "DEFAULT_PROC_ROOT",
    "UNREADABLE",
    "Attribution",
    "CgroupOwner",
    "HostProcReader",
    "Owner",
    "PodEntry",
    "PodIndex",
    "PodShare",
    "ProcReader",
    "ProcessOwners",
    "UsageExporter",
    "UsageSample",
    "parse_cgroup",
    "parse_start_time",
    "pod_index",
    "pod_shares",
]
