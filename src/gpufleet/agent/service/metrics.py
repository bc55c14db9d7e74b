"""The agent's own health figures on ``/metrics`` (docs/metrics.md, "The node agent"): Xid errors by
GPU and Xid, each GPU's health state, the memory error counters NVML reports, and whether NVML can
be read. Beside the usage export's families in the same registry, so that one page serves both.

Labels are bounded by the node: its GPUs, the three states, and for ``xid`` the Xids of the
catalog (``gpufleet.agent.health.XID_CATALOG``) with every other number counted as ``other`` (a
driver that logs a new Xid each second must not grow the page).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpufleet.agent.gpus import GpuHealthReading, XidEvent
from gpufleet.agent.health import XID_CATALOG, GpuHealth, HealthState

__all__ = [
    "AGENT_GPU_ECC_DBE",
    "AGENT_GPU_HEALTH",
    "AGENT_GPU_RETIRED_PAGES",
    "AGENT_GPU_ROW_REMAP_FAILURE",
    "AGENT_NVML_UP",
    "AGENT_UNHEALTHY_GPUS",
    "AGENT_XID_ERRORS",
    "AgentMetrics",
    "xid_label",
]

AGENT_XID_ERRORS = "gpufleet_agent_xid_errors"  # + _total
AGENT_GPU_HEALTH = "gpufleet_agent_gpu_health_state"
AGENT_UNHEALTHY_GPUS = "gpufleet_agent_unhealthy_gpus"
AGENT_GPU_ECC_DBE = "gpufleet_agent_gpu_ecc_dbe_volatile"
AGENT_GPU_RETIRED_PAGES = "gpufleet_agent_gpu_retired_pages"
AGENT_GPU_ROW_REMAP_FAILURE = "gpufleet_agent_gpu_row_remap_failure"
AGENT_NVML_UP = "gpufleet_agent_nvml_up"


def xid_label(xid: int) -> str:
    """The ``xid`` label: the number for a catalog Xid, else ``other``."""
    return str(xid) if xid in XID_CATALOG else "other"


class AgentMetrics:
    """Fed by the loop each poll (:meth:`observe`); served from :attr:`registry`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        self.xids: dict[tuple[str, str], int] = {}  # (gpu, xid label) -> count since start
        self.gpus: tuple[GpuHealth, ...] = ()
        self.readings: tuple[GpuHealthReading, ...] = ()
        self.nvml_up = False
        self.registry.register(_HealthCollector(self))

    def observe(self, events: Iterable[XidEvent], readings: Sequence[GpuHealthReading],
                gpus: Iterable[GpuHealth]) -> None:
        for event in events:
            key = (str(event.index), xid_label(event.xid))
            self.xids[key] = self.xids.get(key, 0) + 1
        self.readings = tuple(readings)
        self.gpus = tuple(gpus)
        self.nvml_up = True

    def unreadable(self) -> None:
        """NVML cannot be read: no counters (they would be stale); the states stay as last judged."""
        self.readings = ()
        self.nvml_up = False

    def render(self) -> bytes:
        """The whole page (this registry: the health families, and the usage export's when it shares it)."""
        return generate_latest(self.registry)


def _labelled(values: Mapping[tuple[str, ...], float], family: GaugeMetricFamily) -> GaugeMetricFamily:
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family


class _HealthCollector(Collector):
    def __init__(self, metrics: AgentMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        xids = CounterMetricFamily(AGENT_XID_ERRORS, "Xid errors NVML reported, by GPU index and Xid (a number "
                                   "of the agent's Xid catalog, else \"other\").", labels=["gpu", "xid"])
        for (index, xid), count in sorted(m.xids.items()):
            xids.add_metric([index, xid], count)
        yield xids
        states = GaugeMetricFamily(AGENT_GPU_HEALTH, "1 for each GPU's health state as the agent judged it "
                                   "(Healthy, Unhealthy, Unknown), 0 for the other states.",
                                   labels=["gpu", "UUID", "state"])
        for gpu in m.gpus:
            for state in HealthState:
                states.add_metric([str(gpu.index), gpu.uuid, state.value], float(gpu.state is state))
        yield states
        yield GaugeMetricFamily(AGENT_UNHEALTHY_GPUS, "GPUs in gpufleet.dev/unhealthy-gpus.",
                                value=sum(gpu.state is HealthState.UNHEALTHY for gpu in m.gpus))
        yield GaugeMetricFamily(AGENT_NVML_UP, "1 when NVML could be read at the last poll.", value=float(m.nvml_up))
        dbe: dict[tuple[str, ...], float] = {}
        retired: dict[tuple[str, ...], float] = {}
        remap: dict[tuple[str, ...], float] = {}
        for r in m.readings:
            at = str(r.index)
            if r.ecc_dbe_volatile is not None:
                dbe[(at,)] = r.ecc_dbe_volatile
            if r.retired_pages_sbe is not None:
                retired[(at, "single_bit")] = r.retired_pages_sbe
            if r.retired_pages_dbe is not None:
                retired[(at, "double_bit")] = r.retired_pages_dbe
            if r.row_remap_failure is not None:
                remap[(at,)] = float(bool(r.row_remap_failure))
        yield _labelled(dbe, GaugeMetricFamily(AGENT_GPU_ECC_DBE, "Volatile double-bit ECC errors since the driver "
                                               "loaded (NVML).", labels=["gpu"]))
        yield _labelled(retired, GaugeMetricFamily(AGENT_GPU_RETIRED_PAGES, "Pages retired for ECC errors, by cause "
                                                   "(pre-Ampere GPUs).", labels=["gpu", "cause"]))
        yield _labelled(remap, GaugeMetricFamily(AGENT_GPU_ROW_REMAP_FAILURE, "1 when a row remap failed (Ampere and "
                                                 "later): the memory cannot be repaired.", labels=["gpu"]))
