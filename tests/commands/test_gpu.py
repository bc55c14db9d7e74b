"""`gpufleet gpu uncordon` and `gpufleet gpu list` against the HTTP emulator; `gpufleet agent`'s bad input."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from click.testing import CliRunner, Result

from gpufleet.agent.health import ANNOTATION_GPU_HEALTH, ANNOTATION_GPU_UNCORDON, GpuHealth, HealthState, dump_health
from gpufleet.cli import main
from gpufleet.commands import cluster_tools
from gpufleet.domain import ANNOTATION_UNHEALTHY_GPUS
from gpufleet.kube import Kind, connect
from gpufleet.testing.emulator import ApiServerEmulator


@pytest_asyncio.fixture
async def emulator(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ApiServerEmulator]:
    async with ApiServerEmulator() as server:
        for name, notes in (("n1", {ANNOTATION_UNHEALTHY_GPUS: "3", ANNOTATION_GPU_UNCORDON: "1",
                                    ANNOTATION_GPU_HEALTH: dump_health([GpuHealth(
                                        3, "GPU-3", HealthState.UNHEALTHY, "Xid 79", since=0.0)])}),
                            ("n2", {})):
            server.store.put(Kind.NODE, {"metadata": {"name": name, "annotations": notes}, "spec": {}, "status": {}})
        monkeypatch.setattr(cluster_tools, "api_factory", lambda kubeconfig, context: connect(server=server.url_text))
        yield server


async def gpu(*args: str) -> Result:
    return await invoke(["gpu", *args])

async def invoke(args: list[str]) -> Result:
    """The CLI in a thread of its own, joined before returning (a default-executor thread left
    behind crashes the interpreter beside the device plugin tests' gRPC threads)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return await asyncio.get_running_loop().run_in_executor(pool, CliRunner().invoke, main, args)



@pytest.mark.parametrize("target", ["n1", "n1/", "n1/x", "/3", "N1/3", "n1/3,", "n1/-1", "n1/3/4"])
def test_a_malformed_target_is_one_line_and_exit_2(target: str) -> None:
    result = CliRunner().invoke(main, ["gpu", "uncordon", target])
    assert result.exit_code == 2
    assert [line for line in result.output.splitlines() if line.strip()] == [
        f'gpufleet gpu uncordon: NODE/INDEX: expected a node name and GPU indices such as "gpu-node-1/3" '
        f'or "gpu-node-1/1,3", got {target!r}']


@pytest.mark.asyncio
async def test_uncordon_merges_with_a_pending_request(emulator: ApiServerEmulator) -> None:
    result = await gpu("uncordon", "n1/3")
    assert result.exit_code == 0, result.output
    node = emulator.store.object(Kind.NODE, "", "n1")
    assert node is not None
    assert node["metadata"]["annotations"][ANNOTATION_GPU_UNCORDON] == "1,3"
    assert "will use GPU 3 again" in result.output


@pytest.mark.asyncio
async def test_uncordon_of_a_healthy_gpu_says_so(emulator: ApiServerEmulator) -> None:
    result = await gpu("uncordon", "n2/0,2")
    assert result.exit_code == 0, result.output
    assert "GPU 0,2 not marked unhealthy now" in result.output


@pytest.mark.asyncio
async def test_uncordon_retries_a_conflict(emulator: ApiServerEmulator) -> None:
    emulator.store.fail("patch", 409, times=1, kind=Kind.NODE)
    result = await gpu("uncordon", "n2/4")
    assert result.exit_code == 0, result.output
    assert [c.status for c in emulator.store.calls if c.op == "patch"] == [409, 200]


@pytest.mark.asyncio
async def test_uncordon_of_a_missing_node_is_exit_2(emulator: ApiServerEmulator) -> None:
    result = await gpu("uncordon", "nope/1")
    assert result.exit_code == 2
    assert result.output.strip() == "gpufleet gpu uncordon: node nope does not exist"


@pytest.mark.asyncio
async def test_list_shows_the_unhealthy_gpus_and_why(emulator: ApiServerEmulator) -> None:
    result = await gpu("list")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["NODE", "GPU", "UUID", "REASON"]
    assert lines[1].split() == ["n1", "3", "GPU-3", "Xid", "79"]
    assert len(lines) == 2
    assert (await gpu("list", "n2")).output.strip() == "no unhealthy GPUs on node n2"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "--node-name (or $NODE_NAME) must name this node"),
        (["--node-name", "n1", "--interval", "0"], "--interval"),
        (["--node-name", "n1", "--proc-root", "/no/such/dir"], "--proc-root: no such directory: /no/such/dir"),
        (["--node-name", "n1", "--kubeconfig", "/no/such/file"], "--kubeconfig: no such file: /no/such/file"),
    ],
)
def test_agent_bad_arguments_exit_2_without_a_traceback(args: list[str], needle: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    result = CliRunner().invoke(main, ["agent", *args])
    assert result.exit_code == 2
    assert needle in result.output
    assert "Traceback" not in result.output


@pytest.mark.asyncio
async def test_agent_dry_run_without_nvml_prints_unknown_and_stops_on_sigterm(emulator: ApiServerEmulator) -> None:
    import signal
    import sys

    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpufleet", "agent", "--node-name", "n2", "--server", emulator.url_text, "--dry-run",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/nonexistent"},
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
    process.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 0, err.decode()
    assert line.decode().startswith("patch node n2 status: ")
    assert '"status": "Unknown"' in line.decode() and "NvmlUnavailable" in line.decode()
    assert err.decode().count("cannot read the GPUs") == 1
    assert "Traceback" not in err.decode()
    assert emulator.store.count("patch") == emulator.store.count("patch_status") == 0


@pytest.mark.asyncio
async def test_agent_without_nvml_writes_unknown_serves_healthz_and_stops_on_sigterm(
        emulator: ApiServerEmulator) -> None:
    import signal
    import socket
    import sys

    import aiohttp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpufleet", "agent", "--node-name", "n2", "--server", emulator.url_text,
        "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/nonexistent"},
    )

    def condition() -> dict[str, Any] | None:
        node = emulator.store.object(Kind.NODE, "", "n2") or {}
        return next((c for c in (node.get("status") or {}).get("conditions") or [] if c["type"] == "GPUHealthy"), None)

    try:
        for _ in range(300):
            if condition() is not None:
                break
            await asyncio.sleep(0.1)
        assert (condition() or {}).get("status") == "Unknown"
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/healthz") as answer:
            assert answer.status == 200
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 0, err.decode()
    assert "Traceback" not in err.decode()
