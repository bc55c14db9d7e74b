"""The real agent end to end: the NVML reader over the fake NVML, the health rules, discovery, the
usage export and the agent's metrics, through the HTTP emulator, on a virtual clock (no sleeps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.agent.health import XID_CATALOG
from gpufleet.agent.service.wiring import agent_parts
from gpufleet.domain import ANNOTATION_GPU_INDEX, ANNOTATION_UNHEALTHY_GPUS, SCHEDULER_NAME
from gpufleet.telemetry import PodKey, parse_exporter_text, pod_usage
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import VirtualClock

from ..usage.proctree import ProcTree
from .agent_fixtures import (
    NODE,
    Opener,
    condition,
    events,
    fake_nvml,
    make_agent,
    stored,
)

pytestmark = pytest.mark.asyncio


def samples(page: bytes, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {frozenset(s.labels.items()): s.value for family in text_string_to_metric_families(page.decode())
            for s in family.samples if s.name == name}


async def test_an_application_xid_alone_marks_nothing_and_is_told(emulator: ApiServerEmulator) -> None:
    nvml = fake_nvml()
    metrics, _ = agent_parts(NODE, export_usage=False)
    agent = make_agent(emulator, VirtualClock(), Opener(nvml), metrics=metrics)
    await agent.poll()
    nvml.queue_xid(2, 13, count=40)  # one faulting program: a burst of Xid 13 (one per SM)
    await agent.poll()
    assert ANNOTATION_UNHEALTHY_GPUS not in stored(emulator)["metadata"]["annotations"]
    assert condition(emulator)["status"] == "True"
    [event] = events(emulator)
    assert (event["reason"], event["type"]) == ("GPUNotice", "Normal")
    assert "GPU 2" in event["note"] and f"Xid 13: {XID_CATALOG[13].meaning}" in event["note"]
    xids = samples(metrics.render(), "gpufleet_agent_xid_errors_total")
    assert xids == {frozenset({("gpu", "2"), ("xid", "13")}): 40.0}
    await agent.writer.api.close()


async def test_a_gpu_off_the_bus_is_marked_with_the_catalog_s_meaning_and_counted(
        emulator: ApiServerEmulator) -> None:
    nvml = fake_nvml()
    metrics, _ = agent_parts(NODE, export_usage=False)
    clock = VirtualClock()
    agent = make_agent(emulator, clock, Opener(nvml), metrics=metrics)
    await agent.poll()
    nvml.queue_xid(5, 79, count=20)  # a storm of Xid 79, then the GPU is gone
    nvml.queue_xid(5, 9999)  # a number the catalog does not know
    nvml.lose_gpu(5)
    await clock.advance(1.0)
    await agent.poll()
    assert stored(emulator)["metadata"]["annotations"][ANNOTATION_UNHEALTHY_GPUS] == "5"
    gpu_healthy = condition(emulator)
    assert (gpu_healthy["status"], gpu_healthy["reason"]) == ("False", "GpuUnhealthy")
    assert nvml.gpu(5).uuid in gpu_healthy["message"]
    unhealthy = [e for e in events(emulator) if e["reason"] == "GPUUnhealthy"]
    assert len(unhealthy) == 1 and unhealthy[0]["type"] == "Warning"
    assert f"Xid 79: {XID_CATALOG[79].meaning}" in unhealthy[0]["note"]
    page = metrics.render()
    assert samples(page, "gpufleet_agent_xid_errors_total") == {
        frozenset({("gpu", "5"), ("xid", "79")}): 21.0, frozenset({("gpu", "5"), ("xid", "other")}): 1.0}
    states = samples(page, "gpufleet_agent_gpu_health_state")
    assert states[frozenset({("gpu", "5"), ("UUID", nvml.gpu(5).uuid), ("state", "Unhealthy")})] == 1.0
    assert samples(page, "gpufleet_agent_unhealthy_gpus") == {frozenset(): 1.0}
    await agent.writer.api.close()


async def test_ecc_counters_are_exported(emulator: ApiServerEmulator) -> None:
    nvml = fake_nvml()
    metrics, _ = agent_parts(NODE, export_usage=False)
    agent = make_agent(emulator, VirtualClock(), Opener(nvml), metrics=metrics)
    nvml.gpu(1).remapped_rows = (0, 1, 0, 1)
    nvml.gpu(4).ecc_dbe_volatile = 3
    await agent.poll()
    assert stored(emulator)["metadata"]["annotations"][ANNOTATION_UNHEALTHY_GPUS] == "1,4"
    page = metrics.render()
    assert samples(page, "gpufleet_agent_gpu_row_remap_failure")[frozenset({("gpu", "1")})] == 1.0
    assert samples(page, "gpufleet_agent_gpu_ecc_dbe_volatile")[frozenset({("gpu", "4")})] == 3.0
    assert samples(page, "gpufleet_agent_nvml_up") == {frozenset(): 1.0}
    await agent.writer.api.close()


async def test_mig_reconfiguration_refreshes_the_labels(emulator: ApiServerEmulator) -> None:
    nvml = fake_nvml()
    clock = VirtualClock()
    agent = make_agent(emulator, clock, Opener(nvml), discovery_s=30.0)
    await agent.poll()
    assert not [k for k in stored(emulator)["metadata"]["labels"] if k.startswith("nvidia.com/mig-")]
    nvml.set_mig(0, ["3g.40gb", "1g.10gb", "1g.10gb"])
    await clock.advance(30.0)
    await agent.poll()
    labels = stored(emulator)["metadata"]["labels"]
    assert (labels["nvidia.com/mig-3g.40gb.count"], labels["nvidia.com/mig-1g.10gb.count"]) == ("1", "2")
    nvml.set_mig(0, None)
    await clock.advance(30.0)
    await agent.poll()
    labels = stored(emulator)["metadata"]["labels"]
    assert not [k for k in labels if k.startswith("nvidia.com/mig-")]
    assert labels["team.example/owner"] == "infra"  # someone else's label kept
    await agent.writer.api.close()


def systemd(uid: str, container: str) -> str:
    return (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice/"
            f"cri-containerd-{container}.scope\n")


TRAIN_UID = "0f8e4c3a-9b1d-4e2f-a6c7-5d4b3a291807"
SERVE_UID = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"


def a_pod(name: str, namespace: str, uid: str, container: str, gpus: str | None,
          scheduler: str = SCHEDULER_NAME) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid,
                         "annotations": {ANNOTATION_GPU_INDEX: gpus} if gpus is not None else {}},
            "spec": {"nodeName": NODE, "schedulerName": scheduler, "containers": [{"name": "main"}]},
            "status": {"phase": "Running",
                       "containerStatuses": [{"name": "main", "containerID": f"containerd://{container}"}]}}


async def test_per_process_utilisation_reads_back_as_each_pod_s_usage(emulator: ApiServerEmulator,
                                                                      tmp_path: Path) -> None:
    """The /metrics page, read by the controller's telemetry (parse_exporter_text, pod_usage), gives
    each pod the use of its processes, and 0 on a GPU it was bound to but does not use."""
    tree = ProcTree(tmp_path / "proc")
    train_cid, serve_cid = f"{1:064x}", f"{2:064x}"
    tree.add(4242, systemd(TRAIN_UID, train_cid))
    tree.add(4343, systemd(SERVE_UID, serve_cid))
    pods = (a_pod("train-0", "ml", TRAIN_UID, train_cid, "0,1"),
            # another scheduler's pod: its annotation is no allocation the agent trusts
            a_pod("serve", "web", SERVE_UID, serve_cid, "2,3", scheduler="default-scheduler"))
    nvml = fake_nvml()
    nvml.gpu(0).utilisation = (85, 30)
    nvml.add_process(0, pid=4242, sm_util=80, memory_mib=20000, timestamp_us=1_000)
    nvml.add_process(2, pid=4343, sm_util=30, memory_mib=5000, timestamp_us=1_000)
    metrics, usage = agent_parts(NODE, str(tree.root))
    agent = make_agent(emulator, VirtualClock(), Opener(nvml), metrics=metrics, usage=usage, pods=lambda: pods)
    await agent.poll()
    readings = parse_exporter_text(metrics.render().decode(), "agent")
    got = pod_usage(readings, 0.0)
    uuids = [nvml.gpu(i).uuid for i in range(4)]
    train = got[PodKey("ml", "train-0")]
    assert train.gpus == tuple(sorted(uuids[:2]))  # GPU 1: allocated, idle, exported at 0
    assert train.gpu_util_percent == pytest.approx(40.0) and train.fb_used_mib == 20000
    serve = got[PodKey("web", "serve")]
    assert serve.gpus == (uuids[2],)  # its processes only: no allocation from another scheduler's pod
    whole = {r.gpu_id: r.gpu_util_percent for r in readings if r.pod is None}
    assert whole[uuids[0]] == 85
    await agent.writer.api.close()
