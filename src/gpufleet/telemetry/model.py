"""What telemetry reads, as frozen values: one GPU's reading, one pod's usage, one read of the fleet."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "FB_USED",
    "GPU_UTIL",
    "SM_ACTIVE",
    "WANTED_METRICS",
    "GpuReading",
    "PodKey",
    "PodLabels",
    "PodUsage",
    "TelemetryError",
    "TelemetryPage",
]

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent, 0-100
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"  # ratio, 0-1 (a profiling field: the exporter reports it when enabled)
FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB
WANTED_METRICS = (GPU_UTIL, SM_ACTIVE, FB_USED)


class TelemetryError(Exception):
    """A source could not be read, in exactly one line naming the source (and the target) and the cause,
    e.g. ``dcgm-exporter http://10.0.0.7:9400/metrics: HTTP 500 Internal Server Error``."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))  # one line, whatever the causes' texts hold


@dataclass(frozen=True, order=True, slots=True)
class PodKey:
    namespace: str
    pod: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod}"


@dataclass(frozen=True, slots=True)
class PodLabels:
    """Which labels name a GPU's pod, first present and non-empty wins.

    dcgm-exporter in Kubernetes mode adds ``pod``, ``namespace``, ``container`` (``pod_name``,
    ``pod_namespace``, ``container_name`` with ``--use-old-namespace``) and ``pod_uid`` when asked
    to. A Prometheus that scrapes it without ``honor_labels`` keeps its own target labels under
    those names and renames the exporter's to ``exported_pod`` and so on: so those come first. There,
    a GPU no pod holds shows the exporter's own pod under ``pod``; that pod holds no GPU, so the
    ledger and the idle rule, which follow allocated pods only, never match it (or name
    ``pod=("exported_pod",)`` alone)."""

    pod: tuple[str, ...] = ("exported_pod", "pod", "pod_name")
    namespace: tuple[str, ...] = ("exported_namespace", "namespace", "pod_namespace")
    uid: tuple[str, ...] = ("exported_pod_uid", "pod_uid")
    uuid: tuple[str, ...] = ("UUID", "uuid", "gpu_uuid")
    hostname: tuple[str, ...] = ("Hostname", "hostname")


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's three counters (None: not in this read), and the pod holding it (None: no pod).
    ``gpu_id`` is the GPU's UUID, with ``/gi<GPU_I_ID>`` for a MIG instance."""

    gpu_id: str
    hostname: str
    model: str
    pod: PodKey | None
    pod_uid: str | None = None
    gpu_util_percent: float | None = None
    sm_active: float | None = None
    fb_used_mib: float | None = None


@dataclass(frozen=True, slots=True)
class PodUsage:
    """One pod's GPUs at one read: the mean GPU utilisation (percent) and mean SM activity (ratio) over
    its GPUs that reported them (None: none did), the framebuffer memory used summed over its GPUs
    (MiB), and the GPUs seen (sorted)."""

    key: PodKey
    at: float
    gpus: tuple[str, ...]
    gpu_util_percent: float | None
    sm_active: float | None
    fb_used_mib: float | None
    pod_uid: str | None = None
    hostnames: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TelemetryPage:
    """One read of a source: every pod's usage at ``at`` (the injected clock's time of the read), how
    many GPUs were seen (with or without a pod), and the targets that failed (a scrape of many
    exporters goes on without the ones that did not answer; each failure is one line)."""

    source: str
    at: float
    pods: Mapping[PodKey, PodUsage]
    gpus_seen: int
    failures: tuple[str, ...] = field(default=())
