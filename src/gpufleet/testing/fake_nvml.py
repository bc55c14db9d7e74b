"""A fake NVML: an object used in place of the ``pynvml`` module, scripted by the tests.

:class:`FakeNvml` has the same function names, signatures, constants, result attribute names and
``NVMLError`` subclasses (with the same ``.value`` codes) as the part of nvidia-ml-py that
:class:`gpufleet.agent.gpus.nvml.NvmlGpuReader` calls; ``tests/testing/test_fake_nvml_contract.py``
checks each of them against the real module, and that the reader calls nothing else. It never
imports ``pynvml`` (an import-linter contract says so).

What a test can script: GPUs added or removed (seen at the next ``nvmlInit``), Xid storms, a GPU
fallen off the bus (every call on its handle raises ``NVMLError_GpuIsLost``), ECC, retired-page and
row-remap counters, MIG reconfiguration, NVLink topologies (pairs, an NVSwitch system), per-process
utilisation samples, NVML missing or failing to initialise, and any call failing with any code.

NVML's blocking event wait is modelled with a condition: a wait with a timeout returns as soon as an
event is queued or the set is freed, so tests never wait on real time unless nothing ever arrives.
"""

from __future__ import annotations

import itertools
import re
import string
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "ERROR_CODES",
    "NVML_FUNCTIONS",
    "FakeGpu",
    "FakeMigInstance",
    "FakeNvml",
    "NVMLError",
]

MIB = 1024 * 1024
_SAMPLES_KEPT = 100  # process utilisation samples kept per GPU

# NVML's return codes (nvml.h), as nvidia-ml-py names them; each gets an NVMLError subclass.
ERROR_CODES: dict[str, int] = {
    "NVML_ERROR_UNINITIALIZED": 1,
    "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_ALREADY_INITIALIZED": 5,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_INSUFFICIENT_SIZE": 7,
    "NVML_ERROR_INSUFFICIENT_POWER": 8,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_TIMEOUT": 10,
    "NVML_ERROR_IRQ_ISSUE": 11,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_CORRUPTED_INFOROM": 14,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_RESET_REQUIRED": 16,
    "NVML_ERROR_OPERATING_SYSTEM": 17,
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": 18,
    "NVML_ERROR_IN_USE": 19,
    "NVML_ERROR_MEMORY": 20,
    "NVML_ERROR_NO_DATA": 21,
    "NVML_ERROR_UNKNOWN": 999,
}

_ERROR_TEXT = {
    1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions",
    5: "Already Initialized", 6: "Not Found", 7: "Insufficient Size", 8: "Insufficient External Power",
    9: "Driver Not Loaded", 10: "Timeout", 11: "Interrupt Request Issue", 12: "NVML Shared Library Not Found",
    13: "Function Not Found", 14: "Corrupted infoROM", 15: "GPU is lost", 16: "GPU requires restart",
    17: "The operating system has blocked the request.", 18: "RM has detected an NVML/RM version mismatch.",
    20: "Insufficient Memory", 999: "Unknown Error",
}


class NVMLError(Exception):
    """pynvml's NVMLError: ``NVMLError(code)`` builds the code's subclass; ``.value`` is the code."""

    _value_class: ClassVar[dict[int, type[NVMLError]]] = {}
    value: int

    def __new__(cls, value: int = 999) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._value_class.get(value, cls)
        error = Exception.__new__(cls)
        error.value = value
        return error

    def __str__(self) -> str:
        return _ERROR_TEXT.get(self.value, f"NVML Error with code {self.value}")


def _error_class(constant: str, code: int) -> type[NVMLError]:
    # NVML_ERROR_GPU_IS_LOST -> NVMLError_GpuIsLost, as pynvml names them
    name = "NVMLError_" + string.capwords(constant.removeprefix("NVML_ERROR_"), "_").replace("_", "")

    def new(cls: type[NVMLError], *_args: object) -> NVMLError:
        return NVMLError.__new__(cls, code)

    made: type[NVMLError] = type(name, (NVMLError,), {"__new__": new})
    NVMLError._value_class[code] = made
    return made


ERROR_CLASSES: dict[str, type[NVMLError]] = {}
for _constant, _code in ERROR_CODES.items():
    _made = _error_class(_constant, _code)
    ERROR_CLASSES[_made.__name__] = _made

# The functions of pynvml that the fake provides (a contract test compares each with pynvml's).
NVML_FUNCTIONS = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceId",
    "nvmlDeviceGetComputeInstanceId",
    "nvmlDeviceGetAttributes",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait",
    "nvmlEventSetFree",
)

