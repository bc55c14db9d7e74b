"""The node's GPUs as the agent sees them: :class:`GpuInfo` and the :class:`GpuReader` port.

Two adapters implement the port: :class:`gpufleet.agent.gpus.nvml.NvmlGpuReader` over NVML (the
only module that imports ``pynvml``, from the ``agent`` extra) and the fake
:class:`gpufleet.testing.fake_gpus.FakeGpuReader` of the tests; ``tests/agent/gpus`` runs the same
contract against both, the NVML reader running over the fake NVML of
:mod:`gpufleet.testing.fake_nvml` and, where a driver and a GPU are present, over the real one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "GpuHealthReading",
    "GpuInfo",
    "GpuReader",
    "GpuReaderError",
    "GpuUtilisation",
    "MigInstance",
    "ProcessUtilisation",
    "XidEvent",
]


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG instance of a GPU in MIG mode."""

    gpu_instance_id: int
    compute_instance_id: int
    profile: str  # "1g.10gb", as NVIDIA's DRA driver and device plugin name it
    memory_mib: int
    uuid: str  # "MIG-<uuid>"


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
    pci_bus_id: str = ""  # "00000000:18:00.0"
    mig_instances: tuple[MigInstance, ...] = ()
    nvlink_peers: frozenset[int] = frozenset()  # indices of GPUs this one reaches over an active NVLink
    nvswitch: bool = False  # an active NVLink goes to an NVSwitch: every such GPU of the node is one domain


@dataclass(frozen=True, slots=True)
class GpuHealthReading:
    """One GPU's error counters now. ``None`` where the GPU does not support the counter; ``error``
    names the call that failed when the GPU could not be read (its health is then unknown)."""

    index: int
    uuid: str
    lost: bool = False  # fallen off the bus (NVML_ERROR_GPU_IS_LOST)
    ecc_dbe_volatile: int | None = None  # double-bit ECC errors since the driver loaded
    retired_pages_sbe: int | None = None  # pages retired for single-bit errors (pre-Ampere)
    retired_pages_dbe: int | None = None  # pages retired for double-bit errors (pre-Ampere)
    retired_pages_pending: bool | None = None
    row_remap_failure: bool | None = None  # Ampere and later: a row could not be remapped
    row_remap_pending: bool | None = None  # a remap waits for a GPU reset
    error: str | None = None


@dataclass(frozen=True, slots=True)
class XidEvent:
    """A critical Xid the driver reported for one GPU (any Xid: the health rules decide)."""

    index: int
    uuid: str
    xid: int


@dataclass(frozen=True, slots=True)
class GpuUtilisation:
    index: int
    uuid: str
    gpu_util_percent: float  # DCGM_FI_DEV_GPU_UTIL
    memory_used_mib: int  # DCGM_FI_DEV_FB_USED
    memory_total_mib: int


@dataclass(frozen=True, slots=True)
class ProcessUtilisation:
    """One process on one GPU (a process on two GPUs gives two)."""

    index: int
    uuid: str
    pid: int  # in the host's PID namespace, as NVML reports it
    sm_util_percent: float  # the process's share of the SM time over the last sample period
    memory_used_mib: int

class GpuReaderError(Exception):
    """The GPUs cannot be read (no NVML library, no driver, a failed call), in one line."""


class GpuReader(Protocol):
    """The node's GPUs, and a way to learn when their health changes."""

    def read(self) -> tuple[GpuInfo, ...]:
        """The GPUs now, in index order. Raises :class:`GpuReaderError`."""
        ...

    def health(self) -> tuple[GpuHealthReading, ...]:
        """Every GPU's error counters now, in index order. Never raises: a GPU that cannot be read
        gives a reading with ``error`` set."""
        ...

    def xid_events(self) -> tuple[XidEvent, ...]:
        """The Xid events reported since the last call, oldest first, without blocking."""
        ...

    def utilisation(self) -> tuple[tuple[GpuUtilisation, ...], tuple[ProcessUtilisation, ...]]:
        """Per GPU and per process utilisation now. Raises :class:`GpuReaderError`."""
        ...

    async def changed(self) -> None:
        """Return once the GPUs may have changed (a GPU became unhealthy); the caller reads again.
        Cancellable."""
        ...

    def close(self) -> None:
        """Release the library; :meth:`changed` must not be awaited afterwards."""
        ...
