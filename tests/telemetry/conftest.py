"""The telemetry tests' clock fixture."""

from __future__ import annotations

import pytest

from .helpers import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()
