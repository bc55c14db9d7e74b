"""The agent's writes to its Node: labels and annotations (gpufleet's and GFD's keys only), the
``GPUHealthy`` condition, and the Events of health changes.

Each write is computed against the Node as last read, and sent only when it changes something.
A metadata patch carries the resourceVersion it was computed from: a conflict (409, someone else
wrote the Node in between) re-reads the Node and computes the patch again. The status subresource
patch cannot carry one through the port (``patch_status`` sends the status only), so it is computed
from a Node read just before it; it replaces ``status.conditions`` (a JSON merge patch replaces
lists) keeping every other condition as read.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.agent.health import CONDITION_GPU_HEALTHY, NodeCondition
from gpufleet.kube import ApiError, Clock, ClusterApi, Kind
from gpufleet.kube.controller.events import EventRecorder, PodEvent
from gpufleet.kube.controller.leader import micro_time

__all__ = ["DesiredNode", "NodeWriter", "condition_patch", "metadata_patch", "patch_node"]

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]
CONFLICT_ATTEMPTS = 8


@dataclass(frozen=True, slots=True)
class DesiredNode:
    """The Node as the agent wants it: keys to set (a value) or remove (None), and the condition."""

    labels: Mapping[str, str | None] = field(default_factory=dict)
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    condition: NodeCondition | None = None


def _meta(node: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = node.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _changed_keys(current: Any, wanted: Mapping[str, str | None]) -> dict[str, str | None]:
    have = current if isinstance(current, Mapping) else {}
    return {k: v for k, v in wanted.items() if (v is None and k in have) or (v is not None and have.get(k) != v)}


def metadata_patch(node: Mapping[str, Any], desired: DesiredNode,
                   remove_if: Mapping[str, str] | None = None) -> JsonDict | None:
    """The merge patch that makes ``node``'s labels and annotations what ``desired`` says, or None
    when they already are. ``remove_if``: annotations removed only while they still hold that value
    (a consumed request; a newer one is left for the next poll)."""
    meta = _meta(node)
    labels = _changed_keys(meta.get("labels"), desired.labels)
    annotations = _changed_keys(meta.get("annotations"), desired.annotations)
    got = meta.get("annotations")
    have: Mapping[str, Any] = got if isinstance(got, Mapping) else {}
    for key, value in (remove_if or {}).items():
        if have.get(key) == value:
            annotations[key] = None
    if not labels and not annotations:
        return None
    out: JsonDict = {"resourceVersion": str(meta.get("resourceVersion") or "")}
    if labels:
        out["labels"] = labels
    if annotations:
        out["annotations"] = annotations
    return {"metadata": out}


def condition_patch(node: Mapping[str, Any], wanted: NodeCondition, now: float) -> JsonDict | None:
    """``status.conditions`` with ``GPUHealthy`` as ``wanted`` (the others kept), or None when it is
    already so. lastTransitionTime moves only when the status does."""
    got = node.get("status")
    status: Mapping[str, Any] = got if isinstance(got, Mapping) else {}
    conditions = [c for c in (status.get("conditions") or []) if isinstance(c, Mapping)]
    mine = next((c for c in conditions if c.get("type") == CONDITION_GPU_HEALTHY), None)
    if mine is not None and (mine.get("status"), mine.get("reason"), mine.get("message")) == (
            wanted.status, wanted.reason, wanted.message):
        return None
    stamp = micro_time(now).split(".")[0] + "Z"  # a metav1.Time: seconds
    moved = mine is None or mine.get("status") != wanted.status
    condition = {"type": CONDITION_GPU_HEALTHY, "status": wanted.status, "reason": wanted.reason,
                 "message": wanted.message, "lastHeartbeatTime": stamp,
                 "lastTransitionTime": stamp if moved else (mine or {}).get("lastTransitionTime", stamp)}
    others = [dict(c) for c in conditions if c.get("type") != CONDITION_GPU_HEALTHY]
    return {"conditions": [*others, condition]}


def _with_metadata(node: Mapping[str, Any], patch: JsonDict) -> JsonDict:
    """``node`` with a :func:`metadata_patch` applied (for a dry run, which sends nothing)."""
    meta = dict(_meta(node))
    for part in ("labels", "annotations"):
        if part in patch["metadata"]:
            merged = {**(meta.get(part) or {}), **patch["metadata"][part]}
            meta[part] = {k: v for k, v in merged.items() if v is not None}
    return {**node, "metadata": meta}


async def patch_node(api: ClusterApi, name: str,
                     compute: Callable[[JsonDict], JsonDict | None]) -> tuple[JsonDict | None, bool]:
    """Read the Node, patch it with ``compute(node)`` (None: nothing to do), again on a conflict.
    Returns (the Node as stored after, whether a patch was applied); (None, False) when there is no
    such Node. Other API errors are raised."""
    for _ in range(CONFLICT_ATTEMPTS):
        node = await api.get(Kind.NODE, "", name)
        if node is None:
            return None, False
        patch = compute(node)
        if patch is None:
            return node, False
        try:
            return await api.patch(Kind.NODE, "", name, patch), True
        except ApiError as err:
            if err.status != 409:
                raise
            log.info("node %s changed while the agent wrote it; reading it again", name)
    raise ApiError(409, "Conflict", f"node {name}: still conflicting after {CONFLICT_ATTEMPTS} attempts")


class NodeWriter:
    """Writes one Node. ``echo``: a dry run, the writes printed through it instead of sent."""

    def __init__(self, api: ClusterApi, name: str, clock: Clock, events: EventRecorder,
                 echo: Callable[[str, JsonDict], Awaitable[None] | None] | None = None) -> None:
        self.api = api
        self.name = name
        self.clock = clock
        self.events = events
        self.echo = echo
        self.node: JsonDict | None = None  # as last read or written
        self.writes = 0

    async def read(self) -> JsonDict | None:
        self.node = await self.api.get(Kind.NODE, "", self.name)
        return self.node

    def pending(self, desired: DesiredNode, remove_if: Mapping[str, str]) -> bool:
        """Whether ``desired`` differs from the Node as last read (no API call)."""
        if self.node is None:
            return True
        return (metadata_patch(self.node, desired, remove_if) is not None
                or (desired.condition is not None
                    and condition_patch(self.node, desired.condition, self.clock.now()) is not None))

    async def _show(self, what: str, body: JsonDict) -> None:
        assert self.echo is not None
        shown = self.echo(what, body)
        if shown is not None:
            await shown

    async def apply(self, desired: DesiredNode, remove_if: Mapping[str, str]) -> None:
        """Make the Node so (raises ApiError when the API server refuses or is unreachable)."""
        if self.echo is not None:
            node: JsonDict = await self.read() or {}
            patch = metadata_patch(node, desired, remove_if)
            if patch is not None:
                await self._show(f"patch node {self.name}", patch)
                node = _with_metadata(node, patch)
            if desired.condition is not None:
                status = condition_patch(node, desired.condition, self.clock.now())
                if status is not None:
                    await self._show(f"patch node {self.name} status", {"status": status})
                    node = {**node, "status": {**(node.get("status") or {}), **status}}
            self.node = node  # as if written: a dry run prints each change once
            return
        written, wrote = await patch_node(self.api, self.name, lambda n: metadata_patch(n, desired, remove_if))
        if written is None:
            raise ApiError(404, "NotFound", f"node {self.name} does not exist")
        self.writes += wrote
        self.node = node = written
        if desired.condition is not None:
            status = condition_patch(node, desired.condition, self.clock.now())
            if status is not None:
                await self.api.patch_status(Kind.NODE, "", self.name, status)
                self.writes += 1
                self.node = {**node, "status": {**(node.get("status") or {}), **status}}

    async def event(self, reason: str, note: str, warning: bool) -> None:
        uid = str(_meta(self.node or {}).get("uid") or "")
        event = PodEvent(namespace="", name=self.name, uid=uid, reason=reason, note=note,
                         type="Warning" if warning else "Normal", action="GPUHealthCheck", kind="Node")
        if self.echo is not None:
            await self._show(f"event on node {self.name}", self.events.body(event))
            return
        await self.events.emit(event, force=True)
