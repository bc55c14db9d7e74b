"""The :class:`~gpufleet.agent.gpus.port.GpuReader` over NVML (``pynvml``, from nvidia-ml-py).

The only module of gpufleet that imports ``pynvml`` (an import-linter contract says so). Install
it with the ``agent`` extra: ``pip install 'gpufleet[agent]'``. Tests hand the reader the fake of
:mod:`gpufleet.testing.fake_nvml` in place of the module.

Discovery (:meth:`NvmlGpuReader.read`) reads the GPUs afresh on each call (MIG mode and instances,
NVLink state change without a restart); the GPUs themselves are enumerated when NVML is opened, as
NVML sees a GPU added only after it is initialised again.

Health, for the device plugin, follows NVIDIA's device plugin: a GPU becomes unhealthy on a
critical Xid event, except the Xids that an application causes and that leave the GPU usable (13
graphics engine exception, 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive
cleanup, 68 video processor exception, 109 context switch timeout), and stays unhealthy until the
reader is opened again (the agent restarts). A GPU that cannot be read (fallen off the bus, its
name or memory unreadable) is unhealthy. :meth:`NvmlGpuReader.xid_events` reports every Xid, with
no filtering: the agent's health rules decide.

Bad NVML answers never crash the reader: a call that fails becomes an unhealthy GPU, a health
reading with ``error`` (or ``lost``), a GPU left out of the utilisation, or one
:class:`~gpufleet.agent.gpus.port.GpuReaderError` line when nothing at all can be read.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import math
import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from gpufleet.agent.gpus.port import (
    GpuHealthReading,
    GpuInfo,
    GpuReaderError,
    GpuUtilisation,
    MigInstance,
    ProcessUtilisation,
    XidEvent,
)

__all__ = ["APPLICATION_XIDS", "NvmlGpuReader", "mig_profile_name", "open_nvml"]

log = logging.getLogger(__name__)

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
_WAIT_MS = 1000  # one blocking wait for events; cancellation is seen between two
_MIB = 1024 * 1024
_MAX_KEPT_XIDS = 4096  # Xid events kept for xid_events() (the device plugin never asks for them)
_MAX_DRAINED = 10_000  # events taken in one drain: a storm is read over several calls, not forever

# NVML's return codes (nvml.h; a stable ABI): errors are told apart by their code, so that any
# module with pynvml's NVMLError (the fake of the tests included) serves.
_INVALID_ARGUMENT = 2
_NOT_SUPPORTED = 3
_TIMEOUT = 10
_GPU_IS_LOST = 15

_T = TypeVar("_T")
_BUS_ID = re.compile(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])")


def _pynvml() -> Any:
    try:
        import pynvml
    except ImportError:
        raise GpuReaderError(
            "NVML is not available: the Python module pynvml is missing "
            "(install gpufleet with the agent extra: pip install 'gpufleet[agent]')"
        ) from None
    return pynvml


def open_nvml(module: Any = None) -> NvmlGpuReader:
    """Initialise NVML (``pynvml``, or ``module`` in its place) and read the GPUs once. Raises
    :class:`GpuReaderError` in one line when the library, the driver or the GPU list cannot be read."""
    nvml = _pynvml() if module is None else module
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        raise GpuReaderError(f"NVML is not available: {err} (is the NVIDIA driver installed on this node?)") from None
    try:
        return NvmlGpuReader(nvml)
    except GpuReaderError:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()
        raise


def mig_profile_name(gpu_slices: int, compute_slices: int, memory_mib: int, gpu_memory_mib: int) -> str:
    """A MIG instance's profile as NVIDIA's device plugin names it: ``"1g.10gb"``, or ``"1c.2g.20gb"``
    for a compute instance smaller than its GPU instance. The memory in the name is the instance's
    share of the GPU rounded up to eighths, times the GPU's memory in whole GiB (as go-nvlib does):
    an H100's 1g instance has 9856 MiB of 81559 and is ``1g.10gb``."""
    share = math.ceil(memory_mib / max(gpu_memory_mib, 1) * 8 - 1e-9) / 8
    gib = round(share * math.ceil(gpu_memory_mib / 1024))
    name = f"{gpu_slices}g.{gib}gb"
    return name if compute_slices == gpu_slices else f"{compute_slices}c.{name}"


