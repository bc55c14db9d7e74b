"""The agent's page read back by gpufleet's telemetry (the parser the controller's scrape uses, and the
scrape itself over HTTP): the per-pod usage it derives is what was fed, and the labels are
dcgm-exporter's (the recorded pages of tests/telemetry/data)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp.web
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.agent.gpus import GpuInfo, GpuUtilisation, MigInstance, ProcessUtilisation
from gpufleet.agent.usage import (
    AGENT_GPU_MEMORY_TOTAL,
    AGENT_GPU_MEMORY_USED,
    AGENT_GPU_PROCESSES,
    AGENT_GPU_UTILISATION,
    AGENT_PROC_READS,
    AGENT_UPDATE_TIME,
    AGENT_UPDATES,
    HostProcReader,
    PodEntry,
    UsageExporter,
)
from gpufleet.telemetry import FB_USED, GPU_UTIL, ExporterScrape, PodKey, parse_exporter_text, pod_usage
from gpufleet.testing.fake_gpus import fake_gpus

from .proctree import ProcTree

TELEMETRY_DATA = Path(__file__).parents[2] / "telemetry" / "data"
NODE = "gpu-node-017"
DRIVER = "550.90.07"
AT = 1_795_521_600.0

TRAIN_UID = "0c9e2f4a-6b1d-48e3-a7f5-3d2b9c1e8a60"
NOTEBOOK_UID = "7d3a1f5c-2e4b-4c6d-8e9f-0a1b2c3d4e5f"
SERVE_UID = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
TRAIN = PodKey("ml-research", "llama-finetune-0")
NOTEBOOK = PodKey("team-vision", "notebook-ana-7c9f4")
SERVE = PodKey("serving", "embed-api-5d8b7c6f9-xk2lp")


def cid(n: int) -> str:
    return f"{n:064x}"


def systemd(uid: str, container: str) -> str:
    return (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice/"
            f"cri-containerd-{container}.scope\n")


PODS = {
    TRAIN_UID: PodEntry("ml-research", "llama-finetune-0", {cid(1): "trainer", cid(2): "logger"}),
    NOTEBOOK_UID: PodEntry("team-vision", "notebook-ana-7c9f4", {cid(3): "jupyter"}),
    SERVE_UID: PodEntry("serving", "embed-api-5d8b7c6f9-xk2lp", {cid(4): "server"}),
}
GPUS = fake_gpus(8)


def gpu_util(index: int, percent: float, used: int) -> GpuUtilisation:
    return GpuUtilisation(index=index, uuid=GPUS[index].uuid, gpu_util_percent=percent, memory_used_mib=used,
                          memory_total_mib=GPUS[index].memory_mib)


def proc(index: int, pid: int, sm: float, mib: int) -> ProcessUtilisation:
    return ProcessUtilisation(index=index, uuid=GPUS[index].uuid, pid=pid, sm_util_percent=sm, memory_used_mib=mib)


@pytest.fixture
def tree(tmp_path: Path) -> ProcTree:
    tree = ProcTree(tmp_path / "host" / "proc")
    for pid in range(100, 104):  # the trainer's ranks 0-3
        tree.add(pid, systemd(TRAIN_UID, cid(1)))
    tree.add(104, systemd(TRAIN_UID, cid(2)))  # its logger's helper on GPU 0
    tree.add(200, systemd(NOTEBOOK_UID, cid(3)))
    tree.add(300, systemd(SERVE_UID, cid(4)))
    tree.add(301, systemd(SERVE_UID, cid(4)))
    tree.add(900, "0::/system.slice/xorg.service\n")  # a host process on GPU 7
    tree.add(901, systemd("99999999-9999-4999-8999-999999999999", cid(9)))  # a pod the index lacks
    return tree


UTIL = [gpu_util(0, 97, 71234), gpu_util(1, 95, 70998), gpu_util(2, 98, 71402), gpu_util(3, 96, 71176),
        gpu_util(4, 0, 1843), gpu_util(5, 41, 22517), gpu_util(6, 38, 22490), gpu_util(7, 12, 900)]
PROCESSES = [proc(0, 100, 90, 70000), proc(0, 104, 5, 1000), proc(1, 101, 95, 70998), proc(2, 102, 98, 71402),
             proc(3, 103, 96, 71176), proc(4, 200, 0, 1843), proc(5, 300, 41, 22517), proc(6, 301, 38, 22490),
             proc(7, 900, 10, 600), proc(7, 901, 2, 300)]


def exporter(tree: ProcTree, **options: bool) -> UsageExporter:
    agent = UsageExporter(NODE, HostProcReader(tree.root), driver_version=DRIVER, **options)  # type: ignore[arg-type]
    agent.update(UTIL, PROCESSES, PODS, now=AT, devices=GPUS)
    return agent


def test_the_telemetry_reader_derives_the_pods_usage_that_was_fed(tree: ProcTree) -> None:
    readings = parse_exporter_text(exporter(tree).render().decode(), "agent")
    usage = pod_usage(readings, AT)
    assert set(usage) == {TRAIN, NOTEBOOK, SERVE}  # the host process and the unknown pod's: no pod
    train = usage[TRAIN]
    assert train.gpus == tuple(sorted(g.uuid for g in GPUS[:4]))
    assert train.gpu_util_percent == pytest.approx((95 + 95 + 98 + 96) / 4)  # GPU 0: 90 + 5
    assert train.fb_used_mib == 71000 + 70998 + 71402 + 71176
    assert train.pod_uid == TRAIN_UID and train.hostnames == (NODE,)
    assert train.sm_active is None  # NVML has no SM activity: the agent does not make one up
    assert (usage[NOTEBOOK].gpu_util_percent, usage[NOTEBOOK].fb_used_mib) == (0, 1843)
    assert usage[SERVE].gpu_util_percent == pytest.approx(39.5)
    assert usage[SERVE].fb_used_mib == 22517 + 22490
    whole = {r.gpu_id: r for r in readings if r.pod is None}
    assert {uuid: (r.gpu_util_percent, r.fb_used_mib) for uuid, r in whole.items()} == {
        g.uuid: (g.gpu_util_percent, g.memory_used_mib) for g in UTIL}
    assert all(r.model == "NVIDIA H100 80GB HBM3" for r in readings)


def test_after_a_failed_read_no_stale_figure_is_served(tree: ProcTree) -> None:
    agent = exporter(tree)
    agent.clear(AT + 1)
    text = agent.render().decode()
    assert parse_exporter_text(text, "agent") == []
    assert samples(text, AGENT_UPDATE_TIME) == {frozenset(): AT + 1}
    assert samples(text, AGENT_UPDATES + "_total") == {frozenset(): 1}


def test_a_pod_share_is_capped_at_the_whole_gpu(tree: ProcTree) -> None:
    agent = exporter(tree)
    agent.update(UTIL[:1], [proc(0, 100, 80, 10), proc(0, 104, 70, 10)], PODS, now=AT + 1)
    [share] = agent.sample.shares
    assert (share.util_percent, share.fb_used_mib, share.container) == (100.0, 20, "logger,trainer")


def test_a_pod_allocated_a_gpu_without_a_process_on_it_is_exported_at_zero(tree: ProcTree) -> None:
    pods = {**PODS, NOTEBOOK_UID: PodEntry("team-vision", "notebook-ana-7c9f4", {cid(3): "jupyter"},
                                           gpus=frozenset({GPUS[4].uuid, "GPU-not-on-this-node"}))}
    agent = UsageExporter(NODE, HostProcReader(tree.root))
    agent.update(UTIL, [p for p in PROCESSES if p.pid != 200], pods, now=AT, devices=GPUS)
    usage = pod_usage(parse_exporter_text(agent.render().decode(), "agent"), AT)
    notebook = usage[NOTEBOOK]
    assert (notebook.gpus, notebook.gpu_util_percent, notebook.fb_used_mib) == ((GPUS[4].uuid,), 0, 0)


def label_sets(text: str) -> set[frozenset[str]]:
    return {frozenset(sample.labels) for family in text_string_to_metric_families(text)
            if family.name in (GPU_UTIL, FB_USED) for sample in family.samples}


def test_the_labels_are_dcgm_exporter_s(tree: ProcTree) -> None:
    dcgm = label_sets((TELEMETRY_DATA / "dcgm-exporter-node.txt").read_text())
    assert len(dcgm) == 2  # a GPU a pod holds, and a GPU none holds
    assert label_sets(exporter(tree, pod_uid_label=False).render().decode()) == dcgm


def test_with_the_pod_uid_the_labels_are_those_of_dcgm_exporter_with_pod_uids(tree: ProcTree) -> None:
    newest = label_sets((TELEMETRY_DATA / "dcgm-exporter-node-uid.txt").read_text())  # GPUs pods hold only
    renamed = {frozenset("Hostname" if name == "hostname" else name for name in labels) for labels in newest}
    agent = label_sets(exporter(tree).render().decode())
    assert {labels for labels in agent if "pod" in labels} == renamed
    assert {labels for labels in agent if "pod" not in labels} == {
        labels for labels in label_sets((TELEMETRY_DATA / "dcgm-exporter-node.txt").read_text()) if "pod" not in labels}


def test_mig_instances_carry_dcgm_exporter_s_instance_labels(tree: ProcTree) -> None:
    mig = MigInstance(gpu_instance_id=3, compute_instance_id=0, profile="1g.10gb", memory_mib=9856,
                      uuid="MIG-11111111-2222-4333-8444-555555555555")
    devices = (GpuInfo(index=0, uuid=GPUS[0].uuid, product="NVIDIA A100-SXM4-80GB", memory_mib=81920,
                       mig_enabled=True, healthy=True, minor=0, mig_instances=(mig,)),)
    agent = UsageExporter(NODE, HostProcReader(tree.root))
    process = ProcessUtilisation(index=0, uuid=mig.uuid, pid=200, sm_util_percent=0, memory_used_mib=4000)
    agent.update(UTIL[:1], [process], PODS, now=AT, devices=devices)
    text = agent.render().decode()
    assert 'GPU_I_ID="3"' in text and 'GPU_I_PROFILE="1g.10gb"' in text
    usage = pod_usage(parse_exporter_text(text, "agent"), AT)
    assert usage[NOTEBOOK].gpus == (f"{GPUS[0].uuid}/gi3",) and usage[NOTEBOOK].fb_used_mib == 4000


def samples(text: str, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {frozenset(s.labels.items()): s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name}


def test_the_agent_s_own_families(tree: ProcTree) -> None:
    agent = exporter(tree)
    agent.update(UTIL, PROCESSES, PODS, now=AT + 1)
    text = agent.render().decode()
    gpu7 = {("gpu", "7"), ("UUID", GPUS[7].uuid)}
    assert samples(text, AGENT_GPU_UTILISATION)[frozenset(gpu7)] == pytest.approx(0.12)
    assert samples(text, AGENT_GPU_MEMORY_USED)[frozenset(gpu7)] == 900 * 1024 * 1024
    assert samples(text, AGENT_GPU_MEMORY_TOTAL)[frozenset(gpu7)] == GPUS[7].memory_mib * 1024 * 1024
    processes = samples(text, AGENT_GPU_PROCESSES)
    assert processes[frozenset(gpu7 | {("attribution", "host")})] == 1
    assert processes[frozenset(gpu7 | {("attribution", "unknown_pod")})] == 1
    assert processes[frozenset({("gpu", "0"), ("UUID", GPUS[0].uuid), ("attribution", "pod")})] == 2
    assert sum(processes.values()) == len(PROCESSES)
    assert samples(text, AGENT_UPDATES + "_total") == {frozenset(): 2}
    assert samples(text, AGENT_UPDATE_TIME) == {frozenset(): AT + 1}
    assert samples(text, AGENT_PROC_READS + "_total") == {frozenset(): 10}  # each process once
    assert "pid" not in text


@pytest_asyncio.fixture
async def agent_url(tree: ProcTree) -> AsyncIterator[str]:
    agent = exporter(tree)

    async def metrics(request: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.Response(body=agent.render(), content_type="text/plain")

    app = aiohttp.web.Application()
    app.router.add_get("/metrics", metrics)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("/metrics"))
    finally:
        await server.close()


@pytest.mark.asyncio
async def test_the_controller_s_scrape_reads_the_agent_like_a_dcgm_exporter(agent_url: str) -> None:
    scrape = ExporterScrape([agent_url], now=lambda: AT)
    try:
        page = await scrape.read()
    finally:
        await scrape.close()
    assert page.failures == () and page.gpus_seen == 8
    assert set(page.pods) == {TRAIN, NOTEBOOK, SERVE}
    assert page.pods[SERVE].fb_used_mib == 22517 + 22490
