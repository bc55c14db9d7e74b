"""gpufleet.telemetry's face: every name resolves; importing it does not load aiohttp."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


def test_every_name_of_the_face_resolves() -> None:
    module = importlib.import_module("gpufleet.telemetry")
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError):
        _ = module.no_such_name


def test_the_pure_parts_do_not_load_aiohttp() -> None:
    code = ("import sys, gpufleet.telemetry as t; t.UsageAccumulator; t.IdleTracker; t.TelemetryPoller; "
            "t.parse_exporter_text; t.decode_query_answer; print('aiohttp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
