"""The Node's side: the unhealthy-gpus annotation in the engine's format, the uncordon request, the condition."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.adapters import FieldError, node_from_dict
from gpufleet.agent.health import (
    ANNOTATION_UNHEALTHY_GPUS,
    GpuHealth,
    HealthAnnotationError,
    HealthState,
    format_gpu_indices,
    node_condition,
    parse_gpu_indices,
    parse_uncordon,
    unhealthy_indices,
)

from .steps import reading, run, xid


def _engine_reads(value: str) -> frozenset[int]:
    doc: dict[str, Any] = {"metadata": {"name": "n1", "annotations": {ANNOTATION_UNHEALTHY_GPUS: value}},
                           "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    return node_from_dict(doc).unhealthy_gpus


def gpu(index: int, state: HealthState, reason: str = "r") -> GpuHealth:
    return GpuHealth(index=index, uuid=f"GPU-{index}", state=state, reason=reason, since=0.0)


@given(st.frozensets(st.integers(0, 999_999), max_size=16))
def test_the_engine_reads_back_exactly_the_indices_written(indices: frozenset[int]) -> None:
    assert _engine_reads(format_gpu_indices(indices)) == indices


@given(st.text(alphabet="0123456789, -x", max_size=12))
def test_the_uncordon_parser_accepts_and_rejects_what_the_engine_does(text: str) -> None:
    try:
        expected: frozenset[int] | None = _engine_reads(text)
    except FieldError:
        expected = None
    try:
        got: frozenset[int] | None = parse_uncordon(text)
    except HealthAnnotationError:
        got = None
    assert got == expected


def test_uncordon_values() -> None:
    assert parse_uncordon("3") == {3}
    assert parse_uncordon(" 1, 3 ") == {1, 3}
    assert parse_uncordon("") == frozenset()


@pytest.mark.parametrize(("value", "message"), [
    ("three", 'annotation gpufleet.dev/gpu-uncordon: must be GPU indices such as "0,1", got \'three\''),
    ("1,1", "annotation gpufleet.dev/gpu-uncordon: repeats a GPU index: '1,1'"),
    ("-1", 'annotation gpufleet.dev/gpu-uncordon: must be GPU indices such as "0,1", got \'-1\''),
])
def test_a_bad_uncordon_value_is_one_line_naming_the_annotation(value: str, message: str) -> None:
    with pytest.raises(HealthAnnotationError) as caught:
        parse_uncordon(value)
    assert str(caught.value) == message
    assert "\n" not in str(caught.value)


def test_parse_gpu_indices_names_its_place() -> None:
    with pytest.raises(HealthAnnotationError, match=r"^here: "):
        parse_gpu_indices("x", "here")


def test_unhealthy_indices_lists_the_unhealthy_not_the_unknown() -> None:
    result = run(run({}, 0.0, [reading(i) for i in range(4)]), 1.0,
                 [reading(0), reading(1, error="boom"), reading(2), reading(3, lost=True)], [xid(79, 2)])
    assert unhealthy_indices(result.gpus) == {2, 3}
    assert format_gpu_indices(unhealthy_indices(result.gpus)) == "2,3"
    assert format_gpu_indices(()) == ""


def test_condition_true_when_all_healthy() -> None:
    condition = node_condition([gpu(0, HealthState.HEALTHY), gpu(1, HealthState.HEALTHY)])
    assert (condition.type, condition.status, condition.reason, condition.message) == (
        "GPUHealthy", "True", "AllGpusHealthy", "all 2 GPUs healthy")


def test_condition_false_names_the_unhealthy_and_the_unknown() -> None:
    condition = node_condition([gpu(1, HealthState.UNKNOWN, "cannot read"), gpu(0, HealthState.UNHEALTHY, "Xid 79"),
                                gpu(2, HealthState.HEALTHY)])
    assert (condition.status, condition.reason) == ("False", "GpuUnhealthy")
    assert condition.message == ("1 of 3 GPUs unhealthy: GPU 0 (GPU-0): Xid 79; "
                                 "1 unknown: GPU 1 (GPU-1): cannot read")


def test_condition_unknown_when_a_gpu_is_unknown_or_nvml_unreadable_or_no_gpu() -> None:
    assert node_condition([gpu(0, HealthState.UNKNOWN)]).reason == "GpuHealthUnknown"
    unreadable = node_condition([gpu(0, HealthState.HEALTHY)], read_error="NVML Shared Library Not Found")
    assert (unreadable.status, unreadable.reason) == ("Unknown", "NvmlUnavailable")
    assert "NVML Shared Library Not Found" in unreadable.message
    assert node_condition([]).status == "Unknown"


def test_condition_message_is_bounded() -> None:
    condition = node_condition([gpu(i, HealthState.UNHEALTHY, "x" * 500) for i in range(8)])
    assert len(condition.message) <= 1024


def test_merge_uncordon_keeps_what_is_already_asked() -> None:
    from gpufleet.agent.health import merge_uncordon

    assert merge_uncordon(None, [3]) == "3"
    assert merge_uncordon("1", [3]) == "1,3"
    assert merge_uncordon("3", [3]) == "3"
    assert merge_uncordon("garbage", [2]) == "2"
