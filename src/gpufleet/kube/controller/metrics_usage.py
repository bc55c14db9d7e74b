"""Telemetry for the used and idle GPU metrics: the sink of a :class:`~gpufleet.telemetry.TelemetryPoller`
and the controller's ``gpu_usage`` provider (docs/metrics.md).

:meth:`TelemetryUsage.observe` takes each page the poller reads; :meth:`TelemetryUsage.facts` is
called once per cycle with the pods holding GPUs once the cycle's decisions are carried out: it
follows those allocations in its :class:`~gpufleet.telemetry.IdleTracker` (only the pods that
came or went since the last cycle are touched) and answers each pod's last utilisation (none when
the last page is older than the idle settings' ``stale_after_s``) and the idle pods.
"""

from __future__ import annotations

from collections.abc import Collection

from gpufleet.kube.controller.metrics_queues import GpuUsageFacts
from gpufleet.telemetry.idle import IdleSettings, IdleTracker
from gpufleet.telemetry.model import PodKey, TelemetryPage

__all__ = ["TelemetryUsage"]


def _key(text: str) -> PodKey:
    namespace, _, name = text.partition("/")
    return PodKey(namespace, name)


class TelemetryUsage:
    def __init__(self, settings: IdleSettings | None = None) -> None:
        self.tracker = IdleTracker(settings or IdleSettings())
        self._util: dict[str, float] = {}
        self._at = float("-inf")
        self._allocated: set[str] = set()

    def observe(self, page: TelemetryPage) -> None:
        self.tracker.observe_page(page)
        self._util = {str(k): u.gpu_util_percent for k, u in page.pods.items() if u.gpu_util_percent is not None}
        self._at = page.at

    def facts(self, now: float, allocated: Collection[str]) -> GpuUsageFacts:
        current = allocated if isinstance(allocated, set | frozenset) else set(allocated)
        for gone in self._allocated - current:
            self.tracker.release(_key(gone))
        for new in current - self._allocated:
            self.tracker.allocate(_key(new), now)
        self._allocated = set(current)
        fresh = now - self._at <= self.tracker.settings.stale_after_s
        return GpuUsageFacts(self._util if fresh else {}, frozenset(map(str, self.tracker.idle(now))))
