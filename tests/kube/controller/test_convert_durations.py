"""The controller reads durations (Queue and SchedulerConfig fields) with the one parser of every duration
(docs/semantics.md, "Durations"): each form is read, a malformed one is one line naming the object and field."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.convert import ConversionError, convert_object


@pytest.mark.parametrize(("kind", "obj", "message"), [
    (Kind.QUEUE, {"metadata": {"name": "q"}, "spec": {"preemption": {"minRuntime": "5w"}}},
     r'^Queue q: spec\.preemption\.minRuntime: must be a duration like 90, 30m, 1h30m or 2d, got "5w"$'),
    (Kind.QUEUE, {"metadata": {"name": "q"}, "spec": {"preemption": {"preemptionDelay": True}}},
     r"^Queue q: spec\.preemption\.preemptionDelay: must be a duration like 90, 30m, 1h30m or 2d, got true$"),
    (Kind.SCHEDULER_CONFIG, {"metadata": {"name": "default"}, "spec": {"fairShare": {"usageHalfLife": "-1h"}}},
     r'^SchedulerConfig default: spec\.fairShare\.usageHalfLife: must be a duration like .*, got "-1h"$'),
    (Kind.SCHEDULER_CONFIG, {"metadata": {"name": "default"}, "spec": {"reservation": {"after": "1e999s"}}},
     r'^SchedulerConfig default: spec\.reservation\.after: must be a finite duration >= 0, got "1e999s"$'),
])
def test_the_controller_refuses_a_malformed_duration_in_one_line(kind: Kind, obj: dict[str, Any],
                                                                 message: str) -> None:
    """Durations the API server let through (an older CRD's pattern) are read by the one parser too."""
    with pytest.raises(ConversionError, match=message):
        convert_object(kind, obj)


def test_the_controller_reads_every_form_of_duration() -> None:
    queue_spec = {"preemption": {"minRuntime": "1h30m", "preemptionDelay": 90}}
    converted = convert_object(Kind.QUEUE, {"metadata": {"name": "q"}, "spec": queue_spec})
    assert (converted.min_runtime, converted.preemption_delay) == (5400.0, 90.0)
    config = convert_object(Kind.SCHEDULER_CONFIG, {"metadata": {"name": "default"},
                                                     "spec": {"fairShare": {"usageHalfLife": "7d"}}})
    assert config.usage_half_life == 7 * 86400.0
