"""gpufleet.agent.usage's face: every name resolves; importing it loads neither NVML nor aiohttp."""

from __future__ import annotations

import importlib
import subprocess
import sys


def test_every_name_of_the_face_resolves() -> None:
    module = importlib.import_module("gpufleet.agent.usage")
    for name in module.__all__:
        assert getattr(module, name) is not None, name


def test_the_face_loads_no_nvml_nor_aiohttp() -> None:
    code = ("import sys, gpufleet.agent.usage; "
            "print(sorted(m for m in ('pynvml', 'aiohttp', 'grpc') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
