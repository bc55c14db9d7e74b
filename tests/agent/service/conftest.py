"""The HTTP emulator holding the agent's Node, for the agent's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from gpufleet.kube import Kind
from gpufleet.testing.emulator import ApiServerEmulator

from .agent_fixtures import node_object


@pytest_asyncio.fixture
async def emulator() -> AsyncIterator[ApiServerEmulator]:
    async with ApiServerEmulator() as server:
        server.store.put(Kind.NODE, node_object())
        yield server
