"""The one port over GPU telemetry: a source the controller reads the fleet's usage from."""

from __future__ import annotations

from typing import Protocol

from gpufleet.telemetry.model import TelemetryPage

__all__ = ["TelemetrySource"]


class TelemetrySource(Protocol):
    """Where per-pod GPU usage comes from: dcgm-exporters scraped directly
    (:class:`~gpufleet.telemetry.http.ExporterScrape`) or a Prometheus server's HTTP API
    (:class:`~gpufleet.telemetry.http.PrometheusQuery`); tests may pass anything with these methods."""

    name: str

    async def read(self) -> TelemetryPage:
        """One read of every pod's usage; raises :class:`~gpufleet.telemetry.model.TelemetryError`
        (one line) when nothing could be read."""
        ...

    async def close(self) -> None:
        """Release connections (the source may be read again afterwards: it opens new ones)."""
        ...
