"""Property test: on small random traces and clusters, the simulator's books always balance."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpufleet.adapters.traces.records import TraceJob
from gpufleet.sim.cluster import SimCluster
from gpufleet.sim.failures import FailureModel
from gpufleet.sim.metrics import check_invariants, compute_metrics
from gpufleet.sim.timeline import CycleMode, JobStatus

from .helpers import gpu_queue, node, run


@st.composite
def clusters(draw: st.DrawFn) -> SimCluster:
    sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4))
    spot = draw(st.lists(st.booleans(), min_size=len(sizes), max_size=len(sizes)))
    return SimCluster(tuple(node(f"n{i}", g, price=1.0 + i, spot=s) for i, (g, s) in enumerate(zip(sizes, spot,
                                                                                                   strict=True))))


@st.composite
def traces(draw: st.DrawFn) -> list[TraceJob]:
    n = draw(st.integers(1, 14))
    jobs = []
    for i in range(n):
        gpus = draw(st.sampled_from([0, 1, 1, 1, 2, 4, 8, 12, 16]))
        milli = draw(st.sampled_from([1000, 1000, 300, 650])) if gpus == 1 else 1000
        duration = draw(st.one_of(st.none(), st.integers(1, 600).map(float)))
        jobs.append(TraceJob(
            name=f"j{i}",
            submit_s=float(draw(st.integers(0, 800))),
            duration_s=duration,
            num_gpu=gpus,
            gpu_milli=milli if gpus else 0,
            priority=draw(st.sampled_from([None, 10, 50, 150])),
            checkpoint_s=draw(st.sampled_from([None, 0.0, 45.0])),
            attrs={"vc": draw(st.sampled_from(["a", "b", "c"]))},
        ))
    return jobs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cluster=clusters(),
    trace=traces(),
    quotas=st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 6)),
    interval=st.sampled_from([0.0, 25.0]),
    mode=st.sampled_from(list(CycleMode)),
    failures=st.sampled_from([None, FailureModel(mtbf_s=900, repair_s=120),
                              FailureModel(spot_rate_per_hour=4.0, spot_down_s=60)]),
    until=st.sampled_from([None, 500.0]),
    seed=st.integers(0, 3),
)
def test_books_balance(cluster: SimCluster, trace: list[TraceJob], quotas: tuple[int, int, int], interval: float,
                       mode: CycleMode, failures: FailureModel | None, until: float | None, seed: int) -> None:
    if mode is CycleMode.FIXED and interval == 0:
        interval = 30.0
    queues = [gpu_queue(name, q) for name, q in zip("abc", quotas, strict=True)]
    result = run(cluster, trace, queues=queues, by_vc=True, checkpoint=60, interval=interval, mode=mode,
                 failures=failures, until=until, seed=seed, sample_step=20)
    assert check_invariants(result) == []
    kinds = sorted({i.kind.value for i in result.interruptions})
    event(f"interruptions: {'+'.join(kinds) or 'none'}")
    # every job is in exactly one final state; completed ones ran their whole duration
    for sim_job, r in zip(result.setup.jobs, result.runs, strict=True):
        if until is None:
            assert r.status is not JobStatus.FUTURE
        if r.status is JobStatus.COMPLETED:
            assert sim_job.duration_s is not None and r.saved_s == sim_job.duration_s
            assert r.end_s is not None and r.first_start is not None and r.end_s >= r.first_start >= sim_job.submit_s
        if r.status is JobStatus.REJECTED:
            assert sim_job.rejected and r.first_start is None
    # sampled allocation never above the capacity up, never negative
    s = result.samples
    assert (s.allocated_milli <= s.capacity_milli).all() and (s.allocated_milli >= 0).all()
    assert (s.stranded_milli <= s.free_milli).all()
    metrics = compute_metrics(result)
    assert sum(metrics["jobs"][k] for k in ("future", "queued", "running", "completed", "rejected")) == len(trace)
    assert 0.0 <= metrics["allocation"]["mean"] <= 1.0
