"""The agent runs on every GPU node: its service must not carry the controller's heavy imports
(NumPy, pydantic's models, the domain conversion), which would double its memory (BENCHMARKS.md)."""

from __future__ import annotations

import subprocess
import sys


def test_the_agent_service_imports_stay_lean() -> None:
    code = ("import sys, gpufleet.agent.service, gpufleet.agent.service.pods, gpufleet.agent.service.wiring, "
            "gpufleet.commands.agent, gpufleet.agent.gpus.nvml; from gpufleet.kube import connect, serve_http; "
            "import gpufleet.agent.health as h; h.load_health(h.dump_health([])); "
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'pydantic') "
            "or m.startswith(('gpufleet.adapters', 'gpufleet.engine', 'gpufleet.kube.controller.convert', "
            "'gpufleet.kube.controller.informers', 'gpufleet.testing')))))")
    heavy = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert heavy == []