# ------------------------------------------------------------------ result structures (pynvml's names)


@dataclass(frozen=True, slots=True)
class c_nvmlMemory_t:  # the names of pynvml's structures and their fields
    total: int
    free: int
    used: int


@dataclass(frozen=True, slots=True)
class nvmlPciInfo_t:
    busIdLegacy: str
    domain: int
    bus: int
    device: int
    pciDeviceId: int
    pciSubSystemId: int
    busId: str


@dataclass(frozen=True, slots=True)
class c_nvmlUtilization_t:
    gpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class c_nvmlProcessUtilizationSample_t:
    pid: int
    timeStamp: int  # microseconds
    smUtil: int
    memUtil: int
    encUtil: int = 0
    decUtil: int = 0


@dataclass(frozen=True, slots=True)
class c_nvmlProcessInfo_v3_t:  # pynvml hands out a friendly object with these names
    pid: int
    usedGpuMemory: int | None  # bytes; None where the driver cannot say
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class c_nvmlDeviceAttributes:
    multiprocessorCount: int
    sharedCopyEngineCount: int
    sharedDecoderCount: int
    sharedEncoderCount: int
    sharedJpegCount: int
    sharedOfaCount: int
    gpuInstanceSliceCount: int
    computeInstanceSliceCount: int
    memorySizeMB: int


@dataclass(frozen=True, slots=True)
class c_nvmlEventData_t:
    device: Any
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


STRUCTURES: tuple[type, ...] = (
    c_nvmlMemory_t, nvmlPciInfo_t, c_nvmlUtilization_t, c_nvmlProcessUtilizationSample_t,
    c_nvmlProcessInfo_v3_t, c_nvmlDeviceAttributes, c_nvmlEventData_t,
)

# ------------------------------------------------------------------------------ the scripted GPUs

_PROFILE = re.compile(r"(?:(\d)c\.)?(\d)g\.(\d+)gb")


@dataclass(slots=True)
class FakeMigInstance:
    """One MIG device: a compute instance in a GPU instance."""

    gpu_instance_id: int
    compute_instance_id: int
    gpu_slices: int
    compute_slices: int
    memory_mib: int
    uuid: str

    @classmethod
    def of_profile(cls, profile: str, gpu_instance_id: int, compute_instance_id: int = 0,
                   uuid: str = "") -> FakeMigInstance:
        """``"1g.10gb"`` or ``"1c.2g.20gb"``, with the memory a real instance of that profile reports
        (a little less than the name says: 96%)."""
        match = _PROFILE.fullmatch(profile)
        if match is None:
            raise ValueError(f"not a MIG profile: {profile!r}")
        gpu_slices = int(match.group(2))
        compute = int(match.group(1)) if match.group(1) else gpu_slices
        return cls(gpu_instance_id, compute_instance_id, gpu_slices, compute,
                   int(int(match.group(3)) * 1024 * 0.96),
                   uuid or f"MIG-{gpu_instance_id:08x}-{compute_instance_id:04x}-4000-8000-{gpu_slices:012x}")


@dataclass(slots=True)
class FakeLink:
    remote_bus_id: str
    remote_type: int  # NVML_NVLINK_DEVICE_TYPE_GPU / _SWITCH
    active: bool = True


