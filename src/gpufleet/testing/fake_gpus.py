"""A fake :class:`~gpufleet.agent.gpus.port.GpuReader`: the GPUs a test says, health changed on demand.

``tests/agent/gpus`` runs the same contract against it and, where a driver and a GPU are present,
the NVML reader.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpufleet.agent.gpus import GpuHealthReading, GpuInfo, GpuReader, GpuUtilisation, ProcessUtilisation, XidEvent

__all__ = ["FakeGpuReader", "fake_gpus"]


def fake_gpus(count: int, product: str = "NVIDIA H100 80GB HBM3", memory_mib: int = 81559) -> tuple[GpuInfo, ...]:
    """``count`` healthy GPUs with stable, recognisable UUIDs (``GPU-00000000-0000-0000-0000-00000000000<i>``)."""
    return tuple(
        GpuInfo(index=i, uuid=f"GPU-00000000-0000-0000-0000-{i:012d}", product=product, memory_mib=memory_mib,
                mig_enabled=False, healthy=True, minor=i)
        for i in range(count)
    )


class FakeGpuReader:
    """One consumer of :meth:`changed` at a time (the device plugin's health loop)."""

    def __init__(self, gpus: Iterable[GpuInfo]) -> None:
        self._gpus = tuple(gpus)
        self._changes = 0
        self._seen = 0
        self._event = asyncio.Event()
        self.closed = False

    def read(self) -> tuple[GpuInfo, ...]:
        return self._gpus

    def set_healthy(self, uuid: str, healthy: bool) -> None:
        """Change one GPU's health and wake :meth:`changed`."""
        if not any(gpu.uuid == uuid for gpu in self._gpus):
            raise KeyError(uuid)
        self._gpus = tuple(dataclasses.replace(gpu, healthy=healthy) if gpu.uuid == uuid else gpu
                           for gpu in self._gpus)
        self._changes += 1
        self._event.set()

    def health(self) -> tuple[GpuHealthReading, ...]:
        return tuple(GpuHealthReading(index=gpu.index, uuid=gpu.uuid) for gpu in self._gpus)

    def xid_events(self) -> tuple[XidEvent, ...]:
        return ()

    def utilisation(self) -> tuple[tuple[GpuUtilisation, ...], tuple[ProcessUtilisation, ...]]:
        gpus = tuple(GpuUtilisation(index=gpu.index, uuid=gpu.uuid, gpu_util_percent=0.0, memory_used_mib=0,
                                    memory_total_mib=gpu.memory_mib) for gpu in self._gpus)
        return gpus, ()

    async def changed(self) -> None:
        while self._changes == self._seen:
            self._event.clear()
            await self._event.wait()
        self._seen = self._changes

    def close(self) -> None:
        self.closed = True


if TYPE_CHECKING:  # the fake is an adapter of the port: mypy checks it stays one

    def _is_a_port(reader: FakeGpuReader) -> GpuReader:
        return reader
