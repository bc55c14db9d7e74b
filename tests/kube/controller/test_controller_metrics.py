"""Per-queue metric series follow the queues that exist."""

from __future__ import annotations

from gpufleet.kube.controller.metrics import ControllerMetrics


def test_queue_series_appear_and_disappear_with_queues() -> None:
    metrics = ControllerMetrics()
    metrics.set_queues({"a": 1, "b": 0}, {"a": 2, "b": 3}, {"a": {"nvidia.com/gpu": 4.0}, "b": {}},
                       {"a": {"nvidia.com/gpu": 8.0}, "b": {}})
    text = metrics.render().decode()
    assert 'gpufleet_pending_gangs{queue="a"} 1.0' in text
    assert 'gpufleet_queue_usage{queue="a",resource="nvidia.com/gpu"} 4.0' in text
    metrics.set_queues({"b": 0}, {"b": 3}, {"b": {}}, {"b": {}})
    text = metrics.render().decode()
    assert 'queue="a"' not in text
    assert 'gpufleet_admitted_gangs{queue="b"} 3.0' in text


def test_decayed_usage_series_follow_the_queues_and_vanish_when_off() -> None:
    metrics = ControllerMetrics()
    metrics.set_decayed_usage({"a": {"nvidia.com/gpu": 2.5, "cpu": 1.0}, "b": {"nvidia.com/gpu": 0.0}})
    text = metrics.render().decode()
    assert 'gpufleet_queue_decayed_usage{queue="a",resource="nvidia.com/gpu"} 2.5' in text
    assert 'gpufleet_queue_decayed_usage{queue="a",resource="cpu"} 1.0' in text
    assert 'gpufleet_queue_decayed_usage{queue="b",resource="nvidia.com/gpu"} 0.0' in text
    metrics.set_decayed_usage({"b": {"nvidia.com/gpu": 1.0}})
    text = metrics.render().decode()
    assert 'gpufleet_queue_decayed_usage{queue="a"' not in text
    assert 'gpufleet_queue_decayed_usage{queue="b",resource="nvidia.com/gpu"} 1.0' in text
    metrics.set_decayed_usage({})  # the half-life turned off
    assert "gpufleet_queue_decayed_usage{" not in metrics.render().decode()
