"""Kubernetes Events (events.k8s.io/v1) on pods (and Nodes), rate-limited per object.

A pod that stays pending gets the same reason cycle after cycle: without a limit, a busy cluster
would write thousands of identical Events a minute. Per pod, an Event is written when its note
differs from the last one written and at least ``min_gap`` seconds passed, or when the note is
the same and ``repeat_after`` seconds passed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufleet.domain import REPORTING_CONTROLLER
from gpufleet.kube.client.port import ApiError, Clock, ClusterApi, Kind
from gpufleet.kube.controller.leader import micro_time

if TYPE_CHECKING:  # prometheus-client and the controller's metrics: not for the node agent's import
    from gpufleet.kube.controller.metrics import ControllerMetrics

__all__ = ["REPORTING_CONTROLLER", "EventRecorder", "PodEvent"]

log = logging.getLogger(__name__)

MAX_NOTE = 1024  # the API server refuses longer notes


@dataclass(frozen=True, slots=True)
class PodEvent:
    namespace: str
    name: str
    uid: str
    reason: str  # FailedScheduling, Preempted, EvictionBlocked, WaitingForVictims, BindingFailed
    note: str
    type: str = "Normal"  # Normal | Warning
    action: str = "Scheduling"
    kind: str = "Pod"  # what it regards: a Pod, or a Node (namespace "": the Event goes to "default")
    api_version: str = "v1"  # of what it regards (a workload owner: "kubeflow.org/v1")


class EventRecorder:
    def __init__(
        self,
        api: ClusterApi,
        clock: Clock,
        identity: str,
        metrics: ControllerMetrics | None = None,
        min_gap: float = 10.0,
        repeat_after: float = 300.0,
        reporting_controller: str = REPORTING_CONTROLLER,  # the node agent names itself
    ) -> None:
        self.api = api
        self.reporting_controller = reporting_controller
        self.clock = clock
        self.identity = identity
        self.metrics = metrics
        self.min_gap = min_gap
        self.repeat_after = repeat_after
        self._last: dict[tuple[str, str], tuple[float, str]] = {}
        self._seq = 0

    def admit(self, event: PodEvent) -> bool:
        """Whether ``event`` may be written now (and, if so, remember it as written)."""
        key = (event.namespace, event.name)
        now = self.clock.now()
        last = self._last.get(key)
        if last is not None:
            when, note = last
            wait = self.repeat_after if note == event.note else self.min_gap
            if now - when < wait:
                return False
        self._last[key] = (now, event.note)
        return True

    def forget_older_than(self, seconds: float) -> None:
        """Drop the memory of pods not written about for ``seconds`` (pods come and go)."""
        horizon = self.clock.now() - seconds
        self._last = {k: v for k, v in self._last.items() if v[0] >= horizon}

    def body(self, event: PodEvent) -> dict[str, Any]:
        self._seq += 1
        now = self.clock.now()
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                # Unique per event, as client-go names them: the object's name and a time-based suffix.
                "name": f"{event.name[:200]}.{int(now * 1e6):x}{self._seq:04x}",
                "namespace": event.namespace or "default",
            },
            "eventTime": micro_time(now),
            "reportingController": self.reporting_controller,
            "reportingInstance": self.identity,
            "action": event.action,
            "reason": event.reason,
            "regarding": _regarding(event),
            "note": event.note[:MAX_NOTE],
            "type": event.type,
        }

    async def emit(self, event: PodEvent, *, force: bool = False) -> bool:
        """Write ``event`` unless the rate limit holds it back; returns whether it was written.
        Failures are logged and counted, never raised: an Event is not worth failing a cycle."""
        if not force and not self.admit(event):
            return False
        try:
            await self.api.create(Kind.EVENT, self.body(event))
        except ApiError as err:
            if self.metrics is not None:
                self.metrics.api_error("create events", err.status)
            log.warning("event on pod %s/%s not written: %s", event.namespace, event.name, err)
            return False
        if self.metrics is not None:
            self.metrics.events.labels(event.reason).inc()
        return True


def _regarding(event: PodEvent) -> dict[str, str]:
    regarding = {"apiVersion": event.api_version, "kind": event.kind, "name": event.name, "uid": event.uid}
    if event.namespace:  # cluster-scoped objects (Nodes) have none
        regarding["namespace"] = event.namespace
    return regarding


def pod_uid(pod: Mapping[str, Any] | None) -> str:
    meta = pod.get("metadata") if pod is not None else None
    return str(meta.get("uid") or "") if isinstance(meta, Mapping) else ""
