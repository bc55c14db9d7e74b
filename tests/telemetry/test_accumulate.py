"""Per-interval time-weighted means: properties (hypothesis) and worked examples."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.telemetry import PodKey, PodUsage, TelemetryPage, TimeWeightedMean, UsageAccumulator

POD = PodKey("ml", "train-0")

times = st.integers(min_value=0, max_value=1000).map(float)
values = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)
samples = st.lists(st.tuples(times, values), min_size=1, max_size=30)


def fold(points: list[tuple[float, float]], end: float) -> tuple[float | None, float]:
    mean = TimeWeightedMean()
    for at, value in sorted(points, key=lambda p: p[0]):  # time order; equal times keep the drawn order
        assert mean.add(at, value)
    return mean.cut(end)


@settings(max_examples=150)
@given(samples, st.integers(min_value=0, max_value=200))
def test_mean_is_bounded_by_the_samples(points: list[tuple[float, float]], extra: int) -> None:
    end = max(at for at, _ in points) + extra
    mean, weight = fold(points, end)
    assert mean is not None
    low, high = min(v for _, v in points), max(v for _, v in points)
    assert low - 1e-9 <= mean <= high + 1e-9
    assert weight == end - min(at for at, _ in points)


@settings(max_examples=150)
@given(samples, st.randoms(use_true_random=False), st.integers(min_value=0, max_value=50))
def test_order_of_equal_time_samples_does_not_matter(points: list[tuple[float, float]], rnd: object,
                                                    extra: int) -> None:
    end = max(at for at, _ in points) + extra
    shuffled = list(points)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    a, wa = fold(points, end)
    b, wb = fold(shuffled, end)
    assert wa == wb
    assert a == pytest.approx(b, rel=1e-9, abs=1e-9)


@settings(max_examples=150)
@given(samples, st.lists(st.integers(min_value=0, max_value=1200).map(float), max_size=5),
       st.integers(min_value=0, max_value=200))
def test_splitting_a_stretch_gives_the_same_mean(points: list[tuple[float, float]], cuts: list[float],
                                                extra: int) -> None:
    """Cutting at any times, samples interleaved with the cuts, the parts' means weighted by the time
    they cover give the whole's mean (a value at a cut's time belongs to the part after it)."""
    end = max([at for at, _ in points] + cuts) + extra
    whole, whole_weight = fold(points, end)
    mean = TimeWeightedMean()
    parts: list[tuple[float | None, float]] = []
    events = sorted([(at, 1, v) for at, v in points] + [(c, 0, 0.0) for c in cuts], key=lambda e: (e[0], e[1]))
    for at, kind, value in events:
        if kind == 0:
            parts.append(mean.cut(at))
        else:
            assert mean.add(at, value)
    parts.append(mean.cut(end))
    total = sum(w for _, w in parts)
    assert total == pytest.approx(whole_weight)
    if whole_weight > 0:
        combined = sum((m or 0.0) * w for m, w in parts) / total
        assert combined == pytest.approx(whole, rel=1e-9, abs=1e-9)


def test_older_samples_are_refused() -> None:
    mean = TimeWeightedMean()
    assert mean.add(10.0, 1.0)
    assert not mean.add(9.0, 50.0)
    assert mean.cut(20.0) == (1.0, 10.0)


def test_a_part_of_no_length_gives_its_instant_value() -> None:
    mean = TimeWeightedMean()
    mean.add(5.0, 2.0)
    mean.add(5.0, 4.0)
    assert mean.cut(5.0) == (3.0, 0.0)
    assert TimeWeightedMean().cut(5.0) == (None, 0.0)


def usage(at: float, util: float | None, sm: float | None = None, fb: float | None = None) -> PodUsage:
    return PodUsage(key=POD, at=at, gpus=("GPU-a", "GPU-b"), gpu_util_percent=util, sm_active=sm, fb_used_mib=fb)


def test_interval_means_of_a_pod() -> None:
    acc = UsageAccumulator()
    assert not acc.add(usage(0.0, 50.0))  # not open: ignored
    acc.open(POD, 100.0)
    assert not acc.add(usage(90.0, 10.0))  # before the interval
    assert acc.add(usage(130.0, 80.0, 0.5, 1000.0))  # 80 % for 60 s
    assert acc.add(usage(190.0, 20.0, None, 3000.0))  # 20 % for 120 s; no SM activity in this sample
    interval = acc.close(POD, 310.0)
    assert interval is not None and not acc.is_open(POD)
    assert (interval.start, interval.end, interval.covered_s, interval.samples) == (100.0, 310.0, 180.0, 2)
    assert interval.gpu_util_percent == pytest.approx((80 * 60 + 20 * 120) / 180)
    assert interval.sm_active == pytest.approx(0.5)  # held: the only SM sample
    assert interval.fb_used_mib == pytest.approx((1000 * 60 + 3000 * 120) / 180)
    assert interval.fb_used_mib_max == 3000.0
    assert interval.gpus == ("GPU-a", "GPU-b")
    assert acc.close(POD, 400.0) is None


def test_cut_carries_the_held_value_into_the_next_part() -> None:
    acc = UsageAccumulator()
    acc.open(POD, 0.0)
    acc.add(usage(0.0, 40.0))
    first = acc.cut(POD, 60.0)
    second = acc.close(POD, 120.0)
    assert first is not None and second is not None
    assert (first.gpu_util_percent, first.covered_s) == (40.0, 60.0)
    assert (second.start, second.gpu_util_percent, second.covered_s, second.samples) == (60.0, 40.0, 60.0, 0)


def test_a_pod_never_sampled_has_no_means() -> None:
    acc = UsageAccumulator()
    acc.open(POD, 0.0)
    interval = acc.close(POD, 600.0)
    assert interval is not None
    assert (interval.gpu_util_percent, interval.sm_active, interval.fb_used_mib, interval.covered_s) == (
        None, None, None, 0.0)


def test_pages_fold_only_open_pods() -> None:
    other = PodKey("ml", "other")
    acc = UsageAccumulator()
    acc.open(POD, 0.0)
    page = TelemetryPage(source="t", at=10.0, gpus_seen=3, pods={
        POD: usage(10.0, 5.0), other: PodUsage(other, 10.0, ("GPU-c",), 99.0, None, None)})
    assert acc.add_page(page) == 1
    interval = acc.close(POD, 20.0)
    assert interval is not None and interval.gpu_util_percent == 5.0 and not math.isnan(interval.covered_s)
