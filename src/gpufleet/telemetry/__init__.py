"""GPU telemetry: how much of its GPUs each pod uses (an adapter the controller reads; docs/telemetry.md).

- :mod:`.model`: the values (:class:`GpuReading`, :class:`PodUsage`, :class:`TelemetryPage`) and the
  one error, :class:`TelemetryError` (one line);
- :mod:`.readings`: dcgm-exporter text through prometheus-client's parser, samples to readings, readings
  to per-pod usage;
- :mod:`.port`, :mod:`.http`: the :class:`TelemetrySource` port and its aiohttp adapters,
  :class:`ExporterScrape` (exporters' ``/metrics``) and :class:`PrometheusQuery` (``/api/v1/query``,
  answers decoded with msgspec in :mod:`.prometheus_api`);
- :mod:`.accumulate`, :mod:`.idle`: pure per-interval means and the idle rule;
- :mod:`.poller`: the scraper loop with backoff.

The model and the port are imported at once; the rest on first use (aiohttp only with the HTTP sources).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet._lazy import lazy_exports
from gpufleet.telemetry.model import (
    FB_USED,
    GPU_UTIL,
    SM_ACTIVE,
    WANTED_METRICS,
    GpuReading,
    PodKey,
    PodLabels,
    PodUsage,
    TelemetryError,
    TelemetryPage,
)
from gpufleet.telemetry.port import TelemetrySource

if TYPE_CHECKING:
    from gpufleet.telemetry.accumulate import IntervalUsage, TimeWeightedMean, UsageAccumulator
    from gpufleet.telemetry.http import DEFAULT_QUERY, ExporterScrape, PrometheusQuery
    from gpufleet.telemetry.idle import IdleChange, IdleSettings, IdleState, IdleTracker
    from gpufleet.telemetry.poller import Backoff, PollerStats, TelemetryPoller
    from gpufleet.telemetry.prometheus_api import decode_query_answer
    from gpufleet.telemetry.readings import parse_exporter_text, pod_usage, readings_from_samples, wanted_lines

__all__ = [
    "DEFAULT_QUERY",
    "FB_USED",
    "GPU_UTIL",
    "SM_ACTIVE",
    "WANTED_METRICS",
    "Backoff",
    "ExporterScrape",
    "GpuReading",
    "IdleChange",
    "IdleSettings",
    "IdleState",
    "IdleTracker",
    "IntervalUsage",
    "PodKey",
    "PodLabels",
    "PodUsage",
    "PollerStats",
    "PrometheusQuery",
    "TelemetryError",
    "TelemetryPage",
    "TelemetryPoller",
    "TelemetrySource",
    "TimeWeightedMean",
    "UsageAccumulator",
    "decode_query_answer",
    "parse_exporter_text",
    "pod_usage",
    "readings_from_samples",
    "wanted_lines",
]

_WHERE = {
    **dict.fromkeys(("IntervalUsage", "TimeWeightedMean", "UsageAccumulator"), "gpufleet.telemetry.accumulate"),
    **dict.fromkeys(("DEFAULT_QUERY", "ExporterScrape", "PrometheusQuery"), "gpufleet.telemetry.http"),
    **dict.fromkeys(("IdleChange", "IdleSettings", "IdleState", "IdleTracker"), "gpufleet.telemetry.idle"),
    **dict.fromkeys(("Backoff", "PollerStats", "TelemetryPoller"), "gpufleet.telemetry.poller"),
    "decode_query_answer": "gpufleet.telemetry.prometheus_api",
    **dict.fromkeys(("parse_exporter_text", "pod_usage", "readings_from_samples", "wanted_lines"),
                    "gpufleet.telemetry.readings"),
}
__getattr__ = lazy_exports(__name__, _WHERE)
