"""The lookup's order: the kubelet admits pods by creation time, so the plugin prefers the earliest
pod; Allocate takes the pod whose annotated GPUs hold the devices asked for."""

from __future__ import annotations

from typing import Any

from gpufleet.agent.deviceplugin.lookup import Choice, choose_for_allocate, choose_preferred, pod_record
from gpufleet.testing import fake_gpus

GPUS = fake_gpus(4)
U = [gpu.uuid for gpu in GPUS]


def pod(name: str, created: str, index: str) -> Any:
    return pod_record({
        "metadata": {"name": name, "namespace": "ml", "uid": name, "creationTimestamp": created,
                     "annotations": {"gpufleet.dev/gpu-index": index}},
        "spec": {"schedulerName": "gpufleet", "nodeName": "n1",
                 "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Pending"},
    })


def test_the_earliest_pod_is_preferred_then_the_name() -> None:
    pods = [pod("b", "2026-01-01T00:00:05Z", "1"), pod("a", "2026-01-01T00:00:09Z", "2"),
            pod("c", "2026-01-01T00:00:05Z", "3")]
    assert choose_preferred(pods, GPUS, "n1", "nvidia.com/gpu", U, [], 1) == [U[1]]  # b: earliest, before c
    # Its GPU is not available (still in use): the next pod whose GPU is.
    assert choose_preferred(pods, GPUS, "n1", "nvidia.com/gpu", [U[0], U[2], U[3]], [], 1) == [U[3]]


def test_allocate_takes_the_pod_whose_gpus_were_asked_for() -> None:
    pods = [pod("b", "2026-01-01T00:00:05Z", "1"), pod("a", "2026-01-01T00:00:09Z", "2")]
    choice = choose_for_allocate(pods, GPUS, "n1", "nvidia.com/gpu", [U[2]])
    assert isinstance(choice, Choice)
    assert (choice.pod.name, choice.container, [g.uuid for g in choice.gpus]) == ("a", "main", [U[2]])