def _code(err: BaseException) -> int | None:
    value = getattr(err, "value", None)
    return value if isinstance(value, int) else None


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _bus_key(bus_id: object) -> tuple[int, ...] | str:
    """``"00000000:18:00.0"`` and ``"0000:18:00.0"`` name the same device."""
    text = _text(bus_id).strip()
    match = _BUS_ID.fullmatch(text)
    return tuple(int(part, 16) for part in match.groups()) if match else text.lower()


def _handle_key(handle: Any) -> Any:
    """The device a handle points to: pynvml hands out a new pointer object for each call."""
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, ctypes.c_void_p).value
    return handle


class _Lost(Exception):
    """The GPU has fallen off the bus (NVML_ERROR_GPU_IS_LOST on one of its calls)."""


@dataclass(slots=True)
class _Gpu:
    """One GPU as enumerated when NVML was opened."""

    index: int
    handle: Any  # None: NVML gave no handle or no UUID
    uuid: str
    bus_key: tuple[int, ...] | str
    lost: bool = False
    problem: str | None = None  # why the handle or the UUID could not be read
    known: GpuInfo | None = None  # the last reading, kept for a GPU that is lost later


class NvmlGpuReader:
    """The port over an initialised NVML (``open_nvml`` initialises it); ``close`` shuts NVML down."""

    def __init__(self, nvml: Any, *, retry_wait_s: float = 1.0) -> None:
        self._nvml = nvml
        self._retry_wait_s = retry_wait_s  # after an event wait fails with an error that is not a timeout
        self._lock = threading.Lock()  # the health state and the Xid queue: the event thread writes them
        self._unhealthy: set[int] = set()
        self._xids: deque[XidEvent] = deque(maxlen=_MAX_KEPT_XIDS)
        self._changes = 0
        self._seen = 0
        self._closed = threading.Event()
        self._last_sample: dict[int, int] = {}  # GPU index -> newest process sample's timestamp (µs)
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as err:
            raise GpuReaderError(f"NVML cannot list the GPUs: {err}") from None
        self._gpus = [self._enumerate(index) for index in range(count)]
        for gpu in self._gpus:
            if gpu.problem is not None:
                log.warning("GPU %d cannot be read (%s): listed as %s, unhealthy", gpu.index, gpu.problem, gpu.uuid)
        self._by_key = {_handle_key(gpu.handle): gpu.index for gpu in self._gpus if gpu.handle is not None}
        self._by_bus = {gpu.bus_key: gpu.index for gpu in self._gpus if gpu.handle is not None}
        self._by_uuid = {gpu.uuid: gpu.index for gpu in self._gpus}
        self._events = self._register()
        self.read()  # the first reading: kept for GPUs that fall off the bus later

    # ------------------------------------------------------------------------------ enumeration

    def _enumerate(self, index: int) -> _Gpu:
        nvml = self._nvml
        placeholder = f"GPU-unreadable-{index}"  # unique on the node; the GPU is reported unhealthy
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as err:
            return _Gpu(index, None, placeholder, f"gpu-{index}", lost=_code(err) == _GPU_IS_LOST,
                        problem=f"nvmlDeviceGetHandleByIndex: {err}")
        try:
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        except nvml.NVMLError as err:
            return _Gpu(index, None, placeholder, f"gpu-{index}", lost=_code(err) == _GPU_IS_LOST,
                        problem=f"nvmlDeviceGetUUID: {err}")
        bus: tuple[int, ...] | str = f"gpu-{index}"
        with contextlib.suppress(nvml.NVMLError):
            bus = _bus_key(nvml.nvmlDeviceGetPciInfo(handle).busId)
        return _Gpu(index, handle, uuid, bus)

    def _ask(self, function: Callable[..., _T], *args: Any) -> _T:
        """One NVML call; a lost GPU raises :class:`_Lost`, any other error NVML's own."""
        try:
            return function(*args)
        except self._nvml.NVMLError as err:
            if _code(err) == _GPU_IS_LOST:
                raise _Lost() from None
            raise

    # ------------------------------------------------------------------------------ discovery

    def read(self) -> tuple[GpuInfo, ...]:
        if self._closed.is_set():
            raise GpuReaderError("the NVML reader is closed")
        with self._lock:
            unhealthy = set(self._unhealthy)
        out: list[GpuInfo] = []
        for gpu in self._gpus:
            info = self._describe(gpu)
            if info.healthy and gpu.index in unhealthy:
                info = replace(info, healthy=False)
            out.append(info)
        return tuple(out)

    def _unreadable(self, gpu: _Gpu) -> GpuInfo:
        if gpu.known is not None:
            return replace(gpu.known, healthy=False)
        return GpuInfo(index=gpu.index, uuid=gpu.uuid, product="", memory_mib=0, mig_enabled=False, healthy=False,
                       minor=gpu.index)

    def _describe(self, gpu: _Gpu) -> GpuInfo:
        if gpu.handle is None:
            return self._unreadable(gpu)
        nvml, handle = self._nvml, gpu.handle
        try:
            product, memory_mib, minor, healthy, pci = "", 0, gpu.index, True, ""
            try:
                product = _text(self._ask(nvml.nvmlDeviceGetName, handle))
                memory_mib = int(self._ask(nvml.nvmlDeviceGetMemoryInfo, handle).total) // _MIB
                minor = int(self._ask(nvml.nvmlDeviceGetMinorNumber, handle))
            except nvml.NVMLError:
                healthy = False
            with contextlib.suppress(nvml.NVMLError):
                pci = _text(self._ask(nvml.nvmlDeviceGetPciInfo, handle).busId)
            mig_enabled, instances = self._mig(handle, memory_mib)
            peers, nvswitch = self._nvlinks(gpu)
        except _Lost:
            gpu.lost = True
            return self._unreadable(gpu)
        gpu.lost = False
        info = GpuInfo(index=gpu.index, uuid=gpu.uuid, product=product, memory_mib=memory_mib,
                       mig_enabled=mig_enabled, healthy=healthy, minor=minor, pci_bus_id=pci,
                       mig_instances=instances, nvlink_peers=peers, nvswitch=nvswitch)
        if healthy:
            gpu.known = info
        return info

    def _mig(self, handle: Any, memory_mib: int) -> tuple[bool, tuple[MigInstance, ...]]:
        nvml = self._nvml
        try:
            current, _pending = self._ask(nvml.nvmlDeviceGetMigMode, handle)
            if int(current) != int(nvml.NVML_DEVICE_MIG_ENABLE):
                return False, ()
            slots = int(self._ask(nvml.nvmlDeviceGetMaxMigDeviceCount, handle))
        except nvml.NVMLError:
            return False, ()  # not a MIG-capable GPU
        instances: list[MigInstance] = []
        for slot in range(slots):
            try:
                mig = self._ask(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
                attributes = self._ask(nvml.nvmlDeviceGetAttributes, mig)
                instances.append(MigInstance(
                    gpu_instance_id=int(self._ask(nvml.nvmlDeviceGetGpuInstanceId, mig)),
                    compute_instance_id=int(self._ask(nvml.nvmlDeviceGetComputeInstanceId, mig)),
                    profile=mig_profile_name(int(attributes.gpuInstanceSliceCount),
                                             int(attributes.computeInstanceSliceCount),
                                             int(attributes.memorySizeMB), memory_mib),
                    memory_mib=int(attributes.memorySizeMB),
                    uuid=_text(self._ask(nvml.nvmlDeviceGetUUID, mig)),
                ))
            except nvml.NVMLError:
                continue  # NOT_FOUND: an empty slot; an instance that cannot be read is left out
        return True, tuple(sorted(instances, key=lambda m: (m.gpu_instance_id, m.compute_instance_id)))

    def _nvlinks(self, gpu: _Gpu) -> tuple[frozenset[int], bool]:
        """The GPUs this one reaches over an active NVLink, and whether a link goes to an NVSwitch."""
        nvml, handle = self._nvml, gpu.handle
        peers: set[int] = set()
        nvswitch = False
        for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                if int(self._ask(nvml.nvmlDeviceGetNvLinkState, handle, link)) != int(
                        nvml.NVML_FEATURE_ENABLED):
                    continue
            except nvml.NVMLError as err:
                if (link == 0 and _code(err) == _NOT_SUPPORTED) or _code(err) == _INVALID_ARGUMENT:
                    break  # no NVLink at all, or past this GPU's last link
                continue
            kind: int | None = None
            with contextlib.suppress(nvml.NVMLError):  # older drivers cannot say what is at the other end
                kind = int(self._ask(nvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link))
            if kind == int(nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH):
                nvswitch = True
                continue
            try:
                remote = self._ask(nvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            except nvml.NVMLError:
                continue
            peer = self._by_bus.get(_bus_key(remote.busId))
            if peer is not None and peer != gpu.index:
                peers.add(peer)
        return frozenset(peers), nvswitch

    # ------------------------------------------------------------------------------ health

    def health(self) -> tuple[GpuHealthReading, ...]:
        return tuple(self._health_of(gpu) for gpu in self._gpus)

    def _health_of(self, gpu: _Gpu) -> GpuHealthReading:
        if gpu.handle is None:
            return GpuHealthReading(index=gpu.index, uuid=gpu.uuid, lost=gpu.lost,
                                    error=None if gpu.lost else gpu.problem)
        if self._closed.is_set():
            return GpuHealthReading(index=gpu.index, uuid=gpu.uuid, error="the NVML reader is closed")
        nvml, handle = self._nvml, gpu.handle
        errors: list[str] = []

        def counter(function: Callable[..., _T], *args: Any) -> _T | None:
            try:
                return self._ask(function, handle, *args)
            except nvml.NVMLError as err:
                if _code(err) != _NOT_SUPPORTED:
                    errors.append(f"{getattr(function, '__name__', 'NVML')}: {err}")
                return None

        try:
            dbe = counter(nvml.nvmlDeviceGetTotalEccErrors, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                          nvml.NVML_VOLATILE_ECC)
            sbe_pages = counter(nvml.nvmlDeviceGetRetiredPages,
                                nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
            dbe_pages = counter(nvml.nvmlDeviceGetRetiredPages, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
            pending = counter(nvml.nvmlDeviceGetRetiredPagesPendingStatus)
            rows = counter(nvml.nvmlDeviceGetRemappedRows)
        except _Lost:
            gpu.lost = True
            return GpuHealthReading(index=gpu.index, uuid=gpu.uuid, lost=True)
        return GpuHealthReading(
            index=gpu.index, uuid=gpu.uuid,
            ecc_dbe_volatile=None if dbe is None else int(dbe),
            retired_pages_sbe=None if sbe_pages is None else len(sbe_pages),
            retired_pages_dbe=None if dbe_pages is None else len(dbe_pages),
            retired_pages_pending=None if pending is None else int(pending) == int(nvml.NVML_FEATURE_ENABLED),
            row_remap_failure=None if rows is None else bool(rows[3]),
            row_remap_pending=None if rows is None else bool(rows[2]),
            error="; ".join(errors) or None,
        )

    # ------------------------------------------------------------------------------ Xid events

    def _register(self) -> Any:
        nvml = self._nvml
        try:
            events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError:
            return None  # no events: health comes from the counters alone
        for gpu in self._gpus:
            if gpu.handle is not None:
                # A GPU without event support keeps the health it had at start.
                with contextlib.suppress(nvml.NVMLError):
                    nvml.nvmlDeviceRegisterEvents(gpu.handle, nvml.nvmlEventTypeXidCriticalError, events)
        return events

    def _record(self, event: Any) -> None:
        nvml = self._nvml
        if not int(event.eventType) & int(nvml.nvmlEventTypeXidCriticalError):
            return
        index = self._by_key.get(_handle_key(event.device))
        if index is None:  # a handle this reader did not hand out: ask the device who it is
            with contextlib.suppress(nvml.NVMLError):
                index = self._by_uuid.get(_text(nvml.nvmlDeviceGetUUID(event.device)))
        if index is None:
            log.warning("NVML reported Xid %d for a GPU this reader did not enumerate; ignored", int(event.eventData))
            return
        xid = int(event.eventData)
        with self._lock:
            self._xids.append(XidEvent(index=index, uuid=self._gpus[index].uuid, xid=xid))
            if xid not in APPLICATION_XIDS and index not in self._unhealthy:
                self._unhealthy.add(index)
                self._changes += 1

    def _drain(self) -> None:
        """Take every event waiting now, without blocking."""
        nvml = self._nvml
        if self._events is None or self._closed.is_set():
            return
        for _ in range(_MAX_DRAINED):
            try:
                event = nvml.nvmlEventSetWait(self._events, 0)
            except nvml.NVMLError:
                return  # a timeout: nothing more now (any other error: try again next time)
            self._record(event)

    def xid_events(self) -> tuple[XidEvent, ...]:
        self._drain()
        with self._lock:
            taken = tuple(self._xids)
            self._xids.clear()
        return taken

    def _wait_once(self) -> None:
        """One blocking wait for an event (NVML's, in a thread)."""
        nvml = self._nvml
        if self._closed.is_set():
            return
        if self._events is None:
            self._closed.wait(self._retry_wait_s)
            return
        try:
            event = nvml.nvmlEventSetWait(self._events, _WAIT_MS)
        except nvml.NVMLError as err:
            if _code(err) != _TIMEOUT:
                self._closed.wait(self._retry_wait_s)  # no busy loop on a failing wait
            return
        self._record(event)

    async def changed(self) -> None:
        while True:
            with self._lock:
                if self._changes != self._seen:
                    self._seen = self._changes
                    return
            await asyncio.to_thread(self._wait_once)

    # ------------------------------------------------------------------------------ utilisation

    def utilisation(self) -> tuple[tuple[GpuUtilisation, ...], tuple[ProcessUtilisation, ...]]:
        if self._closed.is_set():
            raise GpuReaderError("the NVML reader is closed")
        nvml = self._nvml
        gpus: list[GpuUtilisation] = []
        processes: list[ProcessUtilisation] = []
        failures: list[str] = []
        for gpu in self._gpus:
            if gpu.handle is None:
                continue
            handle = gpu.handle
            try:
                memory = self._ask(nvml.nvmlDeviceGetMemoryInfo, handle)
                rates = self._ask(nvml.nvmlDeviceGetUtilizationRates, handle)
            except _Lost:
                continue  # health() says it is lost
            except nvml.NVMLError as err:
                if _code(err) != _NOT_SUPPORTED:  # a MIG-enabled GPU has no whole-GPU utilisation
                    failures.append(f"GPU {gpu.index}: {err}")
                rates = None
                memory = None
            if memory is not None and rates is not None:
                gpus.append(GpuUtilisation(index=gpu.index, uuid=gpu.uuid, gpu_util_percent=float(rates.gpu),
                                           memory_used_mib=int(memory.used) // _MIB,
                                           memory_total_mib=int(memory.total) // _MIB))
            processes.extend(self._processes_on(gpu))
        if failures and len(failures) == sum(gpu.handle is not None for gpu in self._gpus):
            raise GpuReaderError(f"NVML cannot read the GPUs' utilisation: {failures[0]}")
        return tuple(gpus), tuple(processes)

    def _processes_on(self, gpu: _Gpu) -> list[ProcessUtilisation]:
        nvml, handle = self._nvml, gpu.handle
        since = self._last_sample.get(gpu.index, 0)
        sm: dict[int, tuple[int, int]] = {}  # pid -> (timestamp, SM %) of its newest sample
        try:
            for sample in self._ask(nvml.nvmlDeviceGetProcessUtilization, handle, since):
                stamp, pid = int(sample.timeStamp), int(sample.pid)
                if pid not in sm or stamp >= sm[pid][0]:
                    sm[pid] = (stamp, int(sample.smUtil))
        except _Lost:
            return []
        except nvml.NVMLError:
            pass  # NOT_FOUND: no sample since the last call; NOT_SUPPORTED: a MIG-enabled GPU
        if sm:
            self._last_sample[gpu.index] = max(since, *(stamp for stamp, _ in sm.values()))
        memory: dict[int, int] = {}
        try:
            for process in self._ask(nvml.nvmlDeviceGetComputeRunningProcesses, handle):
                used = process.usedGpuMemory  # None where the driver cannot say
                memory[int(process.pid)] = memory.get(int(process.pid), 0) + (int(used) // _MIB if used else 0)
        except (_Lost, nvml.NVMLError):
            pass
        return [ProcessUtilisation(index=gpu.index, uuid=gpu.uuid, pid=pid,
                                   sm_util_percent=float(sm[pid][1]) if pid in sm else 0.0,
                                   memory_used_mib=memory.get(pid, 0))
                for pid in sorted(sm.keys() | memory.keys())]

    # ------------------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        nvml = self._nvml
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(nvml.NVMLError):
            if self._events is not None:
                nvml.nvmlEventSetFree(self._events)
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()