@dataclass(slots=True)
class FakeGpu:
    """One scripted GPU. ``None`` for a counter means the GPU does not support it (NOT_SUPPORTED)."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    memory_mib: int = 81559
    minor: int = 0
    pci_bus_id: str = "00000000:18:00.0"
    mig_capable: bool = True
    mig_mode: int = 0
    mig_pending: int = 0
    mig_instances: list[FakeMigInstance] = field(default_factory=list)
    nvlink_count: int = 18  # links the GPU has (0: a PCIe card without NVLink)
    links: dict[int, FakeLink] = field(default_factory=dict)
    remote_type_supported: bool = True
    events_supported: bool = True
    lost: bool = False
    ecc_dbe_volatile: int | None = 0
    retired_sbe: list[int] | None = None  # page addresses (pre-Ampere GPUs; Ampere and later: None)
    retired_dbe: list[int] | None = None
    retired_pending: bool | None = None
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)  # corrected, uncorrected, pending, failure
    utilisation: tuple[int, int] | None = (0, 0)  # gpu %, memory %; None on a MIG-enabled GPU
    memory_used_mib: int = 0
    samples: list[c_nvmlProcessUtilizationSample_t] = field(default_factory=list)
    processes: list[c_nvmlProcessInfo_v3_t] = field(default_factory=list)
    failing: dict[str, int] = field(default_factory=dict)  # function name -> NVML error code


class _Handle:
    """A GPU's handle: equal to another handle of the same GPU (pynvml hands out a new pointer each
    call, to the same device)."""

    __slots__ = ("gpu",)

    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Handle) and other.gpu is self.gpu

    def __hash__(self) -> int:
        return id(self.gpu)


class _MigHandle(_Handle):
    __slots__ = ("instance",)

    def __init__(self, gpu: FakeGpu, instance: FakeMigInstance) -> None:
        super().__init__(gpu)
        self.instance = instance


class _EventSet:
    def __init__(self) -> None:
        self.registered: dict[int, int] = {}  # id(gpu) -> event types
        self.queue: list[c_nvmlEventData_t] = []
        self.freed = False


def _bus_id(index: int) -> str:
    return f"00000000:{0x18 + index * 0x10:02X}:00.0"


class FakeNvml:
    """Used in place of the ``pynvml`` module: ``NvmlGpuReader(FakeNvml.with_gpus(8))``."""

    NVML_SUCCESS = 0
    NVML_FEATURE_DISABLED = 0
    NVML_FEATURE_ENABLED = 1
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_NVLINK_MAX_LINKS = 36
    NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
    NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
    NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    nvmlEventTypeXidCriticalError = 0x0000000000000008

    NVMLError = NVMLError
    NVMLError_Uninitialized = ERROR_CLASSES["NVMLError_Uninitialized"]
    NVMLError_InvalidArgument = ERROR_CLASSES["NVMLError_InvalidArgument"]
    NVMLError_NotSupported = ERROR_CLASSES["NVMLError_NotSupported"]
    NVMLError_NoPermission = ERROR_CLASSES["NVMLError_NoPermission"]
    NVMLError_NotFound = ERROR_CLASSES["NVMLError_NotFound"]
    NVMLError_DriverNotLoaded = ERROR_CLASSES["NVMLError_DriverNotLoaded"]
    NVMLError_Timeout = ERROR_CLASSES["NVMLError_Timeout"]
    NVMLError_LibraryNotFound = ERROR_CLASSES["NVMLError_LibraryNotFound"]
    NVMLError_GpuIsLost = ERROR_CLASSES["NVMLError_GpuIsLost"]
    NVMLError_Unknown = ERROR_CLASSES["NVMLError_Unknown"]

    def __init__(self, gpus: Iterable[FakeGpu] = ()) -> None:
        self.gpus: list[FakeGpu] = list(gpus)
        self.init_error: int | None = None  # nvmlInit raises this code (12: library missing, 9: no driver)
        self.calls: Counter[str] = Counter()  # every NVML function called, by name
        self._initialised = 0
        self._enumerated: list[FakeGpu] = []  # the GPUs as of the last nvmlInit
        self._event_sets: list[_EventSet] = []
        self._wake = threading.Condition()
        self._global_failures: dict[str, int] = {}  # function name -> NVML error code, whatever the GPU

    @classmethod
    def with_gpus(cls, count: int, name: str = "NVIDIA H100 80GB HBM3", memory_mib: int = 81559,
                  nvlink_count: int = 18) -> FakeNvml:
        """``count`` GPUs like those of one 8-GPU server, without NVLink connections yet."""
        return cls(FakeGpu(uuid=f"GPU-{i:08x}-0000-4000-8000-{i:012x}", name=name, memory_mib=memory_mib,
                           minor=i, pci_bus_id=_bus_id(i), nvlink_count=nvlink_count) for i in range(count))

    # ------------------------------------------------------------------------------ scripting

    def gpu(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def add_gpu(self, gpu: FakeGpu | None = None) -> FakeGpu:
        """A GPU more (seen after the next ``nvmlInit``, as with NVML)."""
        index = len(self.gpus)
        made = gpu or FakeGpu(uuid=f"GPU-{index:08x}-0000-4000-8000-{index:012x}", minor=index,
                              pci_bus_id=_bus_id(index))
        self.gpus.append(made)
        return made

    def remove_gpu(self, index: int) -> FakeGpu:
        """The GPU is gone: not listed after the next ``nvmlInit``; its handles say it is lost."""
        gone = self.gpus.pop(index)
        gone.lost = True
        return gone

    def lose_gpu(self, index: int) -> None:
        """The GPU falls off the bus: every call on its handles raises ``NVMLError_GpuIsLost``; an
        Xid 79 is queued first, as the driver reports it."""
        self.queue_xid(index, 79)
        self.gpus[index].lost = True

    def queue_xid(self, index: int, xid: int, count: int = 1) -> None:
        """``count`` Xid events on the GPU (an Xid storm when many), for every event set that has the GPU
        registered for critical Xid events."""
        gpu = self.gpus[index]
        with self._wake:
            for events in self._event_sets:
                if events.registered.get(id(gpu), 0) & self.nvmlEventTypeXidCriticalError:
                    events.queue.extend(c_nvmlEventData_t(_Handle(gpu), self.nvmlEventTypeXidCriticalError, xid)
                                        for _ in range(count))
            self._wake.notify_all()

    def set_mig(self, index: int, profiles: Sequence[str] | None) -> None:
        """MIG reconfiguration: ``None`` turns MIG off; a list of profiles turns it on with those
        instances (one compute instance per GPU instance, GPU instance IDs from 1)."""
        gpu = self.gpus[index]
        if profiles is None:
            gpu.mig_mode = gpu.mig_pending = 0
            gpu.mig_instances = []
            gpu.utilisation = (0, 0)
            return
        gpu.mig_mode = gpu.mig_pending = 1
        gpu.mig_instances = [FakeMigInstance.of_profile(p, gi, 0, f"MIG-{index:04x}{gi:04x}-0000-4000-8000-{gi:012x}")
                             for gi, p in enumerate(profiles, start=1)]
        gpu.utilisation = None  # NVML gives no whole-GPU utilisation in MIG mode

    def connect(self, a: int, b: int, links: int = 1) -> None:
        """``links`` NVLinks between GPUs ``a`` and ``b``."""
        first, second = self.gpus[a], self.gpus[b]
        for _ in range(links):
            first.links[self._free_link(first)] = FakeLink(second.pci_bus_id, self.NVML_NVLINK_DEVICE_TYPE_GPU)
            second.links[self._free_link(second)] = FakeLink(first.pci_bus_id, self.NVML_NVLINK_DEVICE_TYPE_GPU)

    def nvswitch(self, indices: Iterable[int], switches: int = 4) -> None:
        """Every link of these GPUs goes to one of ``switches`` NVSwitches (an HGX board)."""
        switch_ids = itertools.cycle(f"00000000:{0x05 + s:02X}:00.0" for s in range(switches))
        for index in indices:
            gpu = self.gpus[index]
            for link in range(gpu.nvlink_count):
                gpu.links[link] = FakeLink(next(switch_ids), self.NVML_NVLINK_DEVICE_TYPE_SWITCH)

    def add_process(self, index: int, pid: int, sm_util: int, memory_mib: int, timestamp_us: int) -> None:
        """A process on the GPU: a utilisation sample at ``timestamp_us`` and its memory."""
        gpu = self.gpus[index]
        gpu.samples.append(c_nvmlProcessUtilizationSample_t(pid, timestamp_us, sm_util, 0))
        del gpu.samples[:-_SAMPLES_KEPT]  # the driver keeps a ring buffer of recent samples
        gpu.processes = [p for p in gpu.processes if p.pid != pid]
        gpu.processes.append(c_nvmlProcessInfo_v3_t(pid, memory_mib * MIB))

    def fail(self, function: str, code: int, index: int | None = None) -> None:
        """``function`` raises the error of ``code`` (on one GPU's handles, or everywhere)."""
        if function not in NVML_FUNCTIONS:
            raise KeyError(function)
        for gpu in self.gpus if index is None else [self.gpus[index]]:
            gpu.failing[function] = code
        if index is None:
            self._global_failures[function] = code

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"the fake NVML has no {name!r} (add it, with a contract test, if the reader needs it)")

    # ------------------------------------------------------------------------------ internals

    def _enter(self, function: str) -> None:
        self.calls[function] += 1
        code = self._global_failures.get(function)
        if code is not None:
            raise NVMLError(code)
        if not self._initialised:
            raise self.NVMLError_Uninitialized()

    def _gpu(self, function: str, handle: Any) -> FakeGpu:
        self._enter(function)
        if not isinstance(handle, _Handle):
            raise self.NVMLError_InvalidArgument()
        gpu = handle.gpu
        if gpu.lost:
            raise self.NVMLError_GpuIsLost()
        code = gpu.failing.get(function)
        if code is not None:
            raise NVMLError(code)
        return gpu

    def _whole(self, function: str, handle: Any) -> FakeGpu:
        if isinstance(handle, _MigHandle):
            self._enter(function)
            raise self.NVMLError_NotSupported()  # a whole-GPU call on a MIG device
        return self._gpu(function, handle)

    def _mig(self, function: str, handle: Any) -> FakeMigInstance:
        self._gpu(function, handle)
        if not isinstance(handle, _MigHandle):
            raise self.NVMLError_InvalidArgument()  # not a MIG device handle
        return handle.instance

    @staticmethod
    def _free_link(gpu: FakeGpu) -> int:
        for link in range(gpu.nvlink_count):
            if link not in gpu.links:
                return link
        raise ValueError(f"GPU {gpu.uuid} has no free NVLink (it has {gpu.nvlink_count})")

    def _link(self, function: str, handle: Any, link: int) -> tuple[FakeGpu, FakeLink | None]:
        gpu = self._whole(function, handle)
        if gpu.nvlink_count == 0:
            raise self.NVMLError_NotSupported()
        if not 0 <= link < gpu.nvlink_count:
            raise self.NVMLError_InvalidArgument()
        return gpu, gpu.links.get(link)

    # ------------------------------------------------------------------------------ pynvml's API

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        if not self._initialised:
            self._enumerated = list(self.gpus)  # a lost GPU stays listed; its handle says it is lost
        self._initialised += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self._initialised -= 1
        if not self._initialised:
            with self._wake:
                for events in self._event_sets:
                    events.freed = True
                self._event_sets.clear()
                self._wake.notify_all()

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self._enumerated)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self._enumerated):
            raise self.NVMLError_InvalidArgument()
        gpu = self._enumerated[index]
        if gpu.lost:
            raise self.NVMLError_GpuIsLost()
        code = gpu.failing.get("nvmlDeviceGetHandleByIndex")
        if code is not None:
            raise NVMLError(code)
        return _Handle(gpu)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        gpu = self._gpu("nvmlDeviceGetUUID", handle)
        return handle.instance.uuid if isinstance(handle, _MigHandle) else gpu.uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> c_nvmlMemory_t:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        total = gpu.memory_mib * MIB
        used = min(gpu.memory_used_mib * MIB, total)
        return c_nvmlMemory_t(total=total, free=total - used, used=used)

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        return self._whole("nvmlDeviceGetMinorNumber", handle).minor

    def nvmlDeviceGetPciInfo(self, handle: Any) -> nvmlPciInfo_t:
        return _pci_info(self._whole("nvmlDeviceGetPciInfo", handle).pci_bus_id)

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        gpu = self._whole("nvmlDeviceGetMigMode", device)
        if not gpu.mig_capable:
            raise self.NVMLError_NotSupported()
        return [gpu.mig_mode, gpu.mig_pending]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        gpu = self._whole("nvmlDeviceGetMaxMigDeviceCount", device)
        if not gpu.mig_capable:
            raise self.NVMLError_NotSupported()
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> _MigHandle:
        gpu = self._whole("nvmlDeviceGetMigDeviceHandleByIndex", device)
        if not gpu.mig_capable or not gpu.mig_mode:
            raise self.NVMLError_NotSupported()
        if not 0 <= index < 7:
            raise self.NVMLError_InvalidArgument()
        if index >= len(gpu.mig_instances):
            raise self.NVMLError_NotFound()
        return _MigHandle(gpu, gpu.mig_instances[index])

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        return self._mig("nvmlDeviceGetGpuInstanceId", device).gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        return self._mig("nvmlDeviceGetComputeInstanceId", device).compute_instance_id

    def nvmlDeviceGetAttributes(self, device: Any) -> c_nvmlDeviceAttributes:
        instance = self._mig("nvmlDeviceGetAttributes", device)
        return c_nvmlDeviceAttributes(
            multiprocessorCount=16 * instance.compute_slices, sharedCopyEngineCount=instance.gpu_slices,
            sharedDecoderCount=instance.gpu_slices, sharedEncoderCount=0, sharedJpegCount=0, sharedOfaCount=0,
            gpuInstanceSliceCount=instance.gpu_slices, computeInstanceSliceCount=instance.compute_slices,
            memorySizeMB=instance.memory_mib)

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        _gpu, connected = self._link("nvmlDeviceGetNvLinkState", device, link)
        return int(connected is not None and connected.active)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int) -> nvmlPciInfo_t:
        _gpu, connected = self._link("nvmlDeviceGetNvLinkRemotePciInfo", device, link)
        if connected is None:
            raise self.NVMLError_NotSupported()
        return _pci_info(connected.remote_bus_id)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        gpu, connected = self._link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        if not gpu.remote_type_supported:
            raise self.NVMLError_NotSupported()
        return self.NVML_NVLINK_DEVICE_TYPE_UNKNOWN if connected is None else connected.remote_type

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        gpu = self._whole("nvmlDeviceGetTotalEccErrors", handle)
        if gpu.ecc_dbe_volatile is None:
            raise self.NVMLError_NotSupported()
        if errorType not in (0, 1) or counterType not in (0, 1):
            raise self.NVMLError_InvalidArgument()
        return gpu.ecc_dbe_volatile if errorType == self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else 0

    def nvmlDeviceGetRetiredPages(self, device: Any, sourceFilter: int) -> list[int]:
        gpu = self._whole("nvmlDeviceGetRetiredPages", device)
        if sourceFilter not in (0, 1):
            raise self.NVMLError_InvalidArgument()
        pages = gpu.retired_sbe if sourceFilter == 0 else gpu.retired_dbe
        if pages is None:
            raise self.NVMLError_NotSupported()
        return list(pages)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any) -> int:
        gpu = self._whole("nvmlDeviceGetRetiredPagesPendingStatus", device)
        if gpu.retired_pending is None:
            raise self.NVMLError_NotSupported()
        return int(gpu.retired_pending)

    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]:
        gpu = self._whole("nvmlDeviceGetRemappedRows", device)
        if gpu.remapped_rows is None:
            raise self.NVMLError_NotSupported()
        return gpu.remapped_rows

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> c_nvmlUtilization_t:
        gpu = self._whole("nvmlDeviceGetUtilizationRates", handle)
        if gpu.utilisation is None:
            raise self.NVMLError_NotSupported()
        return c_nvmlUtilization_t(*gpu.utilisation)

    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int
                                        ) -> list[c_nvmlProcessUtilizationSample_t]:
        gpu = self._whole("nvmlDeviceGetProcessUtilization", handle)
        if gpu.mig_mode:
            raise self.NVMLError_NotSupported()
        newer = [s for s in gpu.samples if s.timeStamp > timeStamp]
        if not newer:
            raise self.NVMLError_NotFound()  # no sample since timeStamp
        return newer

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[c_nvmlProcessInfo_v3_t]:
        return list(self._whole("nvmlDeviceGetComputeRunningProcesses", handle).processes)

    def nvmlEventSetCreate(self) -> _EventSet:
        self._enter("nvmlEventSetCreate")
        events = _EventSet()
        with self._wake:
            self._event_sets.append(events)
        return events

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        gpu = self._whole("nvmlDeviceRegisterEvents", handle)
        if not gpu.events_supported:
            raise self.NVMLError_NotSupported()
        if not isinstance(eventSet, _EventSet) or eventSet.freed:
            raise self.NVMLError_InvalidArgument()
        with self._wake:
            eventSet.registered[id(gpu)] = eventSet.registered.get(id(gpu), 0) | eventTypes

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> c_nvmlEventData_t:
        self._enter("nvmlEventSetWait")
        if not isinstance(eventSet, _EventSet):
            raise self.NVMLError_InvalidArgument()
        with self._wake:
            if not eventSet.queue and timeoutms > 0 and not eventSet.freed:
                self._wake.wait_for(lambda: bool(eventSet.queue) or eventSet.freed, timeoutms / 1000)
            if eventSet.freed:
                raise self.NVMLError_Uninitialized()
            if not eventSet.queue:
                raise self.NVMLError_Timeout()
            return eventSet.queue.pop(0)

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        self._enter("nvmlEventSetFree")
        if not isinstance(eventSet, _EventSet):
            raise self.NVMLError_InvalidArgument()
        with self._wake:
            eventSet.freed = True
            if eventSet in self._event_sets:
                self._event_sets.remove(eventSet)
            self._wake.notify_all()


def _pci_info(bus_id: str) -> nvmlPciInfo_t:
    domain, bus, rest = bus_id.split(":")
    device = rest.split(".")[0]
    return nvmlPciInfo_t(busIdLegacy=f"{int(domain, 16):04X}:{bus}:{rest}", domain=int(domain, 16),
                         bus=int(bus, 16), device=int(device, 16), pciDeviceId=0x233010DE,
                         pciSubSystemId=0x16C110DE, busId=bus_id)
