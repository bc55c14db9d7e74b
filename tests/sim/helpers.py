"""Small clusters and traces for the simulator tests, built directly (no files)."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.adapters.traces.records import TraceJob
from gpufleet.domain import CPU, GPU, MEMORY, MILLI, PODS, Node, NodeName, Queue, QueueName, QueueResource
from gpufleet.sim.cluster import SimCluster, SimNode
from gpufleet.sim.failures import FailureModel
from gpufleet.sim.jobs import build_jobs
from gpufleet.sim.timeline import CycleMode, JobRun, Scheduler, SimOptions, SimResult, SimSetup, simulate

GIB = 2**30 * MILLI


def node(name: str, gpus: int, *, price: float = 0.0, spot: bool = False, model: str = "") -> SimNode:
    alloc = {GPU: gpus * MILLI, CPU: 64 * MILLI, MEMORY: 256 * GIB, PODS: 110 * MILLI}
    return SimNode(Node(NodeName(name), allocatable=alloc, gpu_product=model or None), price_per_gpu_hour=price,
                   spot=spot)


def cluster(*gpus: int, price: float = 0.0) -> SimCluster:
    return SimCluster(tuple(node(f"n{i}", g, price=price) for i, g in enumerate(gpus)))


def job(name: str, submit: float, duration: float | None, gpus: int = 1, *, milli: int = 1000, vc: str = "",
        priority: int | None = None, checkpoint: float | None = None) -> TraceJob:
    return TraceJob(name=name, submit_s=submit, duration_s=duration, num_gpu=gpus, gpu_milli=milli if gpus else 0,
                    priority=priority, checkpoint_s=checkpoint, attrs={"vc": vc} if vc else {})


def gpu_queue(name: str, quota: int) -> Queue:
    return Queue(QueueName(name), resources={GPU: QueueResource(quota=quota * MILLI)})


def run(
    sim_cluster: SimCluster,
    trace: Sequence[TraceJob],
    *,
    queues: Sequence[Queue] = (),
    by_vc: bool = False,
    checkpoint: float = 0.0,
    interval: float = 0.0,
    mode: CycleMode = CycleMode.EVENTS,
    failures: FailureModel | None = None,
    until: float | None = None,
    seed: int = 0,
    sample_step: float | None = None,
    scheduler: Scheduler | None = None,
) -> SimResult:
    """Simulate ``trace``: each job goes to the queue named by its vc attribute (or "default")."""
    names = [QueueName(j.attrs.get("vc", "default")) if by_vc else QueueName("default") for j in trace]
    jobs = build_jobs(trace, names, sim_cluster, checkpoint)
    setup = SimSetup(sim_cluster, jobs, tuple(queues), failures=failures or FailureModel())
    options = SimOptions(cycle_interval_s=interval, cycle_mode=mode, until_s=until, seed=seed,
                         sample_step_s=sample_step)
    return simulate(setup, options, scheduler=scheduler)


def runs_by_name(result: SimResult) -> dict[str, JobRun]:
    return {j.name: r for j, r in zip(result.setup.jobs, result.runs, strict=True)}
