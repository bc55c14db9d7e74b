"""The controller's lifecycles: the moves the tables allow, and that any other move is refused."""

from __future__ import annotations

import pytest

from gpufleet.kube.controller.lifecycle import (
    BINDING,
    EVICTION,
    BindEvent,
    BindStage,
    EvictEvent,
    EvictState,
    IllegalTransition,
)


def test_a_binding_goes_annotating_binding_bound() -> None:
    stage = BINDING.next(BindStage.ANNOTATING, BindEvent.ANNOTATED)
    assert stage is BindStage.BINDING
    assert BINDING.next(stage, BindEvent.CONFIRMED) is BindStage.BOUND


def test_a_binding_with_volumes_writes_them_first() -> None:
    assert BINDING.next(BindStage.BINDING_VOLUMES, BindEvent.VOLUMES_WRITTEN) is BindStage.ANNOTATING


@pytest.mark.parametrize(("stage", "event"), [
    (BindStage.BINDING_VOLUMES, BindEvent.ANNOTATED),  # no annotations before the volumes
    (BindStage.BINDING_VOLUMES, BindEvent.CONFIRMED),  # no Binding before the volumes
    (BindStage.ANNOTATING, BindEvent.VOLUMES_WRITTEN),
    (BindStage.BOUND, BindEvent.VOLUMES_WRITTEN),
])
def test_binding_volumes_refuses_other_moves(stage: BindStage, event: BindEvent) -> None:
    with pytest.raises(IllegalTransition):
        BINDING.next(stage, event)


@pytest.mark.parametrize(("stage", "event"), [
    (BindStage.ANNOTATING, BindEvent.CONFIRMED),  # no Binding before the annotations
    (BindStage.BINDING, BindEvent.ANNOTATED),
    (BindStage.BOUND, BindEvent.ANNOTATED),
    (BindStage.BOUND, BindEvent.CONFIRMED),
])
def test_binding_refuses_other_moves(stage: BindStage, event: BindEvent) -> None:
    with pytest.raises(IllegalTransition, match=f"binding: '{event.value}' is not allowed in state '{stage.value}'"):
        BINDING.next(stage, event)


@pytest.mark.parametrize("state", [EvictState.REQUESTED, EvictState.BLOCKED, EvictState.FAILED])
@pytest.mark.parametrize("event", list(EvictEvent))
def test_an_eviction_asked_ends_as_its_answer_says(state: EvictState, event: EvictEvent) -> None:
    assert EVICTION.next(state, event) is EvictState(event.value)


@pytest.mark.parametrize("event", list(EvictEvent))
def test_an_accepted_eviction_is_not_asked_again(event: EvictEvent) -> None:
    with pytest.raises(IllegalTransition):
        EVICTION.next(EvictState.EVICTED, event)
