"""The :class:`~gpufleet.agent.gpus.port.GpuReader` over NVML (``pynvml``, from nvidia-ml-py).

The only module of gpufleet that imports ``pynvml`` (an import-linter contract says so). Install
it with the ``agent`` extra: ``pip install 'gpufleet[agent]'``.

Health follows NVIDIA's device plugin: a GPU becomes unhealthy on a critical Xid event, except the
Xids that an application causes and that leave the GPU usable (13 graphics engine exception, 31 GPU
memory page fault, 43 GPU stopped processing, 45 preemptive cleanup, 68 video processor exception,
109 context switch timeout), and stays unhealthy until the reader is opened again (the agent
restarts). A GPU whose UUID or memory cannot be read is unhealthy from the start.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from gpufleet.agent.gpus.port import GpuInfo, GpuReaderError

__all__ = ["APPLICATION_XIDS", "NvmlGpuReader", "open_nvml"]

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
_WAIT_MS = 1000  # one blocking wait for events; cancellation is seen between two


def _pynvml() -> Any:
    try:
        import pynvml
    except ImportError:
        raise GpuReaderError(
            "NVML is not available: the Python module pynvml is missing "
            "(install gpufleet with the agent extra: pip install 'gpufleet[agent]')"
        ) from None
    return pynvml


def open_nvml() -> NvmlGpuReader:
    """Initialise NVML and read the GPUs once. Raises :class:`GpuReaderError` in one line when the
    library, the driver or a GPU cannot be read."""
    nvml = _pynvml()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        raise GpuReaderError(f"NVML is not available: {err} (is the NVIDIA driver installed on this node?)") from None
    return NvmlGpuReader(nvml)


class NvmlGpuReader:
    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._lock = threading.Lock()
        self._unhealthy: set[str] = set()
        self._events: Any = None
        try:
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(int(nvml.nvmlDeviceGetCount()))]
        except nvml.NVMLError as err:
            raise GpuReaderError(f"NVML cannot list the GPUs: {err}") from None
        self._gpus = tuple(self._read_one(index, handle) for index, handle in enumerate(self._handles))

    def _read_one(self, index: int, handle: Any) -> GpuInfo:
        nvml = self._nvml
        try:
            uuid = str(nvml.nvmlDeviceGetUUID(handle))
        except nvml.NVMLError as err:
            raise GpuReaderError(f"NVML cannot read GPU {index}'s UUID: {err}") from None
        product, memory_mib, mig, minor, healthy = "", 0, False, index, True
        try:
            product = str(nvml.nvmlDeviceGetName(handle))
            memory_mib = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024)
            minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
        except nvml.NVMLError:
            healthy = False
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
            mig = int(current) == int(nvml.NVML_DEVICE_MIG_ENABLE)
        except nvml.NVMLError:
            mig = False  # not a MIG-capable GPU
        return GpuInfo(index=index, uuid=uuid, product=product, memory_mib=memory_mib, mig_enabled=mig,
                       healthy=healthy, minor=minor)

    def read(self) -> tuple[GpuInfo, ...]:
        with self._lock:
            unhealthy = set(self._unhealthy)
        return tuple(
            gpu if gpu.uuid not in unhealthy else GpuInfo(
                index=gpu.index, uuid=gpu.uuid, product=gpu.product, memory_mib=gpu.memory_mib,
                mig_enabled=gpu.mig_enabled, healthy=False, minor=gpu.minor)
            for gpu in self._gpus
        )

    def _register(self) -> Any:
        nvml = self._nvml
        events = nvml.nvmlEventSetCreate()
        for handle in self._handles:
            # A GPU without event support keeps the health it had at start.
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
        return events

    def _wait_once(self) -> bool:
        """One blocking wait; True when a GPU became unhealthy."""
        nvml = self._nvml
        if self._events is None:
            self._events = self._register()
        try:
            event = nvml.nvmlEventSetWait(self._events, _WAIT_MS)
        except nvml.NVMLError_Timeout:
            return False
        except nvml.NVMLError:
            return False
        if int(event.eventData) in APPLICATION_XIDS:
            return False
        uuid = str(nvml.nvmlDeviceGetUUID(event.device))
        with self._lock:
            if uuid in self._unhealthy:
                return False
            self._unhealthy.add(uuid)
        return True

    async def changed(self) -> None:
        while not await asyncio.to_thread(self._wait_once):
            pass

    def close(self) -> None:
        nvml = self._nvml
        with contextlib.suppress(nvml.NVMLError):
            if self._events is not None:
                nvml.nvmlEventSetFree(self._events)
            nvml.nvmlShutdown()
