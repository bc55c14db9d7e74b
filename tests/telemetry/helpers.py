"""Recorded telemetry (tests/telemetry/data, README there) and a small clock that never waits."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parent / "data"


def data(name: str) -> str:
    return (DATA / name).read_text()


class ManualClock:
    """Time that moves only when told; ``sleep`` records the wait and moves the time."""

    def __init__(self, start: float = 1_795_521_600.0) -> None:
        self.t = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds

