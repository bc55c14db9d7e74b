"""The agent's utilisation page: dcgm-exporter's families and labels, so that gpufleet's telemetry
(and any dashboard made for dcgm-exporter) reads it like dcgm-exporter's, and the agent's own
families, named by Prometheus's conventions (docs/agent.md, "Utilisation per pod").

:class:`UsageExporter` keeps the latest :class:`UsageSample`; its collector, registered in
:attr:`UsageExporter.registry`, builds the families from it at each scrape (prometheus-client's
``generate_latest``; :meth:`UsageExporter.render`). Labels are bounded by the node: GPUs, and pods of
this node (as dcgm-exporter's); never a PID.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.agent.gpus import GpuInfo, GpuUtilisation, MigInstance, ProcessUtilisation
from gpufleet.agent.usage.owners import ProcessOwners
from gpufleet.agent.usage.pods import PodIndex
from gpufleet.agent.usage.proc import HostProcReader, ProcReader
from gpufleet.agent.usage.shares import PodShare, UsageSample, pod_shares
from gpufleet.telemetry import FB_USED, GPU_UTIL

__all__ = [
    "AGENT_GPU_MEMORY_TOTAL",
    "AGENT_GPU_MEMORY_USED",
    "AGENT_GPU_PROCESSES",
    "AGENT_GPU_UTILISATION",
    "AGENT_PROC_READS",
    "AGENT_UPDATES",
    "AGENT_UPDATE_TIME",
    "UsageExporter",
]

# The agent's own families (``_total`` is added to counters by prometheus-client)
AGENT_GPU_UTILISATION = "gpufleet_agent_gpu_utilisation_ratio"
AGENT_GPU_MEMORY_USED = "gpufleet_agent_gpu_memory_used_bytes"
AGENT_GPU_MEMORY_TOTAL = "gpufleet_agent_gpu_memory_total_bytes"
AGENT_GPU_PROCESSES = "gpufleet_agent_gpu_processes"
AGENT_UPDATES = "gpufleet_agent_usage_updates"
AGENT_UPDATE_TIME = "gpufleet_agent_usage_last_update_timestamp_seconds"
AGENT_PROC_READS = "gpufleet_agent_cgroup_reads"

_MIB = 1024 * 1024
# dcgm-exporter's HELP texts (etc/default-counters.csv)
_DCGM_HELP = {GPU_UTIL: "GPU utilization (in %).", FB_USED: "Framebuffer memory used (in MiB)."}


class UsageExporter:
    """Call :meth:`update` at each poll with what :meth:`GpuReader.utilisation` gave and the node's
    pods; serve :attr:`registry` (or :meth:`render`'s bytes) on ``/metrics``::

        exporter = UsageExporter(node_name, HostProcReader("/host/proc"), driver_version=version)
        ...  # each poll:
        try:
            gpus, processes = reader.utilisation()
        except GpuReaderError:
            exporter.clear(now)  # and log the one line
        else:
            exporter.update(gpus, processes, pods, now=now, devices=reader_gpus)

    ``node_name``: the ``Hostname`` label; ``proc``: where processes' cgroups are read (default: the
    host's ``/proc``; :class:`HostProcReader` with ``/host/proc`` where the DaemonSet mounts it
    there); ``driver_version``: the ``DCGM_FI_DRIVER_VERSION`` label (left out when empty);
    ``pod_uid_label``: add ``pod_uid`` to pod samples (dcgm-exporter's
    ``--kubernetes-enable-pod-uid``; the ledger can then tell a re-created pod of the same name)."""

    def __init__(self, node_name: str, proc: ProcReader | None = None, *, driver_version: str = "",
                 pod_uid_label: bool = True, registry: CollectorRegistry | None = None) -> None:
        self.node_name = node_name
        self.driver_version = driver_version
        self.pod_uid_label = pod_uid_label
        self.owners = ProcessOwners(proc if proc is not None else HostProcReader())
        self.sample = UsageSample(at=0.0, gpus=(), shares=(), processes={})
        self.updates = 0
        self._devices_seen: tuple[GpuInfo, ...] = ()
        self._gpus: dict[str, GpuInfo] = {}  # GPU UUID -> the GPU
        self._migs: dict[str, tuple[GpuInfo, MigInstance]] = {}  # MIG UUID -> its GPU and instance
        self._indices: dict[str, int] | None = None  # device UUID -> GPU index (None: from the poll)
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        self.registry.register(_UsageCollector(self))

    def update(self, gpus: Sequence[GpuUtilisation], processes: Sequence[ProcessUtilisation], pods: PodIndex,
               *, now: float, devices: Sequence[GpuInfo] = ()) -> UsageSample:
        """Take one poll's utilisation; ``devices``: the node's GPUs (:meth:`GpuReader.read`), for the
        ``modelName``, ``pci_bus_id``, ``device`` and MIG labels (kept until other ones are given)."""
        if devices and tuple(devices) != self._devices_seen:
            self._learn(tuple(devices))
        owners = self.owners.owners(process.pid for process in processes)
        self.sample = pod_shares(gpus, processes, owners, pods, now, self._indices)
        self.updates += 1
        return self.sample

    def clear(self, now: float) -> None:
        """Serve no GPU figures until the next :meth:`update`: for a poll whose read failed
        (:class:`~gpufleet.agent.gpus.GpuReaderError`), so that no stale figure is taken for a fresh
        one (telemetry then sees no reading, and the idle rule calls the pods ``unknown`` once the
        last reading is old). The agent's own counters stay."""
        self.sample = UsageSample(at=now, gpus=(), shares=(), processes={})

    def render(self) -> bytes:
        """The page in Prometheus's text format (0.0.4)."""
        return generate_latest(self.registry)

    def _learn(self, devices: tuple[GpuInfo, ...]) -> None:
        self._devices_seen = devices
        self._gpus = {gpu.uuid: gpu for gpu in devices}
        self._migs = {mig.uuid: (gpu, mig) for gpu in devices for mig in gpu.mig_instances}
        self._indices = {gpu.uuid: gpu.index for gpu in devices} | {
            mig.uuid: gpu.index for gpu in devices for mig in gpu.mig_instances}

    # --------------------------------------------------------------------------------- labels

    def gpu_labels(self, index: int, uuid: str) -> dict[str, str]:
        """dcgm-exporter's labels of a GPU (or of a MIG instance: its GPU's, and ``GPU_I_PROFILE``,
        ``GPU_I_ID``), in its order."""
        mig = self._migs.get(uuid)
        gpu = mig[0] if mig is not None else self._gpus.get(uuid)
        labels = {"gpu": str(index), "UUID": gpu.uuid if gpu is not None else uuid,
                  "pci_bus_id": gpu.pci_bus_id if gpu is not None else "",
                  "device": f"nvidia{gpu.minor}" if gpu is not None else "",
                  "modelName": gpu.product if gpu is not None else ""}
        if mig is not None:
            labels["GPU_I_PROFILE"] = mig[1].profile
            labels["GPU_I_ID"] = str(mig[1].gpu_instance_id)
        labels["Hostname"] = self.node_name
        if self.driver_version:
            labels["DCGM_FI_DRIVER_VERSION"] = self.driver_version
        return labels

    def pod_labels(self, share: PodShare) -> dict[str, str]:
        labels = self.gpu_labels(share.gpu_index, share.gpu_uuid)
        labels.update(container=share.container, namespace=share.namespace, pod=share.pod)
        if self.pod_uid_label:
            labels["pod_uid"] = share.pod_uid
        return labels


class _UsageCollector(Collector):
    def __init__(self, exporter: UsageExporter) -> None:
        self.exporter = exporter

    def collect(self) -> Iterator[Metric]:
        exporter = self.exporter
        sample = exporter.sample  # one read: an update meanwhile replaces it whole
        gpu_labels = {gpu.uuid: exporter.gpu_labels(gpu.index, gpu.uuid) for gpu in sample.gpus}
        pod_labels = [(share, exporter.pod_labels(share)) for share in sample.shares]
        util = Metric(GPU_UTIL, _DCGM_HELP[GPU_UTIL], "gauge")
        fb = Metric(FB_USED, _DCGM_HELP[FB_USED], "gauge")
        for gpu in sample.gpus:
            util.add_sample(GPU_UTIL, gpu_labels[gpu.uuid], gpu.gpu_util_percent)
            fb.add_sample(FB_USED, gpu_labels[gpu.uuid], gpu.memory_used_mib)
        for share, labels in pod_labels:
            util.add_sample(GPU_UTIL, labels, share.util_percent)
            fb.add_sample(FB_USED, labels, share.fb_used_mib)
        yield util
        yield fb
        yield from self._own(sample)

    def _own(self, sample: UsageSample) -> Iterator[Metric]:
        labels = ["gpu", "UUID"]
        ratio = GaugeMetricFamily(AGENT_GPU_UTILISATION, "Share of the last sample period a kernel ran on the GPU "
                                  "(NVML's GPU utilisation, 0-1).", labels=labels)
        used = GaugeMetricFamily(AGENT_GPU_MEMORY_USED, "GPU memory in use.", labels=labels)
        total = GaugeMetricFamily(AGENT_GPU_MEMORY_TOTAL, "GPU memory in all.", labels=labels)
        for gpu in sample.gpus:
            key = [str(gpu.index), gpu.uuid]
            ratio.add_metric(key, gpu.gpu_util_percent / 100.0)
            used.add_metric(key, gpu.memory_used_mib * _MIB)
            total.add_metric(key, gpu.memory_total_mib * _MIB)
        processes = GaugeMetricFamily(
            AGENT_GPU_PROCESSES, "Processes on the GPU by whom they belong to: pod (a pod of the node), "
            "unknown_pod (a pod the agent does not know yet), host (no pod), unreadable (gone before it was read).",
            labels=[*labels, "attribution"])
        uuids = {gpu.index: gpu.uuid for gpu in sample.gpus}
        for (index, attribution), count in sorted(sample.processes.items()):
            processes.add_metric([str(index), uuids.get(index, ""), attribution.value], count)
        yield from (ratio, used, total, processes)
        yield CounterMetricFamily(AGENT_UPDATES, "Utilisation polls taken.", value=self.exporter.updates)
        yield GaugeMetricFamily(AGENT_UPDATE_TIME, "When the last poll was taken (Unix time).", value=sample.at)
        yield CounterMetricFamily(AGENT_PROC_READS, "cgroup files read to find a new GPU process's pod.",
                                  value=self.exporter.owners.cgroup_reads)
