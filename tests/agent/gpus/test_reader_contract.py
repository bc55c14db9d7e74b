"""One contract for every GpuReader: the fake of the tests, the NVML reader over the fake NVML and,
where a driver and a GPU are present, the NVML reader over the real NVML (skipped otherwise: this
machine and CI have no GPU)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from gpufleet.agent.gpus import GpuReader, GpuReaderError
from gpufleet.agent.gpus.nvml import open_nvml
from gpufleet.testing import FakeGpuReader, fake_gpus
from gpufleet.testing.fake_nvml import FakeNvml


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


def _made(kind: str) -> GpuReader:
    if kind == "fake":
        return FakeGpuReader(fake_gpus(4))
    if kind == "nvml-fake":
        nvml = FakeNvml.with_gpus(4)
        nvml.connect(0, 1)
        return open_nvml(nvml)
    return _nvml_reader()


@pytest.fixture(params=["fake", "nvml-fake", "nvml"])
def reader(request: pytest.FixtureRequest) -> Iterator[GpuReader]:
    made = _made(request.param)
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
        assert gpu.index not in gpu.nvlink_peers
        assert all(0 <= peer < len(gpus) for peer in gpu.nvlink_peers)
        assert gpu.mig_enabled or not gpu.mig_instances
    assert reader.read() == gpus  # nothing changed: the same answer


def test_health_gives_one_reading_per_gpu_in_index_order(reader: GpuReader) -> None:
    gpus = reader.read()
    readings = reader.health()
    assert [(r.index, r.uuid) for r in readings] == [(g.index, g.uuid) for g in gpus]
    for reading in readings:
        assert not reading.lost and reading.error is None  # healthy GPUs here
        for counter in (reading.ecc_dbe_volatile, reading.retired_pages_sbe, reading.retired_pages_dbe):
            assert counter is None or counter >= 0


def test_xid_events_return_at_once_when_none_came(reader: GpuReader) -> None:
    assert reader.xid_events() == ()
    assert reader.xid_events() == ()


def test_utilisation_names_known_gpus_with_their_memory(reader: GpuReader) -> None:
    gpus = {gpu.index: gpu for gpu in reader.read()}
    per_gpu, per_process = reader.utilisation()
    assert per_gpu  # whole GPUs, not in MIG mode, report their utilisation
    for reading in per_gpu:
        assert gpus[reading.index].uuid == reading.uuid
        assert 0.0 <= reading.gpu_util_percent <= 100.0
        assert 0 <= reading.memory_used_mib <= reading.memory_total_mib == gpus[reading.index].memory_mib
    for process in per_process:
        assert gpus[process.index].uuid == process.uuid and process.pid > 0


@pytest.mark.asyncio
async def test_changed_waits_while_nothing_changes(reader: GpuReader) -> None:
    waiting = asyncio.ensure_future(reader.changed())
    for _ in range(10):
        await asyncio.sleep(0)
    assert not waiting.done()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    reader.close()  # ends NVML's wait in its thread before the event loop closes (closing twice is harmless)


@pytest.mark.asyncio
async def test_the_fake_reports_a_health_change() -> None:
    reader = FakeGpuReader(fake_gpus(2))
    waiting = asyncio.ensure_future(reader.changed())
    await asyncio.sleep(0)
    reader.set_healthy(reader.read()[1].uuid, False)
    await asyncio.wait_for(waiting, 10)
    assert [gpu.healthy for gpu in reader.read()] == [True, False]


@pytest.mark.asyncio
async def test_the_nvml_reader_reports_a_health_change_on_a_critical_xid() -> None:
    nvml = FakeNvml.with_gpus(2)
    reader = open_nvml(nvml)
    waiting = asyncio.ensure_future(reader.changed())
    await asyncio.sleep(0)
    nvml.queue_xid(1, 79)
    await asyncio.wait_for(waiting, 10)
    assert [gpu.healthy for gpu in reader.read()] == [True, False]
    reader.close()


def test_without_pynvml_the_reader_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)
    with pytest.raises(GpuReaderError) as info:
        open_nvml()
    assert str(info.value) == ("NVML is not available: the Python module pynvml is missing "
                               "(install gpufleet with the agent extra: pip install 'gpufleet[agent]')")
