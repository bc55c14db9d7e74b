"""The FGD paper's fill experiment (``gpufleet simulate fill``): policies, runs, summaries, report."""

from gpufleet.sim.fill.experiment import (
    FAILURE_KINDS,
    FillRun,
    bucket_means,
    fill_nodes,
    node_ranks,
    run_fill,
    run_sequence,
    target_workload,
    task_order,
    task_pod,
)
from gpufleet.sim.fill.policies import POLICIES, make_policy

__all__ = [
    "FAILURE_KINDS",
    "POLICIES",
    "FillRun",
    "bucket_means",
    "fill_nodes",
    "make_policy",
    "node_ranks",
    "run_fill",
    "run_sequence",
    "target_workload",
    "task_order",
    "task_pod",
]
