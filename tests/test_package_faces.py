"""The packages' public faces: every name they offer resolves, and ``gpufleet replay`` stays cheap."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


@pytest.mark.parametrize("package", ["gpufleet.adapters", "gpufleet.domain", "gpufleet.kube", "gpufleet.sim",
                                     "gpufleet.testing", "gpufleet.agent.gpus", "gpufleet.agent.deviceplugin",
                                     "gpufleet.agent.health"])
def test_every_name_of_a_face_resolves(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"
    with pytest.raises(AttributeError):
        _ = module.no_such_name


def test_replay_does_not_import_the_heavy_clients() -> None:
    """The faces import lazily: the replay path must not pay for aiohttp, prometheus-client or matplotlib
    (lightkube it loads anyway, for its quantity parser in ``adapters.quantity``)."""
    code = ("import sys, gpufleet.cli, gpufleet.adapters, gpufleet.kube, gpufleet.sim; "
            "print(sorted(m for m in ('aiohttp', 'matplotlib', 'prometheus_client', 'kmock') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_kubectl_plugin_entry_point_runs_the_same_cli() -> None:
    """``kubectl gpufleet explain ...`` runs ``kubectl-gpufleet explain ...`` from the PATH: the same CLI."""
    from importlib.metadata import entry_points
    from pathlib import Path

    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts") if "gpufleet" in ep.name}
    assert scripts == {"gpufleet": "gpufleet.cli:main", "kubectl-gpufleet": "gpufleet.cli:main"}
    plugin = Path(sys.executable).parent / "kubectl-gpufleet"
    out = subprocess.run([str(plugin), "--help"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("Usage: kubectl-gpufleet [OPTIONS] COMMAND [ARGS]...")
    assert "explain" in out
