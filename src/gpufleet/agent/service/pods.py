"""The pods bound to this node, for the usage export (pid -> cgroup -> pod uid -> pod).

A list, then a watch from its resourceVersion (again from a fresh list when the watch ends, fails,
or answers 410 Gone), both with the field selector ``spec.nodeName=<node>``: the API server sends
this node's pods only, so 5,000 agents do not each stream every pod of the cluster (the kubelet
watches its pods the same way). Not the controller's
:class:`~gpufleet.kube.controller.informers.Informer`: that one converts every object to the domain,
whose imports (NumPy, pydantic models) alone would double the agent's memory.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gpufleet.domain.retry import Backoff
from gpufleet.kube import ApiError, Clock, ClusterApi, FieldSelector, Kind, object_key

__all__ = ["PodsOnNode"]

log = logging.getLogger(__name__)


class PodsOnNode:
    def __init__(self, api: ClusterApi, node: str, clock: Clock, backoff: Backoff | None = None) -> None:
        self.api = api
        self.node = node
        self.clock = clock
        self.backoff = backoff or Backoff(initial_s=0.5, maximum_s=30.0)
        self.selector = FieldSelector.equals("spec.nodeName", node)
        self._pods: dict[tuple[str, str], Mapping[str, Any]] = {}

    def _mine(self, pod: Mapping[str, Any]) -> bool:
        return self.selector.matches(pod)  # the API server chose them; kept as a guard

    def __call__(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(self._pods.values())

    async def run(self) -> None:
        """List and watch until cancelled."""
        failures = 0
        while True:
            try:
                listed = await self.api.list(Kind.POD, self.selector)
                self._pods = {object_key(p): p for p in listed.items if self._mine(p)}
                failures = 0
                async for event in self.api.watch(Kind.POD, listed.resource_version, self.selector):
                    key = object_key(event.object)
                    if event.type != "DELETED" and self._mine(event.object):
                        self._pods[key] = event.object
                    else:
                        self._pods.pop(key, None)
            except ApiError as err:
                failures += err.status != 410  # a too-old version: list again at once
                if failures:
                    log.warning("cannot watch the pods (again in %.0f s): %s", self.backoff.delay(failures), err)
            await self.clock.sleep(self.backoff.delay(failures))
