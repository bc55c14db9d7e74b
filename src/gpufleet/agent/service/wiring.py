"""The one place that builds the agent's exports: its health metrics and the usage export, on one
registry (one ``/metrics`` page).

The health rules (:mod:`gpufleet.agent.health`) and discovery (:mod:`gpufleet.agent.discovery`) are
pure and called by the loop itself; the usage export reads the host's ``/proc`` (``proc_root``:
``/proc`` with the host's PID namespace, else where the host's is mounted).
"""

from __future__ import annotations

from gpufleet.agent.service.metrics import AgentMetrics
from gpufleet.agent.service.usage import PodUsage

__all__ = ["agent_parts"]


def agent_parts(node: str, proc_root: str = "/proc", export_usage: bool = True,
                driver_version: str = "") -> tuple[AgentMetrics, PodUsage | None]:
    """The agent's metrics and, with ``export_usage``, the usage export sharing their registry (None
    without: then the agent watches no pods and ``/metrics`` has the health families only)."""
    metrics = AgentMetrics()
    if not export_usage:
        return metrics, None
    from gpufleet.agent.usage import HostProcReader, UsageExporter

    exporter = UsageExporter(node, HostProcReader(proc_root), driver_version=driver_version,
                             registry=metrics.registry)
    return metrics, PodUsage(exporter)
