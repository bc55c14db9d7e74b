"""Per-interval usage: samples folded into time-weighted means, pure (plain dataclasses; every time is
an argument, from the caller's clock).

A sample's value holds from its time until the next sample's (sample and hold); samples of the same
time count as their mean, in any order. An interval's mean covers the time from its first sample (or
the value carried into it) to its end; time before the first sample is not covered (its length is
``covered_s`` less than ``end - start``). :meth:`UsageAccumulator.cut` ends one part of an interval
and carries the held value into the next, so the means of the parts, weighted by the time they
cover, give the mean of the whole. A gap in the samples (an exporter that did not answer) holds the
last value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.telemetry.model import PodKey, PodUsage, TelemetryPage

__all__ = ["IntervalUsage", "TimeWeightedMean", "UsageAccumulator"]


@dataclass(slots=True)
class TimeWeightedMean:
    """The sample-and-hold mean of one quantity over time: ``add`` samples in time order, ``cut`` a
    part off at a time."""

    at: float | None = None  # time of the held value
    held_sum: float = 0.0
    held_count: int = 0
    carried: bool = False  # the held value came from the part before: a sample at ``at`` replaces it
    area: float = 0.0
    weight: float = 0.0

    def _hold_until(self, to: float) -> None:
        if self.at is not None and self.held_count and to > self.at:
            span = to - self.at
            self.area += self.held_sum / self.held_count * span
            self.weight += span
            self.at = to

    def add(self, at: float, value: float) -> bool:
        """Folds one sample in; False (and nothing changes) for a sample older than the held one."""
        if self.at is not None and at < self.at:
            return False
        if self.at is None or at > self.at or self.carried:
            self._hold_until(at)
            self.at, self.held_sum, self.held_count, self.carried = at, value, 1, False
        else:
            self.held_sum += value
            self.held_count += 1
        return True

    def cut(self, at: float) -> tuple[float | None, float]:
        """The mean of the part that ends at ``at`` (None when it had no value) and the time it
        covers; the next part starts at ``at``, carrying the held value. A part of no length with a
        value gives that value with weight 0."""
        self._hold_until(at)
        if self.weight > 0:
            mean: float | None = self.area / self.weight
        elif self.held_count:
            mean = self.held_sum / self.held_count
        else:
            mean = None
        weight = self.weight
        self.area = self.weight = 0.0
        if self.held_count:
            self.carried = True
            self.at = max(at, self.at) if self.at is not None else at
        return mean, weight


@dataclass(frozen=True, slots=True)
class IntervalUsage:
    """A pod's GPU usage over one part of its allocation interval: time-weighted means of GPU
    utilisation (percent), SM activity (ratio) and framebuffer memory used (MiB, summed over its
    GPUs), None where no sample told; ``covered_s`` is the time the utilisation mean covers,
    ``samples`` the samples folded in this part, ``fb_used_mib_max`` the largest memory sample."""

    key: PodKey
    start: float
    end: float
    covered_s: float
    samples: int
    gpu_util_percent: float | None
    sm_active: float | None
    fb_used_mib: float | None
    fb_used_mib_max: float | None
    gpus: tuple[str, ...] = ()


@dataclass(slots=True)
class _Pod:
    start: float
    util: TimeWeightedMean = field(default_factory=TimeWeightedMean)
    sm: TimeWeightedMean = field(default_factory=TimeWeightedMean)
    fb: TimeWeightedMean = field(default_factory=TimeWeightedMean)
    samples: int = 0
    fb_max: float | None = None
    gpus: set[str] = field(default_factory=set)


@dataclass(slots=True)
class UsageAccumulator:
    """Folds pods' usage samples into per-interval means for the pods whose interval is open."""

    pods: dict[PodKey, _Pod] = field(default_factory=dict)

    def open(self, key: PodKey, at: float) -> None:
        """Starts following ``key`` from ``at`` (an open pod stays as it is)."""
        self.pods.setdefault(key, _Pod(start=at))

    def is_open(self, key: PodKey) -> bool:
        return key in self.pods

    def add(self, usage: PodUsage) -> bool:
        """Folds one pod's sample; False when the pod is not open, or the sample is older than its
        interval's start or than the last sample folded."""
        pod = self.pods.get(usage.key)
        if pod is None or usage.at < pod.start:
            return False
        folded = False
        for mean, value in ((pod.util, usage.gpu_util_percent), (pod.sm, usage.sm_active),
                            (pod.fb, usage.fb_used_mib)):
            if value is not None:
                folded = mean.add(usage.at, value) or folded
        if not folded:
            return False
        pod.samples += 1
        pod.gpus.update(usage.gpus)
        if usage.fb_used_mib is not None:
            pod.fb_max = usage.fb_used_mib if pod.fb_max is None else max(pod.fb_max, usage.fb_used_mib)
        return True

    def add_page(self, page: TelemetryPage) -> int:
        """Folds every open pod's usage of ``page``; how many were folded."""
        return sum(self.add(usage) for key, usage in page.pods.items() if key in self.pods)

    def cut(self, key: PodKey, at: float) -> IntervalUsage | None:
        """The usage of ``key`` from its part's start to ``at``; the next part starts at ``at`` with the
        held values carried (None when ``key`` is not open)."""
        pod = self.pods.get(key)
        if pod is None:
            return None
        end = max(at, pod.start)
        util, covered = pod.util.cut(end)
        sm, _ = pod.sm.cut(end)
        fb, _ = pod.fb.cut(end)
        usage = IntervalUsage(key=key, start=pod.start, end=end, covered_s=covered, samples=pod.samples,
                              gpu_util_percent=util, sm_active=sm, fb_used_mib=fb, fb_used_mib_max=pod.fb_max,
                              gpus=tuple(sorted(pod.gpus)))
        pod.start, pod.samples, pod.fb_max = end, 0, None
        pod.gpus = set()
        return usage

    def close(self, key: PodKey, at: float) -> IntervalUsage | None:
        """Ends ``key``'s interval at ``at`` and forgets the pod (None when it was not open)."""
        usage = self.cut(key, at)
        self.pods.pop(key, None)
        return usage
