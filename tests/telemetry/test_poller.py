"""The scraper loop with an injected clock and sleep: backoff, counts, stop (no real time)."""

from __future__ import annotations

import pytest

from gpufleet.telemetry import Backoff, PodKey, PodUsage, TelemetryError, TelemetryPage, TelemetryPoller

from .helpers import ManualClock


class Scripted:
    """A source answering from a script: a page, or a TelemetryError line."""

    name = "scripted"

    def __init__(self, clock: ManualClock, script: list[str | None]) -> None:
        self.clock = clock
        self.script = script
        self.closed = 0

    async def read(self) -> TelemetryPage:
        step = self.script.pop(0) if self.script else None
        if step is not None and step.startswith("fail"):
            raise TelemetryError(f"scripted: {step}")
        key = PodKey("ml", "p")
        failures = (f"scripted: {step}",) if step else ()
        return TelemetryPage(source=self.name, at=self.clock.now(), gpus_seen=1, failures=failures,
                             pods={key: PodUsage(key, self.clock.now(), ("GPU-a",), 50.0, None, None)})

    async def close(self) -> None:
        self.closed += 1


def test_backoff_grows_to_its_cap() -> None:
    b = Backoff(initial_s=1.0, factor=3.0, maximum_s=20.0)
    assert [b.delay(n) for n in range(6)] == [0.0, 1.0, 3.0, 9.0, 20.0, 20.0]
    assert Backoff(initial_s=5.0, maximum_s=300.0).delay(10_000) == 300.0


@pytest.mark.asyncio
async def test_failures_back_off_and_success_resets(clock: ManualClock) -> None:
    source = Scripted(clock, ["fail one", "fail two", "fail three", None, "node b: HTTP 500", "fail again"])
    pages: list[TelemetryPage] = []
    poller = TelemetryPoller(source, pages.append, now=clock.now, sleep=clock.sleep, interval_s=30.0,
                             backoff=Backoff(initial_s=5.0, factor=2.0, maximum_s=15.0))
    delays = [await poller.poll_once() for _ in range(6)]
    assert delays == [5.0, 10.0, 15.0, 30.0, 30.0, 5.0]
    stats = poller.stats
    assert (stats.reads_total, stats.failures_total, stats.partial_failures_total, stats.consecutive_failures) == (
        6, 4, 1, 1)
    assert stats.last_error == "scripted: fail again"
    assert len(pages) == 2


@pytest.mark.asyncio
async def test_run_sleeps_on_the_injected_clock_and_stops(clock: ManualClock) -> None:
    source = Scripted(clock, ["fail", None, None])
    start = clock.t
    poller: TelemetryPoller

    def sink(page: TelemetryPage) -> None:
        if len(seen) == 1:
            poller.stop()
        seen.append(page)

    seen: list[TelemetryPage] = []
    poller = TelemetryPoller(source, sink, now=clock.now, sleep=clock.sleep, interval_s=60.0)
    await poller.run()
    assert clock.sleeps == [5.0, 60.0]
    assert [p.at - start for p in seen] == [5.0, 65.0]
    assert poller.stats.last_success_at == start + 65.0
    assert source.closed == 1


@pytest.mark.asyncio
async def test_a_source_bug_is_a_counted_failure_not_a_crash(clock: ManualClock) -> None:
    class Broken:
        name = "broken"

        async def read(self) -> TelemetryPage:
            raise KeyError("UUID")

        async def close(self) -> None:
            pass

    poller = TelemetryPoller(Broken(), lambda page: None, now=clock.now, sleep=clock.sleep)
    assert await poller.poll_once() == 5.0
    assert poller.stats.last_error == "broken: KeyError: 'UUID'"
