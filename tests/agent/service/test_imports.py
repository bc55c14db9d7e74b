"""The agent runs on every GPU node: its service must not carry the controller's heavy imports
(NumPy, the domain's models and conversion), which would double its memory (BENCHMARKS.md). pydantic
itself comes with the health rules' annotation model (``gpufleet.agent.health.persist``): measured in
the agent's footprint."""

from __future__ import annotations

import subprocess
import sys


def test_the_agent_service_imports_stay_lean() -> None:
    code = ("import sys, gpufleet.agent.service, gpufleet.agent.service.pods, gpufleet.agent.service.wiring, "
            "gpufleet.commands.agent; from gpufleet.kube import connect, serve_http; "
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy',) "
            "or m.startswith(('gpufleet.adapters', 'gpufleet.engine', 'gpufleet.kube.controller.convert', "
            "'gpufleet.kube.controller.informers', 'gpufleet.testing')))))")
    heavy = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert heavy == []
