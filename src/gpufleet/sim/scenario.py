"""From inputs (trace, cluster, files) and run settings to what the timeline runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.adapters.cluster_spec import (
    BUNDLED_CLUSTER_SPECS,
    cluster_from_trace_nodes,
    load_bundled_cluster_spec,
    load_cluster_spec_file,
)
from gpufleet.adapters.errors import InputError
from gpufleet.adapters.k8s_yaml import load_config_file
from gpufleet.adapters.traces import BUNDLED_NODE_NAMES, load_nodes
from gpufleet.adapters.traces.records import TraceJob
from gpufleet.domain import SchedulerConfig
from gpufleet.sim.cluster import SimCluster
from gpufleet.sim.compare import RunSettings
from gpufleet.sim.failures import FailureModel
from gpufleet.sim.jobs import build_jobs
from gpufleet.sim.queue_mapping import QueueBy, QueueMapping, load_queue_map, plan_queues
from gpufleet.sim.timeline import SimOptions, SimSetup

__all__ = ["Workload", "load_cluster", "prepare", "select_jobs"]


@dataclass(frozen=True, slots=True)
class Workload:
    """What every run of one command shares."""

    trace: tuple[TraceJob, ...]
    cluster: SimCluster
    failures: FailureModel = field(default_factory=FailureModel)
    until_s: float | None = None


def select_jobs(jobs: Sequence[TraceJob], until_s: float | None, limit: int | None) -> tuple[TraceJob, ...]:
    """Jobs in submission order (file order among equals), those after ``until_s`` dropped, at most ``limit``."""
    ordered = sorted(jobs, key=lambda j: j.submit_s)  # stable
    if until_s is not None:
        ordered = [j for j in ordered if j.submit_s <= until_s]
    if limit is not None:
        ordered = ordered[:limit]
    return tuple(ordered)


def load_cluster(value: str, *, skip_bad_rows: bool = False) -> SimCluster:
    """A ClusterSpec YAML file, a trace node list (CSV), a bundled node list name (``openb``) or a
    bundled ClusterSpec name (``openb-small``)."""
    if value in BUNDLED_CLUSTER_SPECS:
        return SimCluster.from_layout(load_bundled_cluster_spec(value))
    if value in BUNDLED_NODE_NAMES:
        nodes, _ = load_nodes(value)
        return SimCluster.from_layout(cluster_from_trace_nodes(value, nodes))
    if Path(value).suffix.lower() in (".yaml", ".yml"):
        return SimCluster.from_layout(load_cluster_spec_file(value))
    nodes, _ = load_nodes(value, skip_bad_rows=skip_bad_rows)
    if not nodes:
        raise InputError(f"{value}: the node list has no nodes")
    return SimCluster.from_layout(cluster_from_trace_nodes(Path(value).stem, nodes))


def prepare(workload: Workload, settings: RunSettings) -> tuple[SimSetup, SimOptions]:
    """The setup and options of one run; InputError for bad files or settings."""
    config = load_config_file(settings.config_file) if settings.config_file else SchedulerConfig()
    if settings.placement is not None:
        config = dataclasses.replace(config, placement=settings.placement)
    if settings.queue_map_file:
        mapping = load_queue_map(settings.queue_map_file, settings.queue_by)
    else:
        mapping = QueueMapping(by=settings.queue_by or QueueBy.NONE)
    plan = plan_queues(
        workload.trace,
        mapping,
        default_queue=config.default_queue,
        total_gpus=workload.cluster.total_gpus,
        queues_file=settings.queues_file,
    )
    names = {n.node.name for n in workload.cluster.nodes}
    for outage in workload.failures.outages:
        if outage.node not in names:
            raise InputError(f"--failures: outage of node {outage.node!r}, which the cluster does not have")
    if settings.cycle_mode.value == "fixed" and settings.cycle_interval_s <= 0:
        raise InputError("--cycle-interval: must be more than 0 with --cycle-mode fixed")
    jobs = build_jobs(workload.trace, plan.job_queues, workload.cluster, settings.checkpoint_s)
    setup = SimSetup(
        cluster=workload.cluster,
        jobs=jobs,
        queues=plan.queues,
        config=config,
        failures=workload.failures,
    )
    options = SimOptions(
        cycle_interval_s=settings.cycle_interval_s,
        cycle_mode=settings.cycle_mode,
        until_s=workload.until_s,
        seed=settings.seed,
    )
    return setup, options
