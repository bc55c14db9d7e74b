"""The health kept on the Node: it round-trips, and bad content gives unknown history and one line."""

from __future__ import annotations

import json

import pytest

from gpufleet.agent.health import ANNOTATION_GPU_HEALTH, dump_health, load_health

from .steps import reading, run, xid


def test_a_step_round_trips_through_the_annotation() -> None:
    result = run(run({}, 0.0, [reading(i, ecc_dbe_volatile=0) for i in range(3)]), 7.5,
                 [reading(0, row_remap_pending=True), reading(1, error="boom"), reading(2, ecc_dbe_volatile=0)],
                 [xid(13, 0), xid(79, 2)])
    loaded = load_health(dump_health(result.gpus))
    assert loaded.error is None
    assert tuple(loaded.gpus.values()) == result.gpus


def test_the_annotation_is_compact_json_in_index_order() -> None:
    text = dump_health(run({}, 0.0, [reading(1), reading(0)]).gpus)
    document = json.loads(text)
    assert document["version"] == 1
    assert [gpu["index"] for gpu in document["gpus"]] == [0, 1]
    assert " " not in text.replace("no bad signal", "")


def test_no_annotation_is_no_history_and_no_error() -> None:
    loaded = load_health(None)
    assert dict(loaded.gpus) == {} and loaded.error is None


@pytest.mark.parametrize(("text", "problem"), [
    ("{", "the document: Invalid JSON"),
    ('{"version": 2, "gpus": []}', "version: Invalid enum value 2"),
    ('{"version": 1, "gpus": [], "extra": 1}', "the document: Object contains unknown field `extra`"),
    ('{"version": 1, "gpus": [{"index": 0, "uuid": "u", "state": "Fine", "reason": "", "since": 0}]}',
     "gpus.0.state: Invalid enum value 'Fine'"),
    ('{"version": 1, "gpus": [{"index": -1, "uuid": "u", "state": "Healthy", "reason": "", "since": 0}]}',
     "gpus.0.index: Expected `int` >= 0"),
    ('{"version": 1, "gpus": [{"index": 0, "uuid": "u", "state": "Healthy", "reason": "", "since": 0},'
     ' {"index": 0, "uuid": "v", "state": "Healthy", "reason": "", "since": 0}]}', "gpus: repeats a GPU index"),
    ('{"version": 1, "gpus": [{"index": 0, "uuid": "u", "state": "Healthy", "reason": "", "since": "NaN"}]}',
     "gpus.0.since: "),
    ("[" * 100_000, "longer than 65536 characters"),
])
def test_bad_content_falls_back_to_unknown_history_with_one_line(text: str, problem: str) -> None:
    loaded = load_health(text)
    assert dict(loaded.gpus) == {}
    assert loaded.error is not None
    assert loaded.error.startswith(f"annotation {ANNOTATION_GPU_HEALTH}: {problem}")
    assert loaded.error.endswith("; starting with unknown GPU history")
    assert "\n" not in loaded.error


def test_after_a_corrupted_annotation_a_persisting_condition_is_marked_again() -> None:
    loaded = load_health("not json")
    result = run(loaded.gpus, 100.0, [reading(0, lost=True), reading(1)])
    assert [gpu.state.value for gpu in result.gpus] == ["Unhealthy", "Healthy"]


def test_dumping_never_raises_and_an_out_of_bounds_value_is_refused_on_reading() -> None:
    from gpufleet.agent.health import GpuHealth, HealthState

    odd = GpuHealth(index=0, uuid="GPU-" + "x" * 200, state=HealthState.HEALTHY, reason="", since=float("nan"))
    loaded = load_health(dump_health([odd]))
    assert dict(loaded.gpus) == {}
    assert loaded.error is not None and loaded.error.startswith(f"annotation {ANNOTATION_GPU_HEALTH}: gpus.0.")
