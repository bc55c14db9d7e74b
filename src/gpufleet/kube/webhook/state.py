"""What the admission webhook knows of the cluster: Projects, Namespaces, PodGroups, pending pods of
gpufleet's, the SchedulerConfig and the PriorityClasses, kept current by list + watch through the
API port (as the controller's informers do, in a few lines of its own: the webhook room does not
depend on the controller's).

Each kind is listed, then watched from the list's resourceVersion; a watch that ends is resumed, a
410 Gone relists, other failures are retried with exponential backoff on the injected clock. A
kind the API server does not serve (404: the Project CRD not installed) counts as empty.

:meth:`AdmissionState.context` gives the :class:`~gpufleet.policy.AdmissionContext` the decision
reads. Its Project index is rebuilt only when Projects, Namespaces, the SchedulerConfig or the
PriorityClasses change; PodGroups and pending gangs are kept incrementally (pods change all the
time), so a review costs no rebuild.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.adapters import (
    FieldError,
    pod_group_from_dict,
    priority_class_from_dict,
    project_from_dict,
    project_namespace_names,
    scheduler_config_from_dict,
)
from gpufleet.domain import PodGroup, Project, SchedulerConfig
from gpufleet.domain.wire import ANNOTATION_SUBMITTED_BY, LABEL_POD_GROUP, SCHEDULER_NAME, UNVERIFIED_USER
from gpufleet.kube.client.port import ApiError, Clock, ClusterApi, Kind, object_key
from gpufleet.policy import AdmissionContext, ProjectIndex

__all__ = ["WATCHED_KINDS", "AdmissionState", "PendingPod"]

log = logging.getLogger("gpufleet.webhook")

JsonDict = dict[str, Any]
WATCHED_KINDS = (Kind.PROJECT, Kind.NAMESPACE, Kind.SCHEDULER_CONFIG, Kind.PRIORITY_CLASS, Kind.POD_GROUP, Kind.POD)
_INDEXED = frozenset({Kind.PROJECT, Kind.NAMESPACE, Kind.SCHEDULER_CONFIG, Kind.PRIORITY_CLASS})
PendingPod = tuple[str, str, str]  # (user, namespace, gang key)


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def pending_pod(obj: Mapping[str, Any]) -> PendingPod | None:
    """(user, namespace, gang) of a pod of ours waiting to be placed; None for any other pod."""
    meta, spec, status = _dict(obj.get("metadata")), _dict(obj.get("spec")), _dict(obj.get("status"))
    if spec.get("schedulerName") != SCHEDULER_NAME or spec.get("nodeName") or meta.get("deletionTimestamp"):
        return None
    if status.get("phase") not in (None, "", "Pending"):
        return None
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    user = _dict(meta.get("annotations")).get(ANNOTATION_SUBMITTED_BY)
    group = _dict(meta.get("labels")).get(LABEL_POD_GROUP)
    gang = f"{namespace}/{group}" if isinstance(group, str) and group else f"{namespace}/{name}"
    return (user if isinstance(user, str) and user else UNVERIFIED_USER, namespace, gang)


class AdmissionState:
    """The webhook's cache of the cluster (see the module docstring)."""

    def __init__(self, api: ClusterApi, clock: Clock, backoff: tuple[float, float] = (0.05, 10.0)) -> None:
        self.api = api
        self.clock = clock
        self.backoff = backoff
        self._objects: dict[Kind, dict[tuple[str, str], JsonDict]] = {k: {} for k in _INDEXED}
        self._groups: dict[str, PodGroup] = {}
        self._pending: dict[tuple[str, str], PendingPod] = {}
        self._gangs: dict[str, dict[str, dict[str, int]]] = {}  # user -> namespace -> gang -> pods
        self._synced: set[Kind] = set()
        self.synced = asyncio.Event()
        self._context: AdmissionContext | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------------------ running

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._inform(kind), name=f"webhook-watch-{kind.plural}")
                       for kind in WATCHED_KINDS]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _inform(self, kind: Kind) -> None:
        version: str | None = None
        delay = self.backoff[0]
        while True:
            try:
                if version is None:
                    listing = await self.api.list(kind)
                    self.replace(kind, listing.items)
                    version = listing.resource_version
                async for event in self.api.watch(kind, version):
                    seen = _dict(event.object.get("metadata")).get("resourceVersion")
                    if seen:
                        version = str(seen)
                    self.apply(kind, event.type, event.object)
                    delay = self.backoff[0]
            except ApiError as err:
                if err.status == 410:
                    version = None
                    continue
                if err.status == 404 and kind not in self._synced:
                    self.replace(kind, [])  # not served (the CRD is not installed): none of them
                log.warning("webhook watch of %s: %s; retrying in %.2fs", kind.plural, err, delay)
                await self.clock.sleep(delay)
                delay = min(delay * 2, self.backoff[1])

    # ------------------------------------------------------------------------ informer side

    def replace(self, kind: Kind, items: Iterable[JsonDict]) -> None:
        """A full list of ``kind``: what is not in ``items`` is gone."""
        if kind in _INDEXED:
            self._objects[kind] = {object_key(obj): obj for obj in items}
            self._context = None
        elif kind is Kind.POD_GROUP:
            self._groups.clear()
            for obj in items:
                self._group_changed(obj, deleted=False)
        else:
            for key in list(self._pending):
                self._pod_changed(key, None)
            for obj in items:
                self._pod_changed(object_key(obj), obj)
        self._synced.add(kind)
        if all(k in self._synced for k in WATCHED_KINDS):
            self.synced.set()

    def apply(self, kind: Kind, event_type: str, obj: JsonDict) -> None:
        """One watch event (ADDED, MODIFIED, DELETED; others are ignored)."""
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            return
        deleted = event_type == "DELETED"
        if kind in _INDEXED:
            store = self._objects[kind]
            if deleted:
                store.pop(object_key(obj), None)
            else:
                store[object_key(obj)] = obj
            self._context = None
        elif kind is Kind.POD_GROUP:
            self._group_changed(obj, deleted)
        else:
            self._pod_changed(object_key(obj), None if deleted else obj)

    def add_pod_group(self, obj: JsonDict) -> None:
        """A PodGroup read directly (a pod names one the watch has not delivered yet)."""
        self._group_changed(obj, deleted=False)

    def _group_changed(self, obj: JsonDict, deleted: bool) -> None:
        namespace, name = object_key(obj)
        key = f"{namespace or 'default'}/{name}"
        if deleted:
            self._groups.pop(key, None)
            return
        try:
            self._groups[key] = pod_group_from_dict(obj)
        except FieldError:  # the CRD schema refuses it; nothing to take from it
            self._groups.pop(key, None)

    def _pod_changed(self, key: tuple[str, str], obj: JsonDict | None) -> None:
        old = self._pending.pop(key, None)
        if old is not None:
            user, namespace, gang = old
            gangs = self._gangs[user][namespace]
            gangs[gang] -= 1
            if not gangs[gang]:
                del gangs[gang]
                if not gangs:
                    del self._gangs[user][namespace]
                    if not self._gangs[user]:
                        del self._gangs[user]
        new = pending_pod(obj) if obj is not None else None
        if new is not None:
            self._pending[key] = new
            user, namespace, gang = new
            gangs = self._gangs.setdefault(user, {}).setdefault(namespace, {})
            gangs[gang] = gangs.get(gang, 0) + 1

    # -------------------------------------------------------------------------- reader side

    def has_pod_group(self, namespace: str, name: str) -> bool:
        return f"{namespace}/{name}" in self._groups

    def context(self) -> AdmissionContext:
        """What the admission decision reads (rebuilt after Projects and their kin changed)."""
        if self._context is None:
            self._context = self._build()
        return self._context

    def _build(self) -> AdmissionContext:
        projects: list[Project] = []
        unreadable: dict[str, str] = {}
        for (_, name), obj in sorted(self._objects[Kind.PROJECT].items()):
            try:
                projects.append(project_from_dict(obj))
            except FieldError as err:
                for namespace in project_namespace_names(obj):
                    unreadable[namespace] = (f"project {name} cannot be read ({err}); pods of namespace "
                                             f"{namespace} are refused until it is fixed")
        labels = {name: _string_map(_dict(obj.get("metadata")).get("labels"))
                  for (_, name), obj in self._objects[Kind.NAMESPACE].items()}
        config = SchedulerConfig()
        for _, obj in sorted(self._objects[Kind.SCHEDULER_CONFIG].items()):
            try:
                config = scheduler_config_from_dict(obj)
                break
            except FieldError:
                continue
        classes: dict[str, int] = {}
        defaults: list[int] = []
        for obj in self._objects[Kind.PRIORITY_CLASS].values():
            try:
                pc = priority_class_from_dict(obj)
            except FieldError:
                continue
            classes[pc.name] = pc.value
            if pc.global_default:
                defaults.append(pc.value)
        return AdmissionContext(
            index=ProjectIndex.build(projects, labels),
            default_queue=config.default_queue,
            require_project=config.require_project,
            non_preemptible_priority=config.non_preemptible_priority,
            priority_classes=classes,
            default_priority=max(defaults) if defaults else 0,
            pod_groups=self._groups,
            pending_gangs=self._gangs,
            unreadable=unreadable,
        )


def _string_map(value: object) -> dict[str, str]:
    return {k: v for k, v in _dict(value).items() if isinstance(k, str) and isinstance(v, str)}
