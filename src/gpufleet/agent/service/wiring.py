"""The one place that picks the agent's discovery, health rules and usage export.

TO BE REPLACED when ``gpufleet.agent.discovery``, ``gpufleet.agent.health`` and
``gpufleet.agent.usage`` land: return theirs here (adapted to :mod:`.ports`); the loop, the command
and the tests of the service take whatever this gives.
"""

from __future__ import annotations

from typing import Any

from gpufleet.agent.service.ports import Describe, HealthRules, UsageSink
from gpufleet.agent.service.standins import BasicHealthRules, HealthPolicy, basic_describe

__all__ = ["agent_parts"]


def agent_parts(policy: HealthPolicy,
                proc_root: str = "/proc") -> tuple[HealthRules[Any], Describe, UsageSink | None]:
    """The rules under ``policy``, discovery, and the usage export (which reads ``proc_root``); None
    while there is none (then the agent watches no pods and ``/metrics`` is empty)."""
    return BasicHealthRules(policy), basic_describe, None
