"""The lifecycles of what the controller carries out, as explicit transition tables.

A decision of the engine becomes work that lasts longer than one cycle, and each piece of that
work moves through a few states. Writing the allowed moves down as a table (state, event) -> state,
checked on every move, keeps the rules in one place and turns a move the code never meant to make
into an error at once, instead of a pod silently stuck in the wrong state.

- **A pod being bound** (:attr:`gpufleet.kube.controller.binder.Binder.inflight`): *binding
  volumes* (only a pod whose binding chose volumes: a chosen PersistentVolume's claimRef and a
  claim's selected-node annotation are being written, for every pod of its gang; likewise a pod
  allocating DRA devices, while its ResourceClaims' status is written) -> *annotating*
  (its gpu-index/gpu-blocks annotations are being written) -> *binding* (its Binding is being
  posted) -> *bound* (the API server confirmed; the pod holds its place until the informer shows
  it on its node). A failure at any stage takes the pod out of the table: the engine decides it
  afresh.
- **A pod being evicted** (:attr:`gpufleet.kube.controller.loop.Controller.victims`): *requested*
  (decided, not yet asked) -> *evicted* (the API server accepted the Eviction), or *blocked* (a
  PodDisruptionBudget refused it) or *failed* (any other error); blocked and failed ones are asked
  again after a while. A victim that is already gone leaves the table, as does one the informer no
  longer shows.
- **A gang's plan** (:attr:`gpufleet.kube.controller.loop.Controller.plans`): a gang whose
  placement needs victims to go first waits in the plans; once they are gone its pods enter the
  binding lifecycle above, and a plan that waits longer than ``plan_timeout`` is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

__all__ = [
    "BINDING",
    "EVICTION",
    "BindEvent",
    "BindStage",
    "EvictEvent",
    "EvictState",
    "IllegalTransition",
    "Lifecycle",
]

S = TypeVar("S", bound=StrEnum)
E = TypeVar("E", bound=StrEnum)


class IllegalTransition(RuntimeError):
    """A move the lifecycle does not allow: a bug in the controller, never the cluster's doing."""


@dataclass(frozen=True)
class Lifecycle(Generic[S, E]):
    """A transition table: ``moves[(state, event)]`` is the state after ``event`` in ``state``."""

    name: str
    moves: Mapping[tuple[S, E], S]

    def next(self, state: S, event: E) -> S:
        """The state after ``event``; raises :class:`IllegalTransition` for a move not in the table."""
        after = self.moves.get((state, event))
        if after is None:
            raise IllegalTransition(f"{self.name}: {event.value!r} is not allowed in state {state.value!r}")
        return after


class BindStage(StrEnum):
    ANNOTATING = "annotating"
    BINDING = "binding"
    BOUND = "bound"
    BINDING_VOLUMES = "binding volumes"  # the first stage of a pod whose binding chose volumes


class BindEvent(StrEnum):
    ANNOTATED = "annotated"  # every annotation the binding needs is written (or carried by the Binding)
    CONFIRMED = "confirmed"  # the API server accepted the Binding (or showed it already on our node)
    VOLUMES_WRITTEN = "volumes written"  # every volume write of the pod's gang is in place


BINDING: Lifecycle[BindStage, BindEvent] = Lifecycle("binding", {
    (BindStage.BINDING_VOLUMES, BindEvent.VOLUMES_WRITTEN): BindStage.ANNOTATING,
    (BindStage.ANNOTATING, BindEvent.ANNOTATED): BindStage.BINDING,
    (BindStage.BINDING, BindEvent.CONFIRMED): BindStage.BOUND,
})


class EvictState(StrEnum):
    REQUESTED = "requested"
    EVICTED = "evicted"
    BLOCKED = "blocked"
    FAILED = "failed"


class EvictEvent(StrEnum):
    """What an eviction call ended in (:attr:`gpufleet.kube.controller.binder.EvictOutcome.result`;
    its fourth result, "gone", takes the victim out of the table)."""

    EVICTED = "evicted"
    BLOCKED = "blocked"
    FAILED = "failed"


_ASKED = (EvictState.REQUESTED, EvictState.BLOCKED, EvictState.FAILED)  # the states in which it is asked (again)
EVICTION: Lifecycle[EvictState, EvictEvent] = Lifecycle("eviction", {
    (state, event): EvictState(event.value) for state in _ASKED for event in EvictEvent
})
