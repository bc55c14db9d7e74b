"""Informers: list, then watch from the list's resourceVersion, into one :class:`ObjectCache`.

Each :class:`Informer` keeps one kind up to date. A watch that ends is resumed from the last
resourceVersion seen; a 410 Gone (the version was compacted away) starts over with a full relist,
whose differences from the cache are applied as changes, so nothing deleted during the gap is
kept. Other failures (the API server restarting, a dropped connection) are retried with
exponential backoff on the injected clock.

The cache keeps each object's domain object between cycles: a change (an informer event, a relist
that differs) marks the object stale, and a cycle converts the stale ones only, when it asks for
them (during a burst of bindings a pod changes twice, annotations then node, and is converted once).
An unchanged object keeps the same domain object from cycle to cycle, which lets the engine tell
what changed by identity; a deleted one leaves the next snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from gpufleet.domain import API_GROUP
from gpufleet.kube.client.port import ApiError, Clock, ClusterApi, Kind, ObjectList, WatchEvent, object_key
from gpufleet.kube.controller.convert import CONVERTED_KINDS, DRA_KINDS, ConversionError, convert_object
from gpufleet.kube.controller.metrics import ControllerMetrics
from gpufleet.kube.inspect.snapshot import wanted_pod

__all__ = ["INFORMED_KINDS", "OPTIONAL_KINDS", "Informer", "ObjectCache", "collector_paused"]

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
Key = tuple[str, str]
ChangeHook = Callable[[Kind, JsonDict | None, JsonDict | None], None]

INFORMED_KINDS = (*CONVERTED_KINDS, Kind.PDB)
# Kinds whose CRD may be missing (an install whose CRDs are managed apart and not yet upgraded): while
# the API server does not serve one (404), its informer counts as synced with no objects, so that a
# cluster without Projects is scheduled exactly as before; it keeps trying, and lists once served.
OPTIONAL_KINDS = (Kind.PROJECT, Kind.RESOURCE_FLAVOR, *DRA_KINDS)  # DRA: a cluster without resource.k8s.io/v1 has none


def _rv(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""


@contextlib.contextmanager
def collector_paused(pause: bool = True) -> Iterator[None]:
    """The cyclic garbage collector paused during a burst that makes objects which live on in the
    cache (a list, its conversion, a burst of bindings whose answers and watch events replace the
    cached pods): JSON and frozen dataclasses hold no cycles, and the collector's repeated passes
    over them took a fifth of the controller's CPU at 10,000 bindings (BENCHMARKS.md, "Issue 13:
    the controller"); reference counting still frees what dies."""
    paused = pause and gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


# Objects to convert at once from which the collector waits until they are done.
PAUSE_GC_FROM = 1000


class _Stale:
    """The mark of an object changed since its last conversion."""


_STALE = _Stale()
_SKIPPED = None  # a pod no snapshot holds (another scheduler's, not on a node; deleted before bound)


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
        # Each object's conversion (a domain object, a ConversionError, _SKIPPED or _STALE), with
        # the same keys in the same order as _objects, and the keys converted next.
        self._converted: dict[Kind, dict[Key, Any]] = {kind: {} for kind in self.kinds}
        self._stale: dict[Kind, list[Key]] = {kind: [] for kind in self.kinds}
        self._bad: dict[Kind, set[Key]] = {kind: set() for kind in self.kinds}  # keys of ConversionErrors
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
        converted = self._converted[kind]
        kept: dict[Key, Any] = {}
        stale = self._stale[kind]
        for key, obj in new.items():
            before = old.get(key)
            if before is None or _rv(before) != _rv(obj) or not _rv(obj):
                kept[key] = _STALE
                stale.append(key)
                self._changed(kind, before, obj)
            else:
                kept[key] = converted.get(key, _STALE)
                if kept[key] is _STALE:
                    stale.append(key)
        self._converted[kind] = kept
        self._bad[kind] = {key for key, value in kept.items() if isinstance(value, ConversionError)}
        for key, obj in old.items():
            if key not in new:
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
                del self._converted[kind][key]
                self._bad[kind].discard(key)
                self._changed(kind, before, None)
        elif event.type in ("ADDED", "MODIFIED"):
            store[key] = event.object
            self._converted[kind][key] = _STALE
            self._stale[kind].append(key)
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
        not be read, each described in one line; only objects changed since the last call are
        converted again."""
        converted = self._converted[kind]
        stale, bad = self._stale[kind], self._bad[kind]
        with collector_paused(len(stale) >= PAUSE_GC_FROM):
            self._convert(kind, stale, bad)
        stale.clear()
        if not bad:
            return [v for v in converted.values() if v is not _SKIPPED], []
        values = [v for v in converted.values() if v is not _SKIPPED and not isinstance(v, ConversionError)]
        return values, [str(v) for v in converted.values() if isinstance(v, ConversionError)]

    def _convert(self, kind: Kind, stale: list[Key], bad: set[Key]) -> None:
        converted, objects = self._converted[kind], self._objects[kind]
        for key in stale:
            if converted.get(key) is not _STALE:
                continue  # converted already (changed twice), or deleted since
            obj = objects[key]
            bad.discard(key)
            if kind is Kind.POD and (not wanted_pod(obj) or _deleted_unbound(obj)):
                converted[key] = _SKIPPED
                continue
            try:
                converted[key] = convert_object(kind, obj)
            except ConversionError as err:
                converted[key] = err
                bad.add(key)


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
        with collector_paused():  # every object of a kind, made at once, kept in the cache
            listing = await self.api.list(self.kind)
            self.start_from(listing)
        if self.metrics is not None:
            self.metrics.relists.labels(self.kind.plural).inc()

    def start_from(self, listing: ObjectList) -> None:
        """Take ``listing`` (a list of the kind made by someone else: discovery's) as the cache's
        content; the watch goes on from its resourceVersion."""
        self.cache.replace(self.kind, listing.items)
        self.resource_version = listing.resource_version
