"""The controller does not carry out consolidation moves yet (docs/semantics.md, "Consolidation"):
it schedules with the option dropped, and says so among the snapshot's problems."""

from __future__ import annotations

from gpufleet.domain import Consolidation, SchedulerConfig
from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.convert import build_snapshot


def test_consolidation_is_dropped_and_reported() -> None:
    config = SchedulerConfig(consolidation=Consolidation(True, 8, 1))
    view = build_snapshot({Kind.SCHEDULER_CONFIG: [config]}, now=100.0)
    assert view.snapshot.config.consolidation is None
    assert view.snapshot.config.now == 100.0
    assert any("consolidation" in p for p in view.problems)


def test_without_consolidation_nothing_is_reported() -> None:
    view = build_snapshot({Kind.SCHEDULER_CONFIG: [SchedulerConfig()]}, now=100.0)
    assert not any("consolidation" in p for p in view.problems)
