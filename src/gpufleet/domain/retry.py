"""How long to wait before trying again after failures in a row: one rule for every retry loop (the
usage ledger's writer, the telemetry poller)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff: after ``n`` failures in a row wait ``min(maximum_s, initial_s * factor ** (n - 1))``
    (0 after none)."""

    initial_s: float = 0.5
    factor: float = 2.0
    maximum_s: float = 60.0

    def delay(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        # the exponent bounded: a long outage must not overflow the float before the maximum applies
        return float(min(self.maximum_s, self.initial_s * self.factor ** min(failures - 1, 64)))
