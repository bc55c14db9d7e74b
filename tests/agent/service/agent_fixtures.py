"""The agent under test: the real agent (health rules, discovery, usage export) over the NVML reader
on the fake NVML, through the HTTP emulator, on a virtual clock."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpufleet.agent.gpus import GpuReader
from gpufleet.agent.gpus.nvml import NvmlGpuReader, open_nvml
from gpufleet.agent.health import HealthPolicy
from gpufleet.agent.service import AgentLoop, AgentMetrics, AgentSettings, NodeWriter, UsageSink
from gpufleet.domain import GPU
from gpufleet.kube import Kind, connect
from gpufleet.kube.controller.events import EventRecorder
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import VirtualClock
from gpufleet.testing.fake_nvml import FakeNvml

NODE = "gpu-node-1"
CLEAN_PERIOD = 600.0


def fake_nvml(count: int = 8) -> FakeNvml:
    """An 8-GPU server with two NVLink islands of four (an HGX board without NVSwitch)."""
    nvml = FakeNvml.with_gpus(count)
    for island in range(0, count, 4):
        for a in range(island, min(island + 4, count)):
            for b in range(a + 1, min(island + 4, count)):
                nvml.connect(a, b)
    return nvml


class Opener:
    """``open_reader`` over a fake NVML, keeping the last reader opened."""

    def __init__(self, nvml: FakeNvml) -> None:
        self.nvml = nvml
        self.reader: NvmlGpuReader | None = None

    def __call__(self) -> GpuReader:
        self.reader = open_nvml(self.nvml)
        return self.reader


def node_object(name: str = NODE, gpus: int = 8) -> dict[str, Any]:
    """A Node as the kubelet leaves it: someone else's labels, annotations and conditions."""
    return {
        "metadata": {"name": name, "uid": "uid-" + name,
                     "labels": {"kubernetes.io/hostname": name, "team.example/owner": "infra"},
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)},
                   "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)},
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                   "message": "kubelet is posting ready status",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
    }


def make_agent(emulator: ApiServerEmulator, clock: VirtualClock, open_reader: Callable[[], GpuReader],
               echo: Any = None, usage: UsageSink | None = None, metrics: AgentMetrics | None = None,
               pods: Callable[[], Sequence[Mapping[str, Any]]] = tuple, **settings: Any) -> AgentLoop:
    api = connect(server=emulator.url_text, field_manager="gpufleet-agent", timeout=5.0)
    events = EventRecorder(api, clock, identity=NODE, reporting_controller="gpufleet.dev/agent")
    writer = NodeWriter(api, NODE, clock, events, echo=echo)
    policy = HealthPolicy(clean_period_s=CLEAN_PERIOD)
    return AgentLoop(AgentSettings(node=NODE, policy=policy, **settings), open_reader, writer, clock,
                     metrics=metrics, usage=usage, pods=pods)


def stored(emulator: ApiServerEmulator) -> dict[str, Any]:
    node = emulator.store.object(Kind.NODE, "", NODE)
    assert node is not None
    return node


def condition(emulator: ApiServerEmulator, kind: str = "GPUHealthy") -> dict[str, Any]:
    return next(c for c in stored(emulator)["status"]["conditions"] if c["type"] == kind)


def events(emulator: ApiServerEmulator) -> list[dict[str, Any]]:
    return sorted(emulator.store.objects(Kind.EVENT), key=lambda e: str(e["eventTime"]))
