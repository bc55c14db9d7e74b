"""The simulator's decayed usage (docs/semantics.md, "Fairness over time") and its monthly fairness metric."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain import GPU, MILLI, Queue, QueueName, QueueResource, SchedulerConfig
from gpufleet.sim.failures import FailureModel
from gpufleet.sim.jobs import build_jobs
from gpufleet.sim.metrics import MONTH_S, compute_metrics, weighted_fair_split
from gpufleet.sim.timeline import SimOptions, SimResult, SimSetup, Timeline

from .helpers import cluster, job


def _queue(name: str, weight: float = 1.0) -> Queue:
    return Queue(QueueName(name), weight=weight, resources={GPU: QueueResource(quota=0)})


def _run(trace: list, half_life: float, queues: tuple[Queue, ...], gpus: int = 1,
         sample_step: float | None = None) -> tuple[SimResult, Timeline]:
    sim_cluster = cluster(gpus)
    jobs = build_jobs(trace, [QueueName(j.attrs["vc"]) for j in trace], sim_cluster, 0.0)
    setup = SimSetup(sim_cluster, jobs, queues, config=SchedulerConfig(usage_half_life=half_life),
                     failures=FailureModel())
    timeline = Timeline(setup, SimOptions(sample_step_s=sample_step))
    return timeline.run(), timeline


# a used the GPU 0-1000; a1 (older) and b1 wait for it. Without history the queues tie at 1000 and
# the older a1 goes first; with a half-life a's past usage puts b1 first.
TRACE = [job("a0", 0, 1000, vc="a"), job("a1", 500, 100, vc="a"), job("b1", 600, 100, vc="b")]


@pytest.mark.parametrize(("half_life", "first"), [(0.0, "a1"), (1000.0, "b1")])
def test_decayed_usage_orders_the_queues(half_life: float, first: str) -> None:
    result, _ = _run(TRACE, half_life, (_queue("a"), _queue("b")))
    starts = {j.name: r.first_start for j, r in zip(result.setup.jobs, result.runs, strict=True)}
    assert starts[first] == 1000.0
    assert starts["a1" if first == "b1" else "b1"] == 1100.0


def test_decayed_usage_is_the_exact_integral() -> None:
    # a holds 1 GPU over 0-1000 (H = 1 - 2^-1 = 0.5 GPU at 1000), then nothing until the end at 2010;
    # b holds 1 GPU over 2000-2010.
    result, timeline = _run([job("a0", 0, 1000, vc="a"), job("b0", 2000, 10, vc="b")], 1000.0,
                            (_queue("a"), _queue("b")))
    assert result.end_s == 2010.0
    queues = {q.name: q for q in timeline._queues()}
    a, b = queues[QueueName("a")], queues[QueueName("b")]
    assert a.decayed_usage[GPU] == int(0.5 * 2 ** -1.01 * MILLI) and a.decayed_at == 2010.0
    assert b.decayed_usage[GPU] == int((1 - 2 ** -0.01) * MILLI)


def test_monthly_shares_against_the_weights() -> None:
    # Two months; in each, a (weight 3) and b (weight 1) keep work waiting on 1 GPU all month. a runs
    # 3/4 of month 0 and b 1/4: on the weights, gap 0. In month 1 they share equally: gap 1/4.
    day = 86400.0
    trace = [job("a0", 0, 22.5 * day, vc="a"), job("b0", 0, 7.5 * day, vc="b"),
             job("b1", 1, 15 * day, vc="b"), job("a1", 2, 15 * day, vc="a"),
             job("a2", 3, 10, vc="a"), job("b2", 4, 10, vc="b")]
    queues = (_queue("a", 3.0), _queue("b", 1.0))
    result, _ = _run(trace, 0.0, queues, sample_step=day / 4)
    fairness = compute_metrics(result)["fairness"]
    months = fairness["months"]
    assert 30 * day == MONTH_S and len(months) == 3  # the last holds the short tail of jobs a2 and b2
    assert months[0]["busy"] == ["a", "b"] and months[0]["share"] == {"a": 0.75, "b": 0.25}
    assert months[0]["max_deviation"] == 0.0
    assert months[1]["share"] == {"a": 0.5, "b": 0.5} and months[1]["max_deviation"] == 0.25
    # the demand-capped fair split (weights 3:1, both asking more than the GPU all along) entitles a to
    # 3/4: month 0 is on it, month 1 is 1/4 of the GPU-hours off it.
    assert months[0]["entitled"] == {"a": 0.75, "b": 0.25} and months[0]["deviation"] == 0.0
    assert months[0]["jain"] == 1.0
    assert months[1]["entitled"] == {"a": 0.75, "b": 0.25} and months[1]["deviation"] == 0.25
    assert months[1]["jain"] is not None and months[1]["jain"] < 1.0
    assert fairness["run"]["deviation"] is not None and 0.0 < fairness["run"]["deviation"] < 0.25


demands = st.lists(st.floats(0, 100), min_size=1, max_size=6)


@given(st.lists(demands, min_size=1, max_size=5).filter(lambda rows: len({len(r) for r in rows}) == 1),
       st.data())
def test_the_fair_split_is_water_filling(rows: list[list[float]], data: st.DataObject) -> None:
    demand = np.array(rows)
    n = demand.shape[1]
    weights = np.array(data.draw(st.lists(st.floats(0.1, 10), min_size=n, max_size=n)))
    capacity = np.array(data.draw(st.lists(st.floats(0, 300), min_size=len(rows), max_size=len(rows))))
    split = weighted_fair_split(demand, weights, capacity)
    assert (split >= -1e-9).all() and (split <= demand + 1e-9).all()
    assert np.allclose(split.sum(axis=1), np.minimum(capacity, demand.sum(axis=1)), atol=1e-6)
    for r in range(len(rows)):  # a queue short of its demand has the highest level: no one is above it
        short = split[r] < demand[r] - 1e-6
        if short.any():
            level = split[r] / weights
            assert level.max() <= level[short].min() + 1e-6
