"""The PodGroup ``placement`` a group plan carries (docs/semantics-notes.md, "Workload owners and their
gangs", Placement): spread for inference kinds, none for the others, the owner's annotation for any kind,
and a bad annotation is a warning with the default, never a problem."""

from __future__ import annotations

import dataclasses

import pytest

from gpufleet.adapters import owner_from_dict
from gpufleet.domain import Placement
from gpufleet.policy.grouping import ANNOTATION_PLACEMENT, GroupPlan, group_for

from .helpers import FACTS, manifest


def _plan(name: str, annotations: dict[str, str] | None = None) -> GroupPlan:
    doc = manifest(name)
    if annotations is not None:
        doc["metadata"]["annotations"] = annotations
    result = group_for(owner_from_dict(doc), FACTS, "p-0")
    assert isinstance(result, tuple), result
    return result[0]


@pytest.mark.parametrize(("name", "default"), [
    ("deployment.yaml", Placement.SPREAD), ("statefulset.yaml", Placement.SPREAD),
    ("pytorchjob.yaml", None), ("jobset.yaml", None),
])
def test_default_is_spread_for_inference_only(name: str, default: Placement | None) -> None:
    plan = _plan(name)
    assert plan.placement is default and plan.warnings == ()


@pytest.mark.parametrize("name", ["deployment.yaml", "pytorchjob.yaml"])
@pytest.mark.parametrize("value", ["binpack", "spread"])
def test_the_owner_annotation_chooses_for_any_kind(name: str, value: str) -> None:
    plan = _plan(name, {ANNOTATION_PLACEMENT: value})
    assert plan.placement == Placement(value) and plan.warnings == ()


@pytest.mark.parametrize(("name", "value", "words"), [
    ("deployment.yaml", "defrag", 'annotation gpufleet.dev/placement: "defrag" is not binpack or spread; spread is used'),
    ("deployment.yaml", "Spread", "spread is used"),
    ("pytorchjob.yaml", "", "the SchedulerConfig's is used"),
])
def test_a_bad_annotation_is_a_warning_and_the_default(name: str, value: str, words: str) -> None:
    default = _plan(name)
    plan = _plan(name, {ANNOTATION_PLACEMENT: value})
    (warning,) = plan.warnings
    assert warning.startswith(f"{plan.owner}: ") and words in warning
    # Everything else is the plan without the annotation: a strategy gains no queue, class or size.
    assert dataclasses.replace(plan, warnings=()) == default


@pytest.mark.parametrize("value", ["binpack", "spread", "x" * 100])
def test_the_annotation_never_changes_queue_class_or_size(value: str) -> None:
    plan = _plan("deployment.yaml", {ANNOTATION_PLACEMENT: value})
    base = _plan("deployment.yaml")
    assert (plan.queue, plan.priority_class, plan.min_member, plan.max_member, plan.name) == (
        base.queue, base.priority_class, base.min_member, base.max_member, base.name)
    assert all(len(w) < 200 for w in plan.warnings)  # the value is cut in the message
