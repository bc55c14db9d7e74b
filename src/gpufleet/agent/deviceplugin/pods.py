"""The pods of gpufleet's bound to this node, kept current by an informer, and what the plugin served.

The kubelet waits on Allocate while it starts a container, so the lookup reads memory only: an
:class:`~gpufleet.kube.controller.informers.Informer` (list, then watch) feeds :class:`NodePods`,
which keeps the :class:`~gpufleet.agent.deviceplugin.lookup.PodRecord` of each pod of gpufleet's
bound to the node (O(pods on the node) per lookup). The port has no field selector yet, so the
informer lists and watches every pod of the cluster and drops the others (docs/gpu-assignment.md).

What the plugin served is recorded in memory at once (a second Allocate never gets the same
container) and written to the pod's ``gpufleet.dev/devices-allocated`` annotation in the background
(a restarted plugin reads it back), off the kubelet's path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.agent.deviceplugin.lookup import PodRecord, plugin_pod, pod_record, served_annotation
from gpufleet.domain.wire import ANNOTATION_DEVICES_ALLOCATED
from gpufleet.kube import ApiError, Clock, ClusterApi, Kind, object_key
from gpufleet.kube.controller.informers import Informer, ObjectCache

__all__ = ["NodePods"]

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
Key = tuple[str, str]


class NodePods:
    def __init__(self, api: ClusterApi, node: str, clock: Clock) -> None:
        self.api = api
        self.node = node
        self.clock = clock
        self._records: dict[Key, PodRecord] = {}
        self._served: dict[str, dict[str, dict[str, tuple[str, ...]]]] = {}  # uid -> container -> resource -> ids
        self._cache = ObjectCache((Kind.POD,))
        self._cache.hooks.append(self._on_change)
        self._changed = asyncio.Event()
        self._writes: set[asyncio.Task[None]] = set()
        self.waiting = 0  # lookups waiting for the pods to change

    # ----------------------------------------------------------------------------- informer side

    @property
    def synced(self) -> asyncio.Event:
        return self._cache.all_synced

    async def run(self) -> None:
        """List and watch pods until cancelled."""
        await Informer(self.api, Kind.POD, self._cache, self.clock).run()

    def _on_change(self, kind: Kind, old: JsonDict | None, new: JsonDict | None) -> None:
        key = object_key(new if new is not None else old or {})
        if new is not None and plugin_pod(new, self.node):
            self._records[key] = self._merge(pod_record(new))
        else:
            gone = self._records.pop(key, None)
            if gone is not None and new is None:
                self._served.pop(gone.uid, None)
        self._changed.set()

    def _merge(self, record: PodRecord) -> PodRecord:
        mine = self._served.get(record.uid)
        if not mine:
            return record
        served = {c: dict(res) for c, res in record.served.items()}
        for container, resources in mine.items():
            served.setdefault(container, {}).update(resources)
        return dataclasses.replace(record, served=served)

    # ------------------------------------------------------------------------------- reader side

    def pods(self) -> list[PodRecord]:
        return list(self._records.values())

    def __len__(self) -> int:
        return len(self._records)

    async def wait_change(self, seconds: float) -> bool:
        """Wait until the pods change or ``seconds`` pass on the clock; True when they changed."""
        if seconds <= 0:
            return False
        self._changed.clear()
        change = asyncio.ensure_future(self._changed.wait())
        timer = asyncio.ensure_future(self.clock.sleep(seconds))
        self.waiting += 1
        try:
            await asyncio.wait({change, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.waiting -= 1
            change.cancel()
            timer.cancel()
        return self._changed.is_set()

    def mark_served(self, pod: PodRecord, container: str, resource: str, devices: Sequence[str]) -> None:
        """Record that ``container`` of ``pod`` got ``devices``; annotate the pod in the background."""
        mine = self._served.setdefault(pod.uid, {})
        mine.setdefault(container, {})[resource] = tuple(devices)
        key = (pod.namespace, pod.name)
        current = self._records.get(key)
        if current is not None and current.uid == pod.uid:
            self._records[key] = self._merge(current)
        value = served_annotation(self._merge(current if current is not None else pod).served)
        task = asyncio.get_running_loop().create_task(self._annotate(pod, value))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _annotate(self, pod: PodRecord, value: str) -> None:
        patch: Mapping[str, Any] = {"metadata": {"annotations": {ANNOTATION_DEVICES_ALLOCATED: value}}}
        try:
            await self.api.patch(Kind.POD, pod.namespace, pod.name, dict(patch))
        except ApiError as err:
            log.warning("cannot annotate pod %s with the devices it was given: %s", pod.ref, err)

    async def flush(self) -> None:
        """Wait for the annotations being written."""
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)
