"""One contract for every GpuReader: the fake of the tests and, where a driver and a GPU are present,
the NVML reader (skipped otherwise: this machine and CI have no GPU)."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.agent.gpus import GpuReader, GpuReaderError
from gpufleet.agent.gpus.nvml import NvmlGpuReader, open_nvml
from gpufleet.testing import FakeGpuReader, fake_gpus


def _nvml_reader() -> GpuReader:
    pytest.importorskip("pynvml")
    try:
        reader = open_nvml()
    except GpuReaderError as err:
        pytest.skip(f"no NVML here: {err}")
    if not reader.read():
        reader.close()
        pytest.skip("NVML sees no GPU")
    return reader


@pytest.fixture(params=["fake", "nvml"])
def reader(request: pytest.FixtureRequest) -> Iterator[GpuReader]:
    made: GpuReader = FakeGpuReader(fake_gpus(4)) if request.param == "fake" else _nvml_reader()
    yield made
    made.close()


def test_a_reader_lists_the_gpus_in_index_order_with_their_identity(reader: GpuReader) -> None:
    gpus = reader.read()
    assert gpus
    assert [gpu.index for gpu in gpus] == list(range(len(gpus)))
    assert len({gpu.uuid for gpu in gpus}) == len(gpus)
    for gpu in gpus:
        assert gpu.uuid.startswith("GPU-") and len(gpu.uuid) <= 63  # a device plugin's device ID
        assert gpu.product
        assert gpu.memory_mib > 0
        assert gpu.minor >= 0
        assert isinstance(gpu.mig_enabled, bool) and isinstance(gpu.healthy, bool)
    assert reader.read() == gpus  # nothing changed: the same answer


@pytest.mark.asyncio
async def test_changed_waits_while_nothing_changes(reader: GpuReader) -> None:
    waiting = asyncio.ensure_future(reader.changed())
    for _ in range(10):
        await asyncio.sleep(0)
    assert not waiting.done()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


@pytest.mark.asyncio
async def test_the_fake_reports_a_health_change() -> None:
    reader = FakeGpuReader(fake_gpus(2))
    waiting = asyncio.ensure_future(reader.changed())
    await asyncio.sleep(0)
    reader.set_healthy(reader.read()[1].uuid, False)
    await asyncio.wait_for(waiting, 10)
    assert [gpu.healthy for gpu in reader.read()] == [True, False]


# ------------------------------------------------------------------------ the NVML adapter's own rules


class _NVMLError(Exception):
    pass


class _Timeout(_NVMLError):
    pass


def _fake_pynvml(events: list[Any]) -> Any:
    """Enough of pynvml for two GPUs, and Xid events handed out in order (then timeouts)."""

    def wait(_set: Any, _ms: int) -> Any:
        if not events:
            raise _Timeout()
        return events.pop(0)

    def mig_mode(handle: int) -> tuple[int, int]:
        if handle == 0:
            raise _NVMLError("Not Supported")
        return (1, 1)

    return types.SimpleNamespace(
        NVMLError=_NVMLError, NVMLError_Timeout=_Timeout, NVML_DEVICE_MIG_ENABLE=1,
        nvmlEventTypeXidCriticalError=8,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetName=lambda h: "NVIDIA A100-SXM4-80GB",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=81920 * 1024 * 1024),
        nvmlDeviceGetMinorNumber=lambda h: 10 + h,
        nvmlDeviceGetMigMode=mig_mode,
        nvmlEventSetCreate=lambda: "set",
        nvmlDeviceRegisterEvents=lambda h, kind, s: None,
        nvmlEventSetWait=wait,
        nvmlEventSetFree=lambda s: None,
        nvmlShutdown=lambda: None,
    )


@pytest.mark.asyncio
async def test_nvml_marks_a_gpu_unhealthy_on_a_critical_xid_but_not_on_an_application_one() -> None:
    events = [types.SimpleNamespace(device=1, eventType=8, eventData=13),  # application: ignored
              types.SimpleNamespace(device=1, eventType=8, eventData=79)]  # fallen off the bus
    reader = NvmlGpuReader(_fake_pynvml(events))
    assert [(g.uuid, g.minor, g.memory_mib, g.mig_enabled, g.healthy) for g in reader.read()] == [
        ("GPU-0", 10, 81920, False, True), ("GPU-1", 11, 81920, True, True)]
    await asyncio.wait_for(reader.changed(), 10)
    assert [g.healthy for g in reader.read()] == [True, False]
    reader.close()


def test_without_pynvml_the_reader_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)
    with pytest.raises(GpuReaderError) as info:
        open_nvml()
    assert str(info.value) == ("NVML is not available: the Python module pynvml is missing "
                               "(install gpufleet with the agent extra: pip install 'gpufleet[agent]')")
