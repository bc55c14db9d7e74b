"""The node's GPUs as the agent sees them: :class:`GpuInfo` and the :class:`GpuReader` port.

Two adapters implement the port: :class:`gpufleet.agent.gpus.nvml.NvmlGpuReader` over NVML (the
only module that imports ``pynvml``, from the ``agent`` extra) and the fake
:class:`gpufleet.testing.fake_gpus.FakeGpuReader` of the tests; ``tests/agent/gpus`` runs the same
contract against both (the NVML half only where a driver and a GPU are present).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["GpuInfo", "GpuReader", "GpuReaderError"]


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One physical GPU of the node."""

    index: int  # NVML's index (PCI bus order), the index gpufleet's annotations use
    uuid: str  # "GPU-<uuid>", the device plugin's device ID and the CDI device name's suffix
    product: str  # "NVIDIA H100 80GB HBM3"
    memory_mib: int
    mig_enabled: bool  # MIG mode is on: the GPU is split in instances, not handed out whole
    healthy: bool
    minor: int  # /dev/nvidia<minor>


class GpuReaderError(Exception):
    """The GPUs cannot be read (no NVML library, no driver, a failed call), in one line."""


class GpuReader(Protocol):
    """The node's GPUs, and a way to learn when their health changes."""

    def read(self) -> tuple[GpuInfo, ...]:
        """The GPUs now, in index order. Raises :class:`GpuReaderError`."""
        ...

    async def changed(self) -> None:
        """Return once the GPUs may have changed (a GPU became unhealthy); the caller reads again.
        Cancellable."""
        ...

    def close(self) -> None:
        """Release the library; :meth:`changed` must not be awaited afterwards."""
        ...
