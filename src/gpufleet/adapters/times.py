"""Times given on the command line (a report's window, a simulated ledger's origin): one reading for all."""

from __future__ import annotations

from datetime import UTC, datetime

from gpufleet.adapters.errors import InputError, describe

__all__ = ["parse_when"]


def parse_when(text: str, option: str) -> float:
    """Epoch seconds of a date (``2026-11-01``, midnight UTC) or an ISO 8601 time (``2026-11-01T08:00``,
    UTC unless it carries an offset); :class:`InputError` naming the option otherwise."""
    value = text.strip()
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InputError(f"{option}: {describe(text)}: not a date (YYYY-MM-DD) or an ISO 8601 time "
                         "(YYYY-MM-DDTHH:MM[:SS][Z|+HH:MM])") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = moment.timestamp()
    if seconds < 0:
        raise InputError(f"{option}: {describe(text)}: before 1970")
    return seconds
