"""Reconciliation after a restart: the ledger's open intervals against the pods the API server shows.

Pure: the controller lists the open intervals (:meth:`LedgerStore.open_intervals`) and the pods, and
writes what :func:`reconcile` returns. The rules are in docs/semantics-notes.md ("Usage ledger").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.ledger.model import EndReason, IntervalEnd, IntervalStart, to_micros

__all__ = ["ObservedPod", "Reconciliation", "reconcile"]


@dataclass(frozen=True, slots=True)
class ObservedPod:
    """A bound pod as the API server shows it: the interval it stands for (its bound time from its
    ``PodScheduled`` condition) and, when its status says it has ended, how (``ended``) and when
    (``ended_at``, e.g. its containers' last ``finishedAt``; None: unknown)."""

    start: IntervalStart
    ended: EndReason | None = None
    ended_at: float | None = None
    preemptor: str | None = None


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """What to write: intervals to close, and intervals to open (in this order: starts, then ends)."""

    starts: tuple[IntervalStart, ...]
    ends: tuple[IntervalEnd, ...]


def _end(start: IntervalStart, at: float, reason: EndReason, preemptor: str | None = None) -> IntervalEnd:
    return IntervalEnd(start.pod_uid, start.bound_at, max(at, start.bound_at), reason, preemptor)


def reconcile(open_intervals: Iterable[IntervalStart], observed: Iterable[ObservedPod], now: float) -> Reconciliation:
    """Close the open intervals whose pods are gone or ended, open those of bound pods with no record.

    * an open interval whose pod (by UID) is not shown: closed at ``now``, reason ``deleted``;
    * one whose pod is shown ended: closed, with the pod's reason, at its ``ended_at`` when given
      (never later than ``now``), else at ``now``;
    * one whose pod is shown bound again at another time (evicted and bound again): closed at the new
      bound time (it cannot have ended later), reason ``deleted``;
    * a pod shown bound with no open interval of its (UID, bound time): opened; when it is shown ended,
      also closed as above (a pod that ran while the controller was away).
    """
    shown: dict[str, ObservedPod] = {pod.start.pod_uid: pod for pod in observed}
    open_keys: set[tuple[str, int]] = set()
    starts: list[IntervalStart] = []
    ends: list[IntervalEnd] = []
    for start in open_intervals:
        open_keys.add((start.pod_uid, to_micros(start.bound_at)))
        pod = shown.get(start.pod_uid)
        if pod is None:
            ends.append(_end(start, now, EndReason.DELETED))
        elif to_micros(pod.start.bound_at) != to_micros(start.bound_at):
            ends.append(_end(start, min(now, pod.start.bound_at), EndReason.DELETED))
        elif pod.ended is not None:
            ends.append(_ended(pod, now))
    for pod in shown.values():
        if (pod.start.pod_uid, to_micros(pod.start.bound_at)) in open_keys:
            continue
        starts.append(pod.start)
        if pod.ended is not None:
            ends.append(_ended(pod, now))
    return Reconciliation(starts=tuple(starts), ends=tuple(ends))


def _ended(pod: ObservedPod, now: float) -> IntervalEnd:
    at = now if pod.ended_at is None else min(pod.ended_at, now)
    assert pod.ended is not None
    return _end(pod.start, at, pod.ended, pod.preemptor)
