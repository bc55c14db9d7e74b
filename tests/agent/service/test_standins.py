"""The stand-in health rules and discovery (until gpufleet.agent.health and .discovery are wired in)."""

from __future__ import annotations

import dataclasses

import pytest

from gpufleet.agent.gpus import GpuHealthReading, XidEvent
from gpufleet.agent.service import BasicHealthRules, HealthPolicy, basic_describe, parse_index_list
from gpufleet.testing.fake_gpus import fake_gpus

RULES = BasicHealthRules(HealthPolicy(clean_period_s=100, retired_pages_limit=10))


def reading(index: int, **fields: object) -> GpuHealthReading:
    return GpuHealthReading(index=index, uuid=f"GPU-{index}", **fields)  # type: ignore[arg-type]


def test_a_lasting_state_holds_the_gpu_without_changing_the_state_each_poll() -> None:
    state, changes = RULES.step({}, [reading(0, lost=True)], [], frozenset(), now=0)
    assert [c.reason for c in changes] == ["GPUUnhealthy"] and RULES.unhealthy_indices(state) == {0}
    for t in range(1, 300, 50):
        again, changes = RULES.step(state, [reading(0, lost=True)], [], frozenset(), now=t)
        assert changes == () and RULES.save(again) == RULES.save(state)  # nothing to write
    state, _ = RULES.step(state, [reading(0)], [], frozenset(), now=300)  # back on the bus: the period starts
    state, changes = RULES.step(state, [reading(0)], [], frozenset(), now=399)
    assert changes == ()
    state, changes = RULES.step(state, [reading(0)], [], frozenset(), now=400)
    assert [c.reason for c in changes] == ["GPUHealthy"]


def test_signals() -> None:
    readings = [reading(0, ecc_dbe_volatile=1), reading(1, row_remap_failure=True),
                reading(2, retired_pages_sbe=6, retired_pages_dbe=5), reading(3, error="nvmlDeviceGetUUID"),
                reading(4), reading(5)]
    events = [XidEvent(4, "GPU-4", 79), XidEvent(5, "GPU-5", 999)]  # 999: not a critical Xid
    state, _ = RULES.step({}, readings, events, frozenset(), now=0)
    assert RULES.unhealthy_indices(state) == {0, 1, 2, 4}
    assert state[3].status == "unknown"
    condition = RULES.condition(state)
    assert condition.status == "False" and "GPU 4 (GPU-4): Xid 79" in condition.message
    assert RULES.restore(RULES.save(state)) == state
    assert RULES.restore("not json") == {}


def test_uncordon_takes_the_current_counters_as_the_baseline() -> None:
    state, _ = RULES.step({}, [reading(0, ecc_dbe_volatile=2)], [], frozenset(), now=0)
    state, changes = RULES.step(state, [reading(0, ecc_dbe_volatile=2)], [], frozenset({0}), now=1)
    assert [c.reason for c in changes] == ["GPUHealthy"]
    state, changes = RULES.step(state, [reading(0, ecc_dbe_volatile=2)], [], frozenset(), now=2)
    assert changes == ()
    state, changes = RULES.step(state, [reading(0, ecc_dbe_volatile=3)], [], frozenset(), now=3)
    assert [c.reason for c in changes] == ["GPUUnhealthy"]


def test_discovery_labels_and_nvlink_domains() -> None:
    gpus = tuple(dataclasses.replace(g, nvlink_peers=frozenset({g.index ^ 1})) for g in fake_gpus(4))
    meta = basic_describe(gpus)
    assert meta.labels == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559",
                           "nvidia.com/gpu.count": "4"}
    assert meta.annotations == {"gpufleet.dev/nvlink-domains": "0-1;2-3"}
    switched = tuple(dataclasses.replace(g, nvswitch=True) for g in fake_gpus(8))
    assert basic_describe(switched).annotations == {"gpufleet.dev/nvlink-domains": "0-7"}
    assert basic_describe(fake_gpus(2)).annotations == {}


@pytest.mark.parametrize("text", ["", "x", "1,,2", "-1", "99999"])
def test_a_bad_uncordon_request_is_one_line(text: str) -> None:
    with pytest.raises(ValueError, match=r"gpufleet\.dev/gpu-uncordon: must be GPU indices"):
        parse_index_list(text)
