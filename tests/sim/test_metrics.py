"""Metrics of tiny runs computed by hand."""

from __future__ import annotations

import pytest

from gpufleet.sim.metrics import compute_metrics, distribution, step_integral
from gpufleet.sim.timeline import InterruptKind

from .helpers import cluster, gpu_queue, job, run


def test_two_jobs_on_two_gpus_by_hand() -> None:
    # j1: 1 GPU 0-100; j2: 2 GPUs, submitted at 50, waits for j1, runs 100-200.
    result = run(cluster(2, price=3.6), [job("j1", 0, 100, 1), job("j2", 50, 100, 2)])
    m = compute_metrics(result, "hand")
    assert m["end_s"] == 200
    assert m["jobs"]["completed"] == 2
    assert m["wait_s"]["all"] == {"count": 2, "mean": 25.0, "p50": 25.0, "p95": 47.5, "p99": 49.5, "max": 50.0}
    assert m["jct_s"]["p50"] == 125.0 and m["jct_s"]["max"] == 150.0
    # 1 GPU x 100 s + 2 GPUs x 100 s = 300 GPU-s of 2 GPUs x 200 s
    assert m["allocation"]["mean"] == 0.75
    assert m["gpu_hours"] == round(300 / 3600, 2)
    # 3.6 per GPU-hour = 0.001 per GPU-second
    assert m["cost"] == pytest.approx(0.3)
    q = m["queues"]["default"]
    assert q["mean_usage_gpus"] == 1.5 and q["peak_usage_gpus"] == 2.0 and q["quota_gpus"] is None
    assert q["time_above_quota"] is None


def test_fragmentation_counts_free_gpus_that_cannot_host_the_typical_pod() -> None:
    # two 2-GPU nodes; typical pod (lower median of 1, 2, 2 GPUs) = 2 GPUs.
    # a (1 GPU) takes n0, b (2) takes n1, c (2) waits for b: n0's free GPU is stranded the whole time.
    trace = [job("a", 0, 100, 1), job("b", 0, 50, 2), job("c", 0, 50, 2)]
    result = run(cluster(2, 2), trace, sample_step=10)
    assert (result.typical.whole, result.typical.blocks) == (2, 0)
    m = compute_metrics(result)
    # samples at 0, 10, ..., 100: the first ten strand 1 free GPU of 1, the last (all free) strands none
    assert m["fragmentation"]["mean_stranded_share"] == round(10 / 11, 4)
    assert m["allocation"]["mean"] == 0.75
    assert m["wait_s"]["all"]["max"] == 50.0


def test_usage_against_quota_and_lost_gpu_hours() -> None:
    trace = [job("a1", 0, 1000, 2, vc="a", checkpoint=100), job("b1", 250, 100, 1, vc="b")]
    result = run(cluster(2), trace, queues=[gpu_queue("a", 1), gpu_queue("b", 1)], by_vc=True)
    m = compute_metrics(result)
    assert m["end_s"] == 1150
    a, b = m["queues"]["a"], m["queues"]["b"]
    # a: 2 GPUs over 0-250 and 350-1150 (1050 s), above its quota of 1 the whole time it runs
    assert a["gpu_hours"] == round(2 * 1050 / 3600, 2)
    assert a["time_above_quota"] == round(1050 / 1150, 4)
    assert b["time_above_quota"] == 0.0 and b["peak_usage_gpus"] == 1.0
    assert m["preemptions"] == {"evictions": 1, "reclaim": 1, "preempt": 0, "jobs_evicted": 1,
                                "gpu_hours_lost": round(2 * 50 / 3600, 3)}
    assert [i.kind for i in result.interruptions] == [InterruptKind.RECLAIM]


def test_distribution_and_step_integral() -> None:
    import numpy as np

    assert distribution([]) == {"count": 0, "mean": 0.0, "p50": 0.0, "p95": 0.0, "p99": 0.0, "max": 0.0}
    d = distribution(range(101))
    assert (d["p50"], d["p95"], d["p99"], d["max"]) == (50.0, 95.0, 99.0, 100.0)
    assert step_integral(np.array([0.0, 10.0]), np.array([2, 5]), 20.0) == 2 * 10 + 5 * 10


def test_metrics_json_is_the_same_for_the_same_run() -> None:
    import json

    trace = [job(f"j{i}", i * 7.0, 100 + i, 1 + i % 3, vc="ab"[i % 2]) for i in range(20)]
    queues = [gpu_queue("a", 2), gpu_queue("b", 2)]
    one = json.dumps(compute_metrics(run(cluster(2, 4), trace, queues=queues, by_vc=True, interval=10)))
    two = json.dumps(compute_metrics(run(cluster(2, 4), trace, queues=queues, by_vc=True, interval=10)))
    assert one == two
