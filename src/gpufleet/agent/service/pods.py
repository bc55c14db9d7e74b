"""The pods bound to this node, for the usage export (pid -> cgroup -> pod uid -> pod).

An :class:`~gpufleet.kube.controller.informers.Informer` keeps them current. The port has no field
selector yet, so it lists and watches every pod and keeps this node's (as the device plugin does;
``spec.nodeName=<node>`` once the port takes one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpufleet.kube import Clock, ClusterApi, Kind, object_key
from gpufleet.kube.controller.informers import Informer, ObjectCache

__all__ = ["PodsOnNode"]


class PodsOnNode:
    def __init__(self, api: ClusterApi, node: str, clock: Clock) -> None:
        self.api = api
        self.node = node
        self.clock = clock
        self._pods: dict[tuple[str, str], Mapping[str, Any]] = {}
        self._cache = ObjectCache((Kind.POD,))
        self._cache.hooks.append(self._on_change)

    def _on_change(self, kind: Kind, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        key = object_key(new if new is not None else old or {})
        spec = (new or {}).get("spec")
        if new is not None and isinstance(spec, Mapping) and spec.get("nodeName") == self.node:
            self._pods[key] = new
        else:
            self._pods.pop(key, None)

    def __call__(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(self._pods.values())

    async def run(self) -> None:
        """List and watch until cancelled."""
        await Informer(self.api, Kind.POD, self._cache, self.clock).run()
