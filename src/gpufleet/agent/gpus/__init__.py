"""The node's GPUs: the :class:`GpuReader` port and :class:`GpuInfo` (NVML adapter: :mod:`.nvml`).

The NVML adapter is imported by its module name only (``gpufleet.agent.gpus.nvml``), so that this
face does not need the ``agent`` extra (nvidia-ml-py).
"""

from gpufleet.agent.gpus.port import (
    GpuHealthReading,
    GpuInfo,
    GpuReader,
    GpuReaderError,
    GpuUtilisation,
    MigInstance,
    ProcessUtilisation,
    XidEvent,
)

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
