"""The node's GPUs: the :class:`GpuReader` port and :class:`GpuInfo` (NVML adapter: :mod:`.nvml`).

The NVML adapter is imported by its module name only (``gpufleet.agent.gpus.nvml``), so that this
face does not need the ``agent`` extra (nvidia-ml-py).
"""

from gpufleet.agent.gpus.port import GpuInfo, GpuReader, GpuReaderError

__all__ = ["GpuInfo", "GpuReader", "GpuReaderError"]
