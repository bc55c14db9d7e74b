"""Queue mapping rules, derived quotas and queue files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpufleet.adapters.errors import InputError
from gpufleet.adapters.traces.records import TraceJob
from gpufleet.domain import GPU, QueueName
from gpufleet.sim.queue_mapping import QueueBy, QueueMapping, derived_quotas, load_queue_map, plan_queues

from .helpers import job

DEFAULT = QueueName("default")


def _trace() -> list[TraceJob]:
    return [
        job("a", 0, 100, 1, vc="vc1"),
        job("b", 0, 300, 2, vc="vc2"),
        job("c", 0, 100, 1),  # no vc: the default queue
        job("d", 0, 100, 0, vc="vc1"),  # CPU-only: no GPU-time
    ]


def test_queue_by_vc_derives_one_queue_per_value_with_gpu_time_quotas() -> None:
    plan = plan_queues(_trace(), QueueMapping(QueueBy.VC), default_queue=DEFAULT, total_gpus=10)
    assert plan.job_queues == ("vc1", "vc2", "default", "vc1")
    quotas = {q.name: q.resources[GPU].quota for q in plan.queues}
    # GPU-seconds: vc1 100, vc2 600, default 100 -> 1.25, 7.5, 1.25 of 10 GPUs: floors 1, 7, 1 and the one
    # GPU left goes to the largest remainder (vc2's 0.5)
    assert quotas == {"default": 1000, "vc1": 1000, "vc2": 8000}
    assert sum(q for q in quotas.values() if q is not None) == 10_000


def test_derived_quotas_add_up_and_break_ties_by_name() -> None:
    assert derived_quotas({"x": 1, "y": 1, "z": 1}, 10) == {"x": 4, "y": 3, "z": 3}
    assert derived_quotas({"x": 0, "y": 0}, 3) == {"x": 2, "y": 1}
    assert derived_quotas({}, 5) == {}


def test_queue_by_none_puts_everything_in_the_default_queue_without_queues() -> None:
    plan = plan_queues(_trace(), QueueMapping(QueueBy.NONE), default_queue=DEFAULT, total_gpus=10)
    assert set(plan.job_queues) == {"default"} and plan.queues == ()


def test_queue_by_user_reads_the_user_attribute() -> None:
    trace = [dataclasses.replace(job(n, 0, 1), attrs={"user": n}) for n in ("ann", "bob")]
    plan = plan_queues(trace, QueueMapping(QueueBy.USER), default_queue=DEFAULT, total_gpus=2)
    assert plan.job_queues == ("ann", "bob")


def test_mapping_file_sends_values_to_named_queues(tmp_path: Path) -> None:
    path = tmp_path / "map.yaml"
    path.write_text("queueBy: vc\nmap: {vc1: research, vc2: research}\ndefault: other\n")
    mapping = load_queue_map(path, None)
    plan = plan_queues(_trace(), mapping, default_queue=DEFAULT, total_gpus=10)
    assert plan.job_queues == ("research", "research", "other", "research")
    assert {q.name for q in plan.queues} == {"research", "other"}


def test_queues_file_with_leaf_names_and_fallback(tmp_path: Path) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(
        "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: org}\n---\n"
        "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: vc1}\n"
        "spec: {parent: org, resources: {nvidia.com/gpu: {quota: '4'}}}\n"
    )
    plan = plan_queues(_trace(), QueueMapping(QueueBy.VC), default_queue=DEFAULT, total_gpus=10, queues_file=queues)
    # vc1 is a leaf of the file; vc2 and the job without a vc go to the (implicit) default queue
    assert plan.job_queues == ("vc1", "default", "default", "vc1")
    assert not plan.derived and {q.name for q in plan.queues} == {"org", "vc1"}


def test_mapping_to_a_parent_queue_is_an_error(tmp_path: Path) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(
        "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: org}\n---\n"
        "apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: vc1}\nspec: {parent: org}\n"
    )
    mapping = QueueMapping(QueueBy.VC, explicit={"vc2": QueueName("org")})
    with pytest.raises(InputError, match=r"queue org .* is not a leaf queue"):
        plan_queues(_trace(), mapping, default_queue=DEFAULT, total_gpus=10, queues_file=queues)


def test_mapping_to_a_missing_queue_is_an_error(tmp_path: Path) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text("apiVersion: gpufleet.dev/v1alpha1\nkind: Queue\nmetadata: {name: vc1}\n")
    mapping = QueueMapping(QueueBy.VC, explicit={"vc2": QueueName("nowhere")})
    with pytest.raises(InputError, match="no Queue named nowhere"):
        plan_queues(_trace(), mapping, default_queue=DEFAULT, total_gpus=10, queues_file=queues)


@pytest.mark.parametrize(("text", "message"), [
    ("map: {a: b}\n", "queueBy: required"),
    ("queueBy: colour\n", "queueBy"),
    ("queueBy: vc\nextra: 1\n", "extra"),
    ("- a\n", "expected a mapping"),
])
def test_bad_mapping_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "map.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_queue_map(path, None)


def test_queue_by_option_wins_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "map.yaml"
    path.write_text("queueBy: vc\n")
    assert load_queue_map(path, QueueBy.QOS).by is QueueBy.QOS
