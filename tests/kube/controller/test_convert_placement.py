"""The controller's reading of a PodGroup's ``spec.placement``: a value past the CRD's enum is the
SchedulerConfig's placement and one warning line, never a PodGroup left out (its pods would wait)."""

from __future__ import annotations

import logging

import pytest

from gpufleet.domain import Placement
from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.convert import ConversionError, convert_object


def _group(spec: dict[str, object]) -> dict[str, object]:
    return {"metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": 2, **spec}}


def test_a_good_placement_is_read() -> None:
    assert convert_object(Kind.POD_GROUP, _group({"placement": "spread"})).placement is Placement.SPREAD
    assert convert_object(Kind.POD_GROUP, _group({})).placement is None


@pytest.mark.parametrize("value", ["defrag", "fast", 3, None])
def test_a_bad_placement_is_the_configs_and_a_warning(value: object, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gpufleet.kube.controller.convert")
    group = convert_object(Kind.POD_GROUP, _group({"placement": value, "queue": "team-a"}))
    assert (group.placement, group.min_member, group.queue) == (None, 2, "team-a")
    if value is not None:  # null is absent, as for every optional field
        (line,) = [r.getMessage() for r in caplog.records]
        assert line.startswith("PodGroup ml/g: spec.placement: ") and "SchedulerConfig's placement is used" in line


def test_another_bad_field_still_leaves_the_group_out() -> None:
    with pytest.raises(ConversionError, match=r"spec\.minMember"):
        convert_object(Kind.POD_GROUP, _group({"placement": "fast", "minMember": 0}))
