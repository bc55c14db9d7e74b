"""The controller's own log lines: cycles, bindings and evictions at info (extra fields for JSON logs)."""

from __future__ import annotations

import logging

import pytest

from gpufleet.testing.fake_cluster import FakeCluster

from .controller_objects import informing, make_controller, small_cluster
from .test_controller import _reclaim_cluster

LOOP = "gpufleet.kube.controller.loop"


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """(level, message) of the loop's records, a cycle line without its duration."""
    return [(r.levelname, r.getMessage().rsplit(" (", 1)[0] if r.getMessage().startswith("cycle ") else r.getMessage())
            for r in caplog.records if r.name == LOOP]


@pytest.mark.asyncio
async def test_binding_lines_and_an_idle_cycle_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    cluster = FakeCluster()
    small_cluster(cluster, nodes=2, pending=2)
    controller = make_controller(cluster)
    caplog.set_level(logging.DEBUG, logger=LOOP)
    async with informing(controller):
        await controller.cycle()
        first = _lines(caplog)
        records = list(caplog.records)
        caplog.clear()
        await controller.cycle()  # nothing left to do: its line is debug
        idle = _lines(caplog)
    assert first == [
        ("INFO", "bound pod ml/p0 to node n0 (GPUs 0)"),
        ("INFO", "bound pod ml/p1 to node n0 (GPUs 1)"),
        ("INFO", "cycle 1: 2 bound, 0 failed, 0 evicted, 0 pending, 0 gangs waiting"),
    ]
    assert idle == [("DEBUG", "cycle 2: 0 bound, 0 failed, 0 evicted, 0 pending, 0 gangs waiting")]
    bound = next(r for r in records if r.name == LOOP and r.getMessage().startswith("bound"))
    assert (bound.pod, bound.node, bound.gpus) == ("ml/p0", "n0", [0])  # type: ignore[attr-defined]
    cycle = next(r for r in records if r.name == LOOP and r.getMessage().startswith("cycle"))
    assert (cycle.cycle, cycle.bound, cycle.evicted) == (1, 2, 0)  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_eviction_lines(caplog: pytest.LogCaptureFixture) -> None:
    cluster = FakeCluster(graceful_eviction=True)
    _reclaim_cluster(cluster)
    controller = make_controller(cluster)
    caplog.set_level(logging.INFO, logger=LOOP)
    async with informing(controller):
        first = await controller.cycle()
    victims = sorted(e.pod for e in first.decisions.evictions)
    assert len(victims) == 2
    assert _lines(caplog) == [
        *(("INFO", f"evicted pod {v} (reclaim, for ml/a0)") for v in victims),
        ("INFO", "cycle 1: 0 bound, 0 failed, 2 evicted, 0 pending, 1 gangs waiting"),
    ]
