from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.adapters.k8s_yaml import load_snapshot_file
from gpufleet.web.fleet import Fleet

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"


@pytest.fixture(scope="session")
def demo_fleet() -> Fleet:
    return Fleet.build(load_snapshot_file(DEMO))
