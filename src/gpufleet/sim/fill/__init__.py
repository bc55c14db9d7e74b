"""The FGD paper's fill experiment (``gpufleet simulate fill``): policies, runs, summaries, report.

The face of the experiment for the command and tests; the HTML report (:mod:`.report`, matplotlib)
is imported only by whoever writes one.
"""

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
from gpufleet.sim.fill.summary import PaperResults, SeedCurves, parse_seeds, summarize, table

__all__ = [
    "FAILURE_KINDS",
    "POLICIES",
    "FillRun",
    "PaperResults",
    "SeedCurves",
    "bucket_means",
    "fill_nodes",
    "make_policy",
    "node_ranks",
    "parse_seeds",
    "run_fill",
    "run_sequence",
    "summarize",
    "table",
    "target_workload",
    "task_order",
    "task_pod",
]
