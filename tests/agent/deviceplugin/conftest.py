"""gRPC's asyncio objects must be finalised on the event loop that made them, before pytest-asyncio
closes it: collected later (by a following test's garbage collection) the library crashes the process."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import pytest_asyncio


@pytest_asyncio.fixture(autouse=True)
async def _finalise_grpc_objects_on_their_loop() -> AsyncIterator[None]:
    yield
    gc.collect()  # the test's frame is gone: its channels, servers and calls are garbage now
    await asyncio.sleep(0)
