"""The usage export as the loop feeds it: :class:`gpufleet.agent.usage.UsageExporter` with the node's
pods and the GPUs each pod was given.

**Which GPUs a pod holds** (so that a pod with an allocated but idle GPU gets a 0 sample, as
dcgm-exporter gives): the ``gpufleet.dev/gpu-index`` annotation that gpufleet's controller writes on
the pod at binding, mapped from indices to UUIDs with the GPUs the reader discovered. A tenant
cannot write it: the admission webhook refuses a new pod that presets it (``preset_denial``: it is
scheduler-owned, as is ``spec.nodeName``), and the chart's ValidatingAdmissionPolicy
(``<release>-pod-annotations``) lets only the controller's service account set or change it after
creation. Only pods of gpufleet's scheduler are read (as the device plugin reads them), and the
annotation is parsed by the device plugin's own reader (:func:`pod_record`), so the agent, the device
plugin and the engine agree on one grammar. A pod scheduled by another scheduler has no allocation
here: its processes are still exported, only not its idle GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.agent.deviceplugin import plugin_pod, pod_record
from gpufleet.agent.gpus import GpuInfo, GpuUtilisation, ProcessUtilisation
from gpufleet.agent.usage import UsageExporter, pod_index

__all__ = ["PodUsage", "allocated_gpus"]


def allocated_gpus(pods: Sequence[Mapping[str, Any]], devices: Sequence[GpuInfo],
                   node: str) -> dict[str, frozenset[str]]:
    """Pod UID -> the UUIDs of the GPUs gpufleet's controller bound it to (see the module's docstring).
    An index the node does not have, or a malformed annotation, gives nothing."""
    by_index = {gpu.index: gpu.uuid for gpu in devices}
    out: dict[str, frozenset[str]] = {}
    for pod in pods:
        if not plugin_pod(pod, node):
            continue
        record = pod_record(pod)
        if record.problem or not record.gpu_indices or not record.live:
            continue
        uuids = frozenset(by_index[i] for i in record.gpu_indices if i in by_index)
        if uuids:
            out[record.uid.lower()] = uuids
    return out


class PodUsage:
    """:class:`~gpufleet.agent.service.ports.UsageSink` over :class:`UsageExporter`."""

    def __init__(self, exporter: UsageExporter) -> None:
        self.exporter = exporter
        self.node = exporter.node_name

    def update(self, gpus: Sequence[GpuUtilisation], processes: Sequence[ProcessUtilisation],
               devices: Sequence[GpuInfo], pods: Sequence[Mapping[str, Any]], now: float) -> None:
        index = pod_index(pods, allocated_gpus(pods, devices, self.node))
        self.exporter.update(gpus, processes, index, now=now, devices=devices)

    def clear(self, now: float) -> None:
        self.exporter.clear(now)
