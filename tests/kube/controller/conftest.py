"""Fixtures shared by the controller's HTTP tests (a test module's own fixture of the same name wins)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from gpufleet.testing.emulator import ApiServerEmulator


@pytest_asyncio.fixture
async def emulator() -> AsyncIterator[ApiServerEmulator]:
    """A fresh API server emulator over HTTP."""
    async with ApiServerEmulator() as server:
        yield server
