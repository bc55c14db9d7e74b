"""Every command that reads a kubeconfig: a malformed one is one line naming the file and what is
wrong, exit 2, never a traceback (kube.client.lightkube_api's connect checks the file)."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpufleet.cli import main

NOT_YAML = "apiVersion: v1\nclusters: [\n  - {name: x\n"
NO_CLUSTERS = "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n"
MISSING_CLUSTER = """\
apiVersion: v1
kind: Config
clusters:
- name: real
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: abc}
contexts:
- name: c
  context: {cluster: ghost, user: u}
current-context: c
"""

CONFIGS = [
    pytest.param(NOT_YAML, "not YAML at line 3, column 3: expected the node content, but found '-'", id="not-yaml"),
    pytest.param(NO_CLUSTERS, "defines no clusters", id="no-clusters"),
    pytest.param(MISSING_CLUSTER, "context c names cluster ghost, which the file does not define",
                 id="missing-cluster"),
]

# command line (before --kubeconfig), and what the command writes before the file's name
COMMANDS = [
    pytest.param(["controller"], "cannot use the cluster configuration: ", id="controller"),
    pytest.param(["snapshot"], "", id="snapshot"),
    pytest.param(["explain", "ml/x"], "", id="explain"),
    pytest.param(["webhook", "--insecure-http", "--tenancy"], "", id="webhook"),
    pytest.param(["device-plugin", "--node", "n1"], "cannot use the cluster configuration: ", id="device-plugin"),
]


@pytest.fixture(autouse=True)
def _no_gpus_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device plugin opens NVML before it reads the kubeconfig: a reader that holds no GPU."""
    monkeypatch.setattr("gpufleet.agent.gpus.nvml.open_nvml", lambda: types.SimpleNamespace(close=lambda: None))


def _invoke(args: list[str], kubeconfig: Path | None, tmp_path: Path, env: dict[str, str]) -> tuple[int, list[str]]:
    if args[0] == "device-plugin":
        args = [*args, "--kubelet-dir", str(tmp_path)]
    if kubeconfig is not None:
        args = [*args, "--kubeconfig", str(kubeconfig)]
    result = CliRunner().invoke(main, args, env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result.exit_code, result.stderr.splitlines()


@pytest.mark.parametrize(("content", "message"), CONFIGS)
@pytest.mark.parametrize(("args", "prefix"), COMMANDS)
def test_a_malformed_kubeconfig_is_one_line_exit_2(tmp_path: Path, args: list[str], prefix: str, content: str,
                                                   message: str) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(content)
    code, lines = _invoke(args, kubeconfig, tmp_path, {})
    assert (code, lines) == (2, [f"gpufleet {args[0]}: {prefix}{kubeconfig}: {message}"])


@pytest.mark.parametrize(("args", "prefix"), COMMANDS)
def test_a_malformed_kubeconfig_named_by_the_environment_too(tmp_path: Path, args: list[str], prefix: str) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(NOT_YAML)
    code, lines = _invoke(args, None, tmp_path, {"KUBECONFIG": str(kubeconfig)})
    assert (code, lines) == (2, [f"gpufleet {args[0]}: {prefix}{kubeconfig}: not YAML at line 3, column 3: "
                                 "expected the node content, but found '-'"])
