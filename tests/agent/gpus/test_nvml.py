"""The NVML reader's own rules, on the fake NVML: discovery (MIG, NVLink, NVSwitch), the health
counters, Xid events, utilisation, and bad answers that never crash it."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.agent.gpus import GpuHealthReading, GpuReaderError, ProcessUtilisation, XidEvent
from gpufleet.agent.gpus.nvml import NvmlGpuReader, mig_profile_name, open_nvml
from gpufleet.testing.fake_nvml import FakeNvml, NVMLError

GPU_IS_LOST, NOT_SUPPORTED, UNKNOWN = 15, 3, 999

# ------------------------------------------------------------------------------------ discovery


def test_discovery_reads_identity_product_memory_and_pci_bus() -> None:
    nvml = FakeNvml.with_gpus(2, name="NVIDIA A100-SXM4-80GB", memory_mib=81920)
    gpu = open_nvml(nvml).read()[1]
    assert (gpu.uuid, gpu.product, gpu.memory_mib, gpu.minor, gpu.pci_bus_id, gpu.healthy) == (
        nvml.gpu(1).uuid, "NVIDIA A100-SXM4-80GB", 81920, 1, "00000000:28:00.0", True)


@pytest.mark.parametrize(("slices", "compute", "memory", "total", "name"), [
    (1, 1, 9856, 81559, "1g.10gb"),  # H100 80GB HBM3
    (3, 3, 40192, 81559, "3g.40gb"),
    (7, 7, 80384, 81559, "7g.80gb"),
    (1, 1, 4864, 40960, "1g.5gb"),  # A100 40GB
    (3, 3, 19968, 40960, "3g.20gb"),
    (4, 4, 19968, 40960, "4g.20gb"),
    (7, 7, 40192, 40960, "7g.40gb"),
    (2, 1, 19968, 81920, "1c.2g.20gb"),  # a compute instance smaller than its GPU instance
])
def test_mig_profiles_are_named_as_nvidias_device_plugin_names_them(
        slices: int, compute: int, memory: int, total: int, name: str) -> None:
    assert mig_profile_name(slices, compute, memory, total) == name


def test_mig_mode_and_instances_follow_a_reconfiguration() -> None:
    nvml = FakeNvml.with_gpus(2)
    reader = open_nvml(nvml)
    assert not reader.read()[0].mig_enabled
    nvml.set_mig(0, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])
    gpu = reader.read()[0]
    assert gpu.mig_enabled
    assert [(m.gpu_instance_id, m.profile) for m in gpu.mig_instances] == [
        (1, "3g.40gb"), (2, "2g.20gb"), (3, "1g.10gb"), (4, "1g.10gb")]
    assert all(m.uuid.startswith("MIG-") for m in gpu.mig_instances)
    nvml.set_mig(0, ["7g.80gb"])
    assert [m.profile for m in reader.read()[0].mig_instances] == ["7g.80gb"]
    nvml.set_mig(0, None)
    assert (reader.read()[0].mig_enabled, reader.read()[0].mig_instances) == (False, ())


def test_a_gpu_without_mig_is_not_in_mig_mode() -> None:
    nvml = FakeNvml.with_gpus(1)
    nvml.gpu(0).mig_capable = False
    assert not open_nvml(nvml).read()[0].mig_enabled


def test_nvlink_pairs_become_peers_on_both_ends() -> None:
    nvml = FakeNvml.with_gpus(4, nvlink_count=12)
    nvml.connect(0, 1, links=4)
    nvml.connect(2, 3, links=2)
    nvml.connect(1, 2)
    gpus = open_nvml(nvml).read()
    assert [sorted(g.nvlink_peers) for g in gpus] == [[1], [0, 2], [1, 3], [2]]
    assert not any(g.nvswitch for g in gpus)


def test_an_nvswitch_system_marks_every_switched_gpu() -> None:
    nvml = FakeNvml.with_gpus(8)
    nvml.nvswitch(range(8))
    gpus = open_nvml(nvml).read()
    assert all(g.nvswitch and not g.nvlink_peers for g in gpus)


def test_an_inactive_link_or_a_gpu_without_nvlink_gives_no_peer() -> None:
    nvml = FakeNvml.with_gpus(3)
    nvml.connect(0, 1)
    nvml.gpu(0).links[0].active = False
    nvml.gpu(1).links[0].active = False
    nvml.gpu(2).nvlink_count = 0  # a PCIe card
    assert [g.nvlink_peers for g in open_nvml(nvml).read()] == [frozenset()] * 3


def test_without_the_remote_device_type_a_gpu_peer_is_found_by_its_pci_bus() -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.connect(0, 1)
    for gpu in nvml.gpus:
        gpu.remote_type_supported = False  # an older driver
    assert [sorted(g.nvlink_peers) for g in open_nvml(nvml).read()] == [[1], [0]]


def test_a_gpu_whose_name_cannot_be_read_is_unhealthy_but_listed() -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.fail("nvmlDeviceGetName", UNKNOWN, index=1)
    assert [g.healthy for g in open_nvml(nvml).read()] == [True, False]


def test_a_gpu_lost_before_the_reader_opens_is_listed_unhealthy_and_lost() -> None:
    nvml = FakeNvml.with_gpus(3)
    nvml.gpu(1).lost = True
    reader = open_nvml(nvml)
    gpus = reader.read()
    assert [g.healthy for g in gpus] == [True, False, True]
    assert gpus[1].uuid == "GPU-unreadable-1" and len({g.uuid for g in gpus}) == 3
    assert reader.health()[1] == GpuHealthReading(index=1, uuid="GPU-unreadable-1", lost=True)


def test_a_gpu_that_falls_off_the_bus_keeps_its_identity_and_turns_unhealthy() -> None:
    nvml = FakeNvml.with_gpus(2)
    reader = open_nvml(nvml)
    before = reader.read()[1]
    nvml.lose_gpu(1)
    after = reader.read()[1]
    assert (after.uuid, after.product, after.healthy) == (before.uuid, before.product, False)
    assert reader.health()[1] == GpuHealthReading(index=1, uuid=before.uuid, lost=True)


def test_the_gpu_list_itself_failing_is_one_line() -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.fail("nvmlDeviceGetCount", UNKNOWN)
    with pytest.raises(GpuReaderError, match=r"^NVML cannot list the GPUs: Unknown Error$"):
        open_nvml(nvml)
    assert nvml.calls["nvmlShutdown"] == 1  # NVML is not left initialised


@pytest.mark.parametrize(("code", "line"), [
    (12, "NVML is not available: NVML Shared Library Not Found (is the NVIDIA driver installed on this node?)"),
    (9, "NVML is not available: Driver Not Loaded (is the NVIDIA driver installed on this node?)"),
])
def test_nvml_missing_or_without_a_driver_is_one_line(code: int, line: str) -> None:
    nvml = FakeNvml.with_gpus(1)
    nvml.init_error = code
    with pytest.raises(GpuReaderError) as info:
        open_nvml(nvml)
    assert str(info.value) == line


def test_a_closed_reader_says_so() -> None:
    reader = open_nvml(FakeNvml.with_gpus(1))
    reader.close()
    reader.close()  # twice is harmless
    with pytest.raises(GpuReaderError, match="closed"):
        reader.read()
    with pytest.raises(GpuReaderError, match="closed"):
        reader.utilisation()
    assert reader.xid_events() == ()


# ------------------------------------------------------------------------------------ health


def test_health_reads_ecc_retired_pages_and_row_remapping() -> None:
    nvml = FakeNvml.with_gpus(3)
    nvml.gpu(0).ecc_dbe_volatile = 2
    nvml.gpu(0).remapped_rows = (5, 1, 1, 0)
    nvml.gpu(1).remapped_rows = (0, 3, 0, 1)
    old = nvml.gpu(2)  # a V100: pages retired, no row remapping
    old.retired_sbe, old.retired_dbe, old.retired_pending, old.remapped_rows = [0x1000, 0x2000], [0x3000], True, None
    first, second, third = open_nvml(nvml).health()
    assert (first.ecc_dbe_volatile, first.row_remap_pending, first.row_remap_failure) == (2, True, False)
    assert (first.retired_pages_sbe, first.retired_pages_dbe, first.retired_pages_pending) == (None, None, None)
    assert (second.row_remap_failure, second.row_remap_pending) == (True, False)
    assert (third.retired_pages_sbe, third.retired_pages_dbe, third.retired_pages_pending) == (2, 1, True)
    assert (third.row_remap_failure, third.row_remap_pending) == (None, None)
    assert not any(r.error or r.lost for r in (first, second, third))


def test_a_counter_the_gpu_does_not_have_is_none() -> None:
    nvml = FakeNvml.with_gpus(1)
    nvml.gpu(0).ecc_dbe_volatile = None  # ECC off: NOT_SUPPORTED
    reading = open_nvml(nvml).health()[0]
    assert reading.ecc_dbe_volatile is None and reading.error is None


def test_a_failing_counter_names_the_call_and_keeps_the_rest() -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.fail("nvmlDeviceGetRemappedRows", UNKNOWN, index=0)
    reading, other = open_nvml(nvml).health()
    assert reading.error == "nvmlDeviceGetRemappedRows: Unknown Error"
    assert reading.ecc_dbe_volatile == 0 and reading.row_remap_failure is None and not reading.lost
    assert other.error is None


# ------------------------------------------------------------------------------------ Xid events


def test_every_xid_is_reported_in_order_and_only_once() -> None:
    nvml = FakeNvml.with_gpus(4)
    reader = open_nvml(nvml)
    nvml.queue_xid(2, 13)
    nvml.queue_xid(0, 48)
    nvml.queue_xid(3, 94, count=2)
    uuids = [g.uuid for g in reader.read()]
    assert reader.xid_events() == (XidEvent(2, uuids[2], 13), XidEvent(0, uuids[0], 48),
                                   XidEvent(3, uuids[3], 94), XidEvent(3, uuids[3], 94))
    assert reader.xid_events() == ()


def test_an_xid_storm_is_drained_without_blocking_and_marks_the_gpu_once() -> None:
    nvml = FakeNvml.with_gpus(2)
    reader = open_nvml(nvml)
    nvml.queue_xid(1, 31, count=500)  # an application's page faults: reported, GPU stays healthy
    nvml.queue_xid(1, 119, count=500)  # GSP errors: the GPU turns unhealthy
    events = reader.xid_events()
    assert len(events) == 1000 and {e.xid for e in events} == {31, 119}
    assert [g.healthy for g in reader.read()] == [True, False]


def test_an_xid_storm_nobody_reads_is_bounded() -> None:
    nvml = FakeNvml.with_gpus(1)
    reader = open_nvml(nvml)
    for _ in range(2):
        nvml.queue_xid(0, 13, count=3000)
        reader._drain()  # what changed() does for the device plugin, which never asks for the events
    assert len(reader.xid_events()) == 4096  # the newest


def test_a_lost_gpu_reports_xid_79() -> None:
    nvml = FakeNvml.with_gpus(2)
    reader = open_nvml(nvml)
    nvml.lose_gpu(0)
    assert [e.xid for e in reader.xid_events()] == [79]
    assert not reader.read()[0].healthy


def test_a_gpu_without_event_support_still_reads() -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.gpu(0).events_supported = False
    reader = open_nvml(nvml)
    nvml.queue_xid(0, 79)
    nvml.queue_xid(1, 79)
    assert [e.index for e in reader.xid_events()] == [1]


@pytest.mark.asyncio
async def test_nvml_marks_a_gpu_unhealthy_on_a_critical_xid_but_not_on_an_application_one() -> None:
    nvml = FakeNvml.with_gpus(2)
    reader = open_nvml(nvml)
    nvml.queue_xid(1, 13)  # application: ignored
    nvml.queue_xid(1, 79)  # fallen off the bus
    await asyncio.wait_for(reader.changed(), 10)
    assert [g.healthy for g in reader.read()] == [True, False]
    assert [e.xid for e in reader.xid_events()] == [13, 79]  # both reported all the same
    reader.close()


@pytest.mark.asyncio
async def test_changed_sees_an_xid_that_xid_events_took_first() -> None:
    nvml = FakeNvml.with_gpus(2)
    reader = open_nvml(nvml)
    nvml.queue_xid(0, 48)
    assert [e.xid for e in reader.xid_events()] == [48]
    await asyncio.wait_for(reader.changed(), 10)
    reader.close()


@pytest.mark.asyncio
async def test_a_failing_event_wait_does_not_spin() -> None:
    nvml = FakeNvml.with_gpus(1)
    nvml.nvmlInit()  # NvmlGpuReader is handed an initialised NVML
    reader = NvmlGpuReader(nvml, retry_wait_s=60.0)
    nvml.fail("nvmlEventSetWait", UNKNOWN)
    waiting = asyncio.ensure_future(reader.changed())
    for _ in range(50):
        await asyncio.sleep(0)
    assert not waiting.done()
    assert nvml.calls["nvmlEventSetWait"] <= 1  # one failed wait, then a pause (that close() ends)
    waiting.cancel()
    reader.close()


# ------------------------------------------------------------------------------------ utilisation


def test_utilisation_per_gpu_and_per_process_with_the_last_sample_kept() -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.gpu(0).utilisation = (87, 40)
    nvml.gpu(0).memory_used_mib = 30000
    reader = open_nvml(nvml)
    nvml.add_process(0, pid=4242, sm_util=80, memory_mib=20000, timestamp_us=1_000)
    nvml.add_process(0, pid=4343, sm_util=7, memory_mib=10000, timestamp_us=1_500)
    gpus, processes = reader.utilisation()
    assert (gpus[0].gpu_util_percent, gpus[0].memory_used_mib, gpus[0].memory_total_mib) == (87.0, 30000, 81559)
    uuid = gpus[0].uuid
    assert processes == (ProcessUtilisation(0, uuid, 4242, 80.0, 20000), ProcessUtilisation(0, uuid, 4343, 7.0, 10000))
    nvml.add_process(0, pid=4242, sm_util=95, memory_mib=20000, timestamp_us=2_000)
    _gpus, processes = reader.utilisation()  # only samples after 1_500: 4343 has none, but holds memory
    assert processes == (ProcessUtilisation(0, uuid, 4242, 95.0, 20000), ProcessUtilisation(0, uuid, 4343, 0.0, 10000))
    assert nvml.calls["nvmlDeviceGetProcessUtilization"] == 4


def test_no_samples_and_no_processes_is_empty() -> None:
    _gpus, processes = open_nvml(FakeNvml.with_gpus(2)).utilisation()
    assert processes == ()


def test_a_mig_gpu_and_a_lost_gpu_are_left_out_of_the_gpu_utilisation() -> None:
    nvml = FakeNvml.with_gpus(3)
    nvml.set_mig(0, ["7g.80gb"])
    reader = open_nvml(nvml)
    nvml.lose_gpu(2)
    gpus, _processes = reader.utilisation()
    assert [g.index for g in gpus] == [1]


def test_utilisation_failing_on_every_gpu_is_one_line() -> None:
    nvml = FakeNvml.with_gpus(2)
    reader = open_nvml(nvml)
    nvml.fail("nvmlDeviceGetUtilizationRates", UNKNOWN)
    with pytest.raises(GpuReaderError, match=r"^NVML cannot read the GPUs' utilisation: GPU 0: Unknown Error$"):
        reader.utilisation()


def test_nvml_errors_are_built_from_their_code_as_pynvml_builds_them() -> None:
    assert type(NVMLError(GPU_IS_LOST)) is FakeNvml.NVMLError_GpuIsLost
    assert FakeNvml.NVMLError_NotSupported().value == NOT_SUPPORTED
    assert str(NVMLError(12345)) == "NVML Error with code 12345"



def test_an_unreadable_gpu_is_one_log_line_and_an_unknown_health(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml.with_gpus(2)
    nvml.fail("nvmlDeviceGetUUID", UNKNOWN, index=1)
    with caplog.at_level("WARNING", logger="gpufleet.agent.gpus.nvml"):
        reader = open_nvml(nvml)
    assert caplog.messages == [
        "GPU 1 cannot be read (nvmlDeviceGetUUID: Unknown Error): listed as GPU-unreadable-1, unhealthy"]
    assert reader.health()[1] == GpuHealthReading(index=1, uuid="GPU-unreadable-1",
                                                  error="nvmlDeviceGetUUID: Unknown Error")
    assert [g.healthy for g in reader.read()] == [True, False]


def test_an_xid_for_a_device_the_reader_does_not_know_is_logged_and_dropped(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml.with_gpus(1)
    reader = open_nvml(nvml)
    # NVML only reports events of registered devices: forget the one GPU, to reach the guard
    reader._by_key.clear()
    reader._by_uuid.clear()
    nvml.queue_xid(0, 79)
    with caplog.at_level("WARNING", logger="gpufleet.agent.gpus.nvml"):
        assert reader.xid_events() == ()
    assert caplog.messages == ["NVML reported Xid 79 for a GPU this reader did not enumerate; ignored"]


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 8).flatmap(lambda n: st.tuples(
    st.just(n), st.frozensets(st.integers(0, n - 1)),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=12))))
def test_nvlink_peers_are_the_symmetric_closure_of_the_links_and_switches_are_flagged(
        case: tuple[int, frozenset[int], list[tuple[int, int]]]) -> None:
    count, switched, pairs = case
    nvml = FakeNvml.with_gpus(count)
    nvml.nvswitch(switched)
    wired = [(a, b) for a, b in pairs if a != b and a not in switched and b not in switched]
    for a, b in wired:
        nvml.connect(a, b)
    expected: dict[int, set[int]] = {i: set() for i in range(count)}
    for a, b in wired:
        expected[a].add(b)
        expected[b].add(a)
    gpus = open_nvml(nvml).read()
    assert [set(g.nvlink_peers) for g in gpus] == [expected[i] for i in range(count)]
    assert {g.index for g in gpus if g.nvswitch} == switched


def test_gpus_added_or_removed_are_seen_when_nvml_is_opened_again() -> None:
    nvml = FakeNvml.with_gpus(2)
    reader = open_nvml(nvml)
    added = nvml.add_gpu()
    removed = nvml.remove_gpu(0)
    gpus = reader.read()  # NVML enumerates at init: the same two GPUs, the removed one lost
    assert [(g.uuid, g.healthy) for g in gpus] == [(removed.uuid, False), (nvml.gpu(0).uuid, True)]
    reader.close()
    again = open_nvml(nvml).read()
    assert [g.uuid for g in again] == [nvml.gpu(0).uuid, added.uuid]
