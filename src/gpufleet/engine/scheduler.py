"""Entry point of the engine (being written)."""

from gpufleet.domain import Decisions, Snapshot


def schedule(snapshot: Snapshot) -> Decisions:
    raise NotImplementedError
