"""`gpufleet controller`: bad input is one line and exit 2; the real command binds and stops on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main
from gpufleet.testing.emulator import ApiServerEmulator

from .controller_objects import bound_pods, small_cluster


def test_help_lists_the_options() -> None:
    result = CliRunner().invoke(main, ["controller", "--help"])
    assert result.exit_code == 0
    for option in ("--kubeconfig", "--namespace", "--lease-name", "--identity", "--min-interval", "--metrics-port",
                   "--leader-election-namespace", "--leader-election-id", "--health-port", "--annotate-via",
                   "--group-workloads", "--no-group-workloads"):
        assert option in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--kubeconfig", "/no/such/file"], "--kubeconfig: no such file: /no/such/file"),
        (["--min-interval", "-1"], "-1"),
        (["--metrics-port", "70000"], "70000"),
    ],
)
def test_bad_arguments_exit_2_without_a_traceback(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(main, ["controller", *args])
    assert result.exit_code == 2
    assert needle in result.output
    assert "Traceback" not in result.output


def test_an_unusable_kubeconfig_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text("clusters: []\ncontexts: []\ncurrent-context: nowhere\n")
    result = CliRunner().invoke(main, ["controller", "--kubeconfig", str(config)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [f"gpufleet controller: cannot use the cluster configuration: {config}: defines no clusters"]


@pytest.mark.asyncio
async def test_the_command_binds_pods_and_stops_on_sigterm() -> None:
    async with ApiServerEmulator() as emulator:
        small_cluster(emulator.store, pending=3)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpufleet", "controller", "--server", emulator.url_text, "--no-leader-elect",
            "--metrics-port", "0", "--min-interval", "0", "--log-level", "warning",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 30
            while len(bound_pods(emulator.store)) < 3:
                assert process.returncode is None, (await process.communicate())[1].decode()
                assert time.monotonic() < deadline, "not bound within 30 s"
                await asyncio.sleep(0.05)
            process.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(process.communicate(), 20)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert process.returncode == 0, err.decode()
    assert "Traceback" not in err.decode()
