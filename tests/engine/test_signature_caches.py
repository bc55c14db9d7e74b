"""Failure signatures kept per gang (``Engine.held_sigs``, ``Engine.delayed_sigs``): what a gang's
signature is made of changing (the reservations held), the signature is made again, equal to one
made without anything kept."""

from __future__ import annotations

from tests.scripts.load import load_script

from gpufleet.bench.shapes import make_shape
from gpufleet.domain import Snapshot
from gpufleet.engine.scheduler import Engine


def _snapshot() -> Snapshot:
    options, flavors = load_script("bench_options"), load_script("bench_flavors")
    snapshot: Snapshot = options.every_option(flavors.flavored(flavors.two_models(make_shape("stuck-gangs", 0.05))))
    return snapshot


def _engine(snapshot: Snapshot) -> Engine:
    engine = Engine(snapshot)
    assert engine.reserve is not None
    engine.make_reservations(engine.reserve, engine.admission.candidates())
    return engine


def test_signatures_follow_the_reservations_held() -> None:
    snapshot = _snapshot()
    kept, fresh = _engine(snapshot), _engine(snapshot)
    assert kept.reserve is not None and fresh.reserve is not None
    held = sorted(kept.reserve.held)
    assert len(held) >= 2
    gangs = [g.idx for g in kept.gangs if len(g.members) == 4 and not g.alive and g.idx not in held][:30]
    assert gangs

    def sigs(engine: Engine) -> list[object]:
        out: list[object] = []
        for g in gangs:
            gang = engine.gangs[g]
            request = engine.gang_request(engine.admission.pending_members(gang))
            out.append(engine.delayed_signature(gang, request))
            assert engine.delayed_signature(gang, request) is out[-1]  # kept while nothing changes
        return out

    before = sigs(kept)
    assert before == sigs(_engine(snapshot))
    kept.reserve.drop(held[-1])  # after its signatures were kept
    fresh.reserve.drop(held[-1])  # before any was made
    after = sigs(kept)
    assert after == sigs(fresh)
    assert after != before  # the reservation dropped is no longer in them
