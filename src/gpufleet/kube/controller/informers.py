"""Informers: list, then watch from the list's resourceVersion, into one :class:`ObjectCache`.

Each :class:`Informer` keeps one kind up to date. A watch that ends is resumed from the last
resourceVersion seen; a 410 Gone (the version was compacted away) starts over with a full relist,
whose differences from the cache are applied as changes, so nothing deleted during the gap is
kept. Other failures (the API server restarting, a dropped connection) are retried with
exponential backoff on the injected clock.

The cache converts objects to domain objects lazily, once per resourceVersion, when a cycle asks
for them: during a burst of bindings a pod changes twice (annotations, node) and is converted once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpufleet.domain import API_GROUP
from gpufleet.kube.client.port import ApiError, Clock, ClusterApi, Kind, WatchEvent, object_key
from gpufleet.kube.controller.convert import CONVERTED_KINDS, DRA_KINDS, ConversionError, convert_object
from gpufleet.kube.controller.metrics import ControllerMetrics
from gpufleet.kube.inspect.snapshot import wanted_pod

__all__ = ["INFORMED_KINDS", "OPTIONAL_KINDS", "Informer", "ObjectCache"]

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
Key = tuple[str, str]
ChangeHook = Callable[[Kind, JsonDict | None, JsonDict | None], None]

INFORMED_KINDS = (*CONVERTED_KINDS, Kind.PDB)
# Kinds whose CRD may be missing (an install whose CRDs are managed apart and not yet upgraded): while
# the API server does not serve one (404), its informer counts as synced with no objects, so that a
# cluster without Projects is scheduled exactly as before; it keeps trying, and lists once served.
OPTIONAL_KINDS = (Kind.PROJECT, *DRA_KINDS)  # DRA: a cluster without resource.k8s.io/v1 has none


def _rv(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""


def _deleted_unbound(pod: Mapping[str, Any]) -> bool:
    """A pod being deleted before it was ever bound: nothing to schedule (the API server would
    refuse its Binding)."""
    meta = pod.get("metadata")
    spec = pod.get("spec")
    return bool(isinstance(meta, Mapping) and meta.get("deletionTimestamp")
                and not (isinstance(spec, Mapping) and spec.get("nodeName")))


class ObjectCache:
    """The latest state of every informed kind, keyed by (namespace, name)."""

    def __init__(self, kinds: Iterable[Kind] = INFORMED_KINDS) -> None:
        self.kinds = tuple(kinds)
        self._objects: dict[Kind, dict[Key, JsonDict]] = {kind: {} for kind in self.kinds}
        self._converted: dict[Kind, dict[Key, tuple[str, Any]]] = {kind: {} for kind in self.kinds}
        self._synced: set[Kind] = set()
        self.hooks: list[ChangeHook] = []
        self.all_synced = asyncio.Event()

    # ------------------------------------------------------------------------ informer side

    def _changed(self, kind: Kind, old: JsonDict | None, new: JsonDict | None) -> None:
        for hook in self.hooks:
            hook(kind, old, new)

    def replace(self, kind: Kind, items: Iterable[JsonDict]) -> None:
        """A full list: what is not in ``items`` is gone; what differs has changed."""
        old = self._objects[kind]
        new = {object_key(obj): obj for obj in items}
        self._objects[kind] = new
        for key, obj in new.items():
            before = old.get(key)
            if before is None or _rv(before) != _rv(obj):
                self._changed(kind, before, obj)
        for key, obj in old.items():
            if key not in new:
                self._converted[kind].pop(key, None)
                self._changed(kind, obj, None)
        self._synced.add(kind)
        if all(k in self._synced for k in self.kinds):
            self.all_synced.set()

    def apply(self, kind: Kind, event: WatchEvent) -> None:
        key = object_key(event.object)
        store = self._objects[kind]
        before = store.get(key)
        if event.type == "DELETED":
            if before is not None:
                del store[key]
                self._converted[kind].pop(key, None)
                self._changed(kind, before, None)
        elif event.type in ("ADDED", "MODIFIED"):
            store[key] = event.object
            self._changed(kind, before, event.object)

    # -------------------------------------------------------------------------- reader side

    @property
    def synced(self) -> bool:
        return self.all_synced.is_set()

    def is_synced(self, kind: Kind) -> bool:
        return kind in self._synced

    def get(self, kind: Kind, namespace: str, name: str) -> JsonDict | None:
        return self._objects[kind].get((namespace if kind.namespaced else "", name))

    def objects(self, kind: Kind) -> list[JsonDict]:
        return list(self._objects[kind].values())

    def count(self, kind: Kind) -> int:
        return len(self._objects[kind])

    def converted(self, kind: Kind) -> tuple[list[Any], list[str]]:
        """Domain objects of ``kind`` (pods: those a snapshot holds) and the objects that could
        not be read, each described in one line."""
        cache = self._converted[kind]
        values: list[Any] = []
        problems: list[str] = []
        for key, obj in self._objects[kind].items():
            if kind is Kind.POD and (not wanted_pod(obj) or _deleted_unbound(obj)):
                continue
            rv = _rv(obj)
            hit = cache.get(key)
            if hit is None or hit[0] != rv or not rv:
                try:
                    hit = (rv, convert_object(kind, obj))
                except ConversionError as err:
                    hit = (rv, err)
                cache[key] = hit
            if isinstance(hit[1], ConversionError):
                problems.append(str(hit[1]))
            else:
                values.append(hit[1])
        return values, problems


class Informer:
    """Keeps ``kind`` in ``cache`` current until cancelled."""

    def __init__(
        self,
        api: ClusterApi,
        kind: Kind,
        cache: ObjectCache,
        clock: Clock,
        metrics: ControllerMetrics | None = None,
        backoff: tuple[float, float] = (0.05, 10.0),
    ) -> None:
        self.api = api
        self.kind = kind
        self.cache = cache
        self.clock = clock
        self.metrics = metrics
        self.backoff = backoff
        self.resource_version: str | None = None

    async def run(self) -> None:
        delay = self.backoff[0]
        while True:
            try:
                if self.resource_version is None:
                    await self._relist()
                assert self.resource_version is not None
                async for event in self.api.watch(self.kind, self.resource_version):
                    rv = _rv(event.object)
                    if rv:
                        self.resource_version = rv
                    self.cache.apply(self.kind, event)
                    delay = self.backoff[0]
                # A watch that ends normally (server-side timeout) is resumed where it stopped.
            except ApiError as err:
                if self.metrics is not None:
                    self.metrics.api_error(f"watch {self.kind.plural}", err.status)
                if err.status == 410:
                    log.info("%s: watch expired (%s); relisting", self.kind.plural, err.message)
                    self.resource_version = None
                    continue
                if err.status == 404:
                    optional = self.kind in OPTIONAL_KINDS
                    if not (optional and self.cache.is_synced(self.kind)):  # said once while it stays absent
                        log.warning("%s: not served by the API server (%s); %s", self.kind.plural,
                                    "is the CRD installed?" if self.kind.group == API_GROUP else self.kind.api_version,
                                    "none until it is" if optional else "retrying")
                    if optional and not self.cache.is_synced(self.kind):
                        self.cache.replace(self.kind, [])
                else:
                    log.warning("%s: %s; retrying in %.2fs", self.kind.plural, err, delay)
                await self.clock.sleep(delay)
                delay = min(delay * 2, self.backoff[1])

    async def _relist(self) -> None:
        listing = await self.api.list(self.kind)
        self.cache.replace(self.kind, listing.items)
        self.resource_version = listing.resource_version
        if self.metrics is not None:
            self.metrics.relists.labels(self.kind.plural).inc()
