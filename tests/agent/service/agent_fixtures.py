"""The agent under test: its loop over the HTTP emulator, a scriptable GPU reader, a virtual clock."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from gpufleet.agent.gpus import GpuHealthReading, GpuReader, XidEvent
from gpufleet.agent.service import AgentLoop, AgentSettings, NodeWriter
from gpufleet.agent.service.standins import HealthPolicy
from gpufleet.agent.service.wiring import agent_parts
from gpufleet.domain import GPU
from gpufleet.kube import connect
from gpufleet.kube.controller.events import EventRecorder
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import VirtualClock
from gpufleet.testing.fake_gpus import FakeGpuReader, fake_gpus

NODE = "gpu-node-1"
CLEAN_PERIOD = 600.0


class ScriptedReader(FakeGpuReader):
    """:class:`FakeGpuReader` whose health readings and Xid events a test sets (a stand-in until
    ``gpufleet.testing.fake_nvml`` drives the NVML reader)."""

    def __init__(self, count: int = 8, nvlink: bool = True) -> None:
        gpus = fake_gpus(count)
        if nvlink:  # two NVLink islands of four, as on an HGX board without NVSwitch
            gpus = tuple(dataclasses.replace(g, nvlink_peers=frozenset(range(g.index // 4 * 4, g.index // 4 * 4 + 4))
                                             - {g.index}) for g in gpus)
        super().__init__(gpus)
        self.overrides: dict[int, GpuHealthReading] = {}
        self.pending: list[XidEvent] = []

    def health(self) -> tuple[GpuHealthReading, ...]:
        return tuple(self.overrides.get(r.index, r) for r in super().health())

    def xid(self, index: int, xid: int) -> None:
        self.pending.append(XidEvent(index=index, uuid=self.read()[index].uuid, xid=xid))

    def xid_events(self) -> tuple[XidEvent, ...]:
        events, self.pending = tuple(self.pending), []
        return events


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
               echo: Any = None) -> AgentLoop[Any]:
    api = connect(server=emulator.url_text, field_manager="gpufleet-agent", timeout=5.0)
    rules, describe, usage = agent_parts(HealthPolicy(clean_period_s=CLEAN_PERIOD))
    events = EventRecorder(api, clock, identity=NODE, reporting_controller="gpufleet.dev/agent")
    writer = NodeWriter(api, NODE, clock, events, echo=echo)
    return AgentLoop(AgentSettings(node=NODE), open_reader, rules, describe, writer, clock, usage=usage)
