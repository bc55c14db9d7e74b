"""What the agent's loop feeds and is not its own: the usage export.

Discovery (:mod:`gpufleet.agent.discovery`) and the health rules (:mod:`gpufleet.agent.health`) are
pure functions the loop calls directly: one rule, in one place. The usage export reads the host's
``/proc`` and keeps a page, so the loop sees it through :class:`UsageSink` (:mod:`.usage` is the
real one, over :class:`gpufleet.agent.usage.UsageExporter`; :mod:`.wiring` builds it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from gpufleet.agent.gpus import GpuInfo, GpuUtilisation, ProcessUtilisation

__all__ = ["UsageSink"]


class UsageSink(Protocol):
    """The utilisation export: fed every poll with the GPUs, their processes, the GPUs as last
    discovered and the node's pods (the API server's pod objects bound to this node)."""

    def update(self, gpus: Sequence[GpuUtilisation], processes: Sequence[ProcessUtilisation],
               devices: Sequence[GpuInfo], pods: Sequence[Mapping[str, Any]], now: float) -> None: ...

    def clear(self, now: float) -> None:
        """The GPUs could not be read this poll: serve no stale figures."""
        ...
