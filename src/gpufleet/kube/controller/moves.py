"""Consolidation moves carried out by the controller (docs/semantics.md, "Consolidation", Controller).

A bound pod cannot be bound again, so a move is an eviction (reason ``consolidation``) for the first
pod of the gang it made room for: that gang then waits as a plan for its moved pods to go, as any
gang that evicted for its room, and the moved pods' owners make replacements, placed by the ordinary
rules. Before the evictions, ``gpufleet.dev/moved-at`` gets the cycle's time on each moved pod and on
its PodGroup (which outlives the pod, so the per-pod-per-hour limit holds for the replacements), and
the PodGroup keeps the gang's age (``gpufleet.dev/queued-at``) so that the replacements queue at the
gang's old place, as after a drain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpufleet.domain import ANNOTATION_MOVED_AT, ANNOTATION_QUEUED_AT, Decisions, Eviction, EvictionReason, PodKey
from gpufleet.domain.queues import gang_id
from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.accounting import format_time
from gpufleet.kube.controller.convert import SnapshotView
from gpufleet.kube.controller.drain import gang_age

__all__ = ["MovedAtWrite", "move_evictions", "moved_at_writes", "target_text"]


@dataclass(frozen=True, slots=True)
class MovedAtWrite:
    """One merge patch before a move's eviction: a moved pod's or its PodGroup's annotations."""

    kind: Kind
    namespace: str
    name: str
    patch: dict[str, Any]


def move_evictions(view: SnapshotView, decisions: Decisions) -> Decisions:
    """``decisions`` with each move added as an eviction (reason ``consolidation``) for the first pod,
    by key, of the gang it made room for (the engine's gang key: PodGroup key, or the pod's own)."""
    if not decisions.moves:
        return decisions
    first: dict[str, PodKey] = {}
    for b in decisions.bindings:
        pod = view.pods.get(b.pod)
        if pod is None:
            continue
        key = f"{pod.namespace}/{pod.group_label}" if pod.group_label else str(pod.key)
        if key not in first or b.pod < first[key]:
            first[key] = b.pod
    moved = tuple(Eviction(m.pod, EvictionReason.CONSOLIDATION, first.get(m.for_gang, PodKey(m.for_gang)))
                  for m in decisions.moves)
    return replace(decisions, evictions=decisions.evictions + moved)


def target_text(decisions: Decisions, pod: PodKey) -> str:
    """Where the plan placed a moved pod, in words for its Event ("" when it is not a move)."""
    for m in decisions.moves or ():
        if m.pod == pod:
            return f"planned for node {m.to_node} GPUs {','.join(map(str, m.to_gpus))}"
    return ""


def _appended(history: str | None, stamp: str) -> str:
    return f"{history},{stamp}" if history else stamp


def moved_at_writes(view: SnapshotView, pods: Sequence[PodKey], now: float) -> list[MovedAtWrite]:
    """The writes before evicting the moved ``pods``: ``now`` appended to each pod's
    ``gpufleet.dev/moved-at``, and once per PodGroup to its own, with the gang's age kept."""
    stamp = format_time(now)
    writes: list[MovedAtWrite] = []
    gangs: dict[str, list[PodKey]] = {}
    for key in pods:
        pod = view.pods.get(key)
        if pod is None:
            continue
        history = _appended(pod.annotations.get(ANNOTATION_MOVED_AT), stamp)
        writes.append(MovedAtWrite(Kind.POD, pod.namespace, pod.name,
                                   {"metadata": {"annotations": {ANNOTATION_MOVED_AT: history}}}))
        gangs.setdefault(gang_id(pod), []).append(key)
    for gang in sorted(gangs):
        group = view.groups.get(gang)
        if group is None:  # a pod of its own: nothing outlives it
            continue
        annotations: dict[str, str] = {ANNOTATION_MOVED_AT: _appended(group.moved_at, stamp)}
        age = gang_age((view.pods[k] for k in gangs[gang]), group.queued_at)
        if age is not None and (group.queued_at is None or age < group.queued_at):
            annotations[ANNOTATION_QUEUED_AT] = format_time(age)
        writes.append(MovedAtWrite(Kind.POD_GROUP, group.namespace, group.name,
                                   {"metadata": {"annotations": annotations}}))
    return writes
