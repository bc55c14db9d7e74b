"""Helpers for the health rules' tests: readings, Xids and a short way to run steps."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpufleet.agent.gpus import GpuHealthReading, XidEvent
from gpufleet.agent.health import GpuHealth, HealthPolicy, HealthStep, step

POLICY = HealthPolicy(clean_period_s=3600.0, retired_pages_threshold=60, storm_xids=10, storm_window_s=600.0)


def uuid_of(index: int) -> str:
    return f"GPU-{index:08d}-0000-0000-0000-000000000000"


def reading(index: int = 0, **counters: object) -> GpuHealthReading:
    return GpuHealthReading(index=index, uuid=uuid_of(index), **counters)  # type: ignore[arg-type]


def xid(number: int, index: int = 0) -> XidEvent:
    return XidEvent(index=index, uuid=uuid_of(index), xid=number)


def by_index(result: HealthStep) -> dict[int, GpuHealth]:
    return {gpu.index: gpu for gpu in result.gpus}


def run(previous: Mapping[int, GpuHealth] | HealthStep, now: float, readings: Iterable[GpuHealthReading] = (),
        events: Iterable[XidEvent] = (), uncordoned: Iterable[int] = (),
        policy: HealthPolicy = POLICY) -> HealthStep:
    before = by_index(previous) if isinstance(previous, HealthStep) else previous
    return step(before, tuple(readings), tuple(events), frozenset(uncordoned), now, policy)
