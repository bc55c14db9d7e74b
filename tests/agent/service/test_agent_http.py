"""The real node agent (NVML reader over the fake NVML, the health rules, discovery) against the HTTP
Kubernetes emulator: what it writes on its Node, when, and how it survives conflicts, a missing NVML
and its own restart."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
from typing import Any

import pytest
from click.testing import CliRunner

from gpufleet.agent.gpus import GpuHealthReading, GpuReader
from gpufleet.agent.health import ANNOTATION_GPU_HEALTH, ANNOTATION_GPU_UNCORDON
from gpufleet.cli import main
from gpufleet.commands import cluster_tools
from gpufleet.domain import ANNOTATION_NVLINK_DOMAINS, ANNOTATION_UNHEALTHY_GPUS, BLOCKS_PER_GPU, LABEL_GPU_PRODUCT
from gpufleet.engine.cluster import ClusterState
from gpufleet.kube import Kind, connect
from gpufleet.kube.controller.convert import convert_object
from gpufleet.testing.emulator import ApiServerEmulator
from gpufleet.testing.fake_cluster import VirtualClock

from .agent_fixtures import (
    CLEAN_PERIOD,
    NODE,
    Opener,
    condition,
    events,
    fake_nvml,
    make_agent,
    stored,
)

pytestmark = pytest.mark.asyncio


def annotations(emulator: ApiServerEmulator) -> dict[str, str]:
    return dict(stored(emulator)["metadata"].get("annotations") or {})


def writes(emulator: ApiServerEmulator) -> int:
    store = emulator.store
    return store.count("patch", caller="gpufleet-agent") + store.count("patch_status", caller="gpufleet-agent")


async def test_first_poll_writes_discovery_health_and_condition_keeping_other_keys(
        emulator: ApiServerEmulator) -> None:
    agent = make_agent(emulator, VirtualClock(), Opener(fake_nvml()))
    await agent.poll()
    node = stored(emulator)
    labels, notes = node["metadata"]["labels"], node["metadata"]["annotations"]
    assert labels[LABEL_GPU_PRODUCT] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.memory"] == "81559"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert notes[ANNOTATION_NVLINK_DOMAINS] == "0-3;4-7"
    assert ANNOTATION_UNHEALTHY_GPUS not in notes
    assert ANNOTATION_GPU_HEALTH in notes
    assert labels["team.example/owner"] == "infra" and notes["node.alpha.kubernetes.io/ttl"] == "0"
    assert condition(emulator)["status"] == "True"
    assert condition(emulator, "Ready")["reason"] == "KubeletReady"  # the kubelet's condition kept
    assert events(emulator) == []  # healthy from the start: no change to report
    await agent.writer.api.close()


async def test_nothing_is_written_when_nothing_changed(emulator: ApiServerEmulator) -> None:
    clock = VirtualClock()
    agent = make_agent(emulator, clock, Opener(fake_nvml()))
    await agent.poll()
    before = writes(emulator)
    assert before == 2  # the metadata patch and the status patch
    for _ in range(30):
        await clock.advance(1.0)
        await agent.poll()
    assert writes(emulator) == before
    gets = emulator.store.count("get")  # GETs carry no fieldManager: the agent is the only client here
    assert 2 <= gets <= 1 + 30 // 10 + 1  # the Node read again every 10 s, not every poll
    await agent.writer.api.close()


async def test_a_bad_gpu_is_marked_with_an_event_and_comes_back_after_the_clean_period(
        emulator: ApiServerEmulator) -> None:
    clock = VirtualClock()
    nvml = fake_nvml()
    agent = make_agent(emulator, clock, Opener(nvml))
    await agent.poll()
    healthy_since = condition(emulator)["lastTransitionTime"]
    await clock.advance(1.0)
    nvml.queue_xid(3, 74)  # an NVLink error: reset the GPU; the GPU stays readable
    await agent.poll()
    assert annotations(emulator)[ANNOTATION_UNHEALTHY_GPUS] == "3"
    gpu_healthy = condition(emulator)
    assert (gpu_healthy["status"], gpu_healthy["reason"]) == ("False", "GpuUnhealthy")
    uuid = nvml.gpu(3).uuid
    assert "GPU 3" in gpu_healthy["message"] and uuid in gpu_healthy["message"]
    assert gpu_healthy["lastTransitionTime"] != healthy_since
    [event] = events(emulator)
    assert (event["reason"], event["type"], event["regarding"]["kind"]) == ("GPUUnhealthy", "Warning", "Node")
    assert "GPU 3" in event["note"] and uuid in event["note"] and "Xid 74: NVLink error" in event["note"]
    assert event["reportingController"] == "gpufleet.dev/agent"

    await clock.advance(CLEAN_PERIOD / 2)
    await agent.poll()
    assert annotations(emulator)[ANNOTATION_UNHEALTHY_GPUS] == "3"  # not clean long enough yet
    await clock.advance(CLEAN_PERIOD / 2 + 1)
    await agent.poll()
    assert ANNOTATION_UNHEALTHY_GPUS not in annotations(emulator)
    assert condition(emulator)["status"] == "True"
    assert [e["reason"] for e in events(emulator)] == ["GPUUnhealthy", "GPUHealthy"]
    await agent.writer.api.close()


async def test_a_gpu_off_the_bus_and_ecc_errors_are_unhealthy(emulator: ApiServerEmulator) -> None:
    clock = VirtualClock()
    nvml = fake_nvml()
    agent = make_agent(emulator, clock, Opener(nvml))
    await agent.poll()
    nvml.lose_gpu(1)
    nvml.gpu(6).ecc_dbe_volatile = 2  # a double-bit ECC error since the last poll
    await clock.advance(1.0)
    await agent.poll()
    assert annotations(emulator)[ANNOTATION_UNHEALTHY_GPUS] == "1,6"
    message = condition(emulator)["message"]
    assert "GPU has fallen off the bus" in message and "double-bit ECC errors rose from 0 to 2" in message
    notes = [e["note"] for e in events(emulator)]
    assert any("GPU 1" in n and "Xid 79: GPU has fallen off the bus" in n for n in notes)
    await agent.writer.api.close()


async def test_conflicts_are_retried_with_the_node_read_again(emulator: ApiServerEmulator) -> None:
    store = emulator.store
    store.fail("patch", 409, times=2, kind=Kind.NODE)
    agent = make_agent(emulator, VirtualClock(), Opener(fake_nvml()))
    await agent.poll()
    statuses = [c.status for c in store.calls if c.op == "patch" and c.kind is Kind.NODE]
    assert statuses == [409, 409, 200]
    assert stored(emulator)["metadata"]["labels"][LABEL_GPU_PRODUCT] == "NVIDIA-H100-80GB-HBM3"
    await agent.writer.api.close()


async def test_a_concurrent_writer_is_not_overwritten(emulator: ApiServerEmulator) -> None:
    """A label someone writes between the agent's read and its patch survives (the patch carries
    the resourceVersion it was computed from: the API server refuses it, the agent reads again)."""
    agent = make_agent(emulator, VirtualClock(), Opener(fake_nvml()))
    await agent.writer.read()
    emulator.store._patch(Kind.NODE, "", NODE, {"metadata": {"labels": {"ops.example/drain": "soon"}}})
    await agent.poll()
    labels = stored(emulator)["metadata"]["labels"]
    assert labels["ops.example/drain"] == "soon" and labels[LABEL_GPU_PRODUCT]
    await agent.writer.api.close()


async def test_uncordon_command_brings_the_gpu_back_and_is_consumed(emulator: ApiServerEmulator,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    clock = VirtualClock()
    nvml = fake_nvml()
    agent = make_agent(emulator, clock, Opener(nvml))
    await agent.poll()
    nvml.queue_xid(3, 48)
    await agent.poll()
    assert annotations(emulator)[ANNOTATION_UNHEALTHY_GPUS] == "3"

    monkeypatch.setattr(cluster_tools, "api_factory", lambda kubeconfig, context: connect(server=emulator.url_text))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # joined: no thread left beside gRPC's
        result = await asyncio.get_running_loop().run_in_executor(
            pool, CliRunner().invoke, main, ["gpu", "uncordon", f"{NODE}/3"])
    assert result.exit_code == 0, result.output
    assert f"node {NODE}: {ANNOTATION_GPU_UNCORDON}=3" in result.output
    assert annotations(emulator)[ANNOTATION_GPU_UNCORDON] == "3"

    await clock.advance(10.0)  # the agent reads its Node again every 10 s
    await agent.poll()
    notes = annotations(emulator)
    assert ANNOTATION_GPU_UNCORDON not in notes and ANNOTATION_UNHEALTHY_GPUS not in notes
    assert condition(emulator)["status"] == "True"
    assert [e["reason"] for e in events(emulator)] == ["GPUUnhealthy", "GPUHealthy"]
    assert "uncordoned" in events(emulator)[-1]["note"]
    await agent.writer.api.close()


async def test_missing_nvml_says_unknown_keeps_running_and_recovers(emulator: ApiServerEmulator,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    emulator.store._patch(Kind.NODE, "", NODE, {"metadata": {"annotations": {ANNOTATION_UNHEALTHY_GPUS: "5"}}})
    clock = VirtualClock()
    nvml = fake_nvml()
    nvml.init_error = 12  # NVML_ERROR_LIBRARY_NOT_FOUND
    attempts = 0
    opener = Opener(nvml)

    def open_reader() -> GpuReader:
        nonlocal attempts
        attempts += 1
        return opener()

    agent = make_agent(emulator, clock, open_reader)
    with caplog.at_level(logging.ERROR, logger="gpufleet.agent.service.loop"):
        for _ in range(20):
            await agent.poll()
            await clock.advance(1.0)
    gpu_healthy = condition(emulator)
    assert (gpu_healthy["status"], gpu_healthy["reason"]) == ("Unknown", "NvmlUnavailable")
    assert "NVML is not available" in gpu_healthy["message"]
    assert len([r for r in caplog.records if "cannot read the GPUs" in r.getMessage()]) == 1  # one line
    assert 2 <= attempts < 20  # retried, backing off
    assert annotations(emulator)[ANNOTATION_UNHEALTHY_GPUS] == "5"  # what was known stays known

    nvml.init_error = None
    await clock.advance(300.0)  # past the longest backoff
    await agent.poll()
    assert condition(emulator)["status"] == "True"
    assert ANNOTATION_UNHEALTHY_GPUS not in annotations(emulator)
    await agent.writer.api.close()


async def test_a_library_that_fails_mid_run_is_reopened(emulator: ApiServerEmulator) -> None:
    clock = VirtualClock()
    opener = Opener(fake_nvml())

    def broken() -> tuple[GpuHealthReading, ...]:
        raise RuntimeError("NVML_ERROR_UNKNOWN")

    agent = make_agent(emulator, clock, opener)
    await agent.poll()
    first = opener.reader
    assert first is not None
    first.health = broken  # type: ignore[method-assign]
    await clock.advance(1.0)
    await agent.poll()
    assert condition(emulator)["status"] == "Unknown" and "RuntimeError" in condition(emulator)["message"]
    assert agent.reader is None  # closed, to be opened again
    await clock.advance(2.0)
    await agent.poll()
    assert condition(emulator)["status"] == "True"
    await agent.writer.api.close()


async def test_a_restarted_agent_keeps_the_history(emulator: ApiServerEmulator) -> None:
    clock = VirtualClock()
    nvml = fake_nvml()
    agent = make_agent(emulator, clock, Opener(nvml))
    await agent.poll()
    nvml.queue_xid(2, 95)  # an uncontained ECC error: reset the GPU
    await agent.poll()
    await agent.writer.api.close()

    await clock.advance(5.0)
    again = make_agent(emulator, clock, Opener(fake_nvml()))  # the counters and Xid queue start empty
    await again.poll()
    assert annotations(emulator)[ANNOTATION_UNHEALTHY_GPUS] == "2"
    assert [e["reason"] for e in events(emulator)] == ["GPUUnhealthy"]  # no flap on restart
    await clock.advance(CLEAN_PERIOD + 1)
    await again.poll()
    assert ANNOTATION_UNHEALTHY_GPUS not in annotations(emulator)
    await again.writer.api.close()


async def test_the_engine_avoids_the_gpu_the_agent_marked(emulator: ApiServerEmulator) -> None:
    nvml = fake_nvml()
    agent = make_agent(emulator, VirtualClock(), Opener(nvml))
    await agent.poll()
    nvml.lose_gpu(3)
    await agent.poll()
    node = convert_object(Kind.NODE, stored(emulator))  # as the controller's loader reads it
    assert node.unhealthy_gpus == frozenset({3})
    state = ClusterState([node], [])
    assert state.gpu_free[0, 3] == -1
    assert [int(state.gpu_free[0, g]) for g in (0, 1, 2, 4, 5, 6, 7)] == [BLOCKS_PER_GPU] * 7
    await agent.writer.api.close()


async def test_a_dry_run_prints_and_writes_nothing(emulator: ApiServerEmulator) -> None:
    shown: list[tuple[str, dict[str, Any]]] = []
    clock = VirtualClock()
    agent = make_agent(emulator, clock, Opener(fake_nvml()), echo=lambda what, body: shown.append((what, body)))
    await agent.poll()
    await clock.advance(1.0)
    await agent.poll()
    assert writes(emulator) == 0
    assert [what for what, _ in shown] == [f"patch node {NODE}", f"patch node {NODE} status"]  # once each
    await agent.writer.api.close()


async def test_every_call_the_agent_makes_is_in_its_rbac_rules(emulator: ApiServerEmulator) -> None:
    from gpufleet.kube.install.rbac import AGENT_RULES, allowed

    clock = VirtualClock()
    nvml = fake_nvml()
    agent = make_agent(emulator, clock, Opener(nvml))
    await agent.poll()
    emulator.store.fail("patch", 409, times=1, kind=Kind.NODE)
    nvml.queue_xid(0, 62)
    await agent.poll()
    await clock.advance(CLEAN_PERIOD + 11)
    await agent.poll()
    calls = {(c.op, c.kind) for c in emulator.store.calls}  # the agent is the emulator's only client here
    assert {("get", Kind.NODE), ("patch", Kind.NODE), ("patch_status", Kind.NODE), ("create", Kind.EVENT)} <= calls
    assert [call for call in calls if not allowed(*call, rules=AGENT_RULES)] == []
    assert not allowed("patch", Kind.POD, rules=AGENT_RULES) and allowed("watch", Kind.POD, rules=AGENT_RULES)
    await agent.writer.api.close()


async def test_a_failing_poll_is_logged_and_the_loop_goes_on(emulator: ApiServerEmulator,
                                                             caplog: pytest.LogCaptureFixture,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from gpufleet.agent import discovery

    clock = VirtualClock()
    agent = make_agent(emulator, clock, Opener(fake_nvml()))
    calls = 0
    describe = discovery.node_gpu_metadata

    def describe_badly_once(gpus: Any, **options: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyError("a bug")
        return describe(gpus, **options)

    monkeypatch.setattr(discovery, "node_gpu_metadata", describe_badly_once)
    agent.settings = dataclasses.replace(agent.settings, discovery_s=1.0)
    task = asyncio.create_task(agent.run())
    for _ in range(1000):  # breaks as soon as it holds; many turns only on a loaded machine
        await asyncio.sleep(0.01)  # the HTTP calls take real time; the polls' sleeps are virtual
        await clock.advance(1.0)
        if agent.polls >= 3 and LABEL_GPU_PRODUCT in stored(emulator)["metadata"].get("labels", {}):
            break
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert "the poll failed" in caplog.text
    assert stored(emulator)["metadata"]["labels"][LABEL_GPU_PRODUCT] == "NVIDIA-H100-80GB-HBM3"
    await agent.writer.api.close()
