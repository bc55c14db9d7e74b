"""``gpufleet device-plugin``: its own checks, and a node without NVML, each as one line and an exit status."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main


def run(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["device-plugin", *args])
    assert isinstance(result.exception, SystemExit), result.output
    assert result.stdout == "" and "Traceback" not in result.output
    assert len(result.stderr.splitlines()) == 1, result.stderr
    return result.exit_code, result.stderr.strip()


def test_a_missing_kubelet_directory_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    assert run(["--node", "n1", "--kubelet-dir", str(missing)]) == (
        2, f"gpufleet device-plugin: --kubelet-dir: no such directory: {missing} (is this a node with a kubelet?)")


def test_a_relative_mps_host_dir_is_a_usage_error(tmp_path: Path) -> None:
    assert run(["--node", "n1", "--kubelet-dir", str(tmp_path), "--mps-host-dir", "mps"]) == (
        2, "gpufleet device-plugin: --mps-host-dir must be an absolute path, got 'mps'")


def test_an_empty_node_name_is_a_usage_error(tmp_path: Path) -> None:
    assert run(["--node", " ", "--kubelet-dir", str(tmp_path)]) == (2, "gpufleet device-plugin: --node must not be empty")


def test_without_pynvml_it_says_which_extra_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert run(["--node", "n1", "--kubelet-dir", str(tmp_path)]) == (
        1, "gpufleet device-plugin: NVML is not available: the Python module pynvml is missing "
           "(install gpufleet with the agent extra: pip install 'gpufleet[agent]')")


def test_without_a_driver_it_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class NVMLError(Exception):
        pass

    def init() -> None:
        raise NVMLError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", types.SimpleNamespace(NVMLError=NVMLError, nvmlInit=init))
    assert run(["--node", "n1", "--kubelet-dir", str(tmp_path)]) == (
        1, "gpufleet device-plugin: NVML is not available: NVML Shared Library Not Found "
           "(is the NVIDIA driver installed on this node?)")
