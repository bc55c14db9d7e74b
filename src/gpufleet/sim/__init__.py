"""Simulator: virtual-time runs of workload traces through the engine (the same ``schedule``).

The public face of the package, for ``gpufleet simulate`` and its tests: preparing a scenario,
the run itself, failures and comparisons, metrics and reports. Names are imported on first use
(:func:`gpufleet._lazy.lazy_exports`): the reports pull in matplotlib, which ``gpufleet replay``
must not pay for. The fill experiment has its own face, :mod:`gpufleet.sim.fill`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet._lazy import lazy_exports

if TYPE_CHECKING:
    from gpufleet.sim.compare import RunSettings, Variant, apply_variant, parse_compare
    from gpufleet.sim.failures import FailureModel, parse_duration, parse_failures
    from gpufleet.sim.metrics import check_invariants, compute_metrics, summary_rows
    from gpufleet.sim.queue_mapping import QueueBy, queue_by_warning
    from gpufleet.sim.run_report import RunOutput, build_report
    from gpufleet.sim.scenario import Workload, load_cluster, prepare, select_jobs
    from gpufleet.sim.timeline import CycleMode, Progress, SimResult, simulate

_WHERE = {
    "RunSettings": "gpufleet.sim.compare",
    "Variant": "gpufleet.sim.compare",
    "apply_variant": "gpufleet.sim.compare",
    "parse_compare": "gpufleet.sim.compare",
    "FailureModel": "gpufleet.sim.failures",
    "parse_duration": "gpufleet.sim.failures",
    "parse_failures": "gpufleet.sim.failures",
    "check_invariants": "gpufleet.sim.metrics",
    "compute_metrics": "gpufleet.sim.metrics",
    "summary_rows": "gpufleet.sim.metrics",
    "QueueBy": "gpufleet.sim.queue_mapping",
    "queue_by_warning": "gpufleet.sim.queue_mapping",
    "RunOutput": "gpufleet.sim.run_report",
    "build_report": "gpufleet.sim.run_report",
    "Workload": "gpufleet.sim.scenario",
    "load_cluster": "gpufleet.sim.scenario",
    "prepare": "gpufleet.sim.scenario",
    "select_jobs": "gpufleet.sim.scenario",
    "CycleMode": "gpufleet.sim.timeline",
    "Progress": "gpufleet.sim.timeline",
    "SimResult": "gpufleet.sim.timeline",
    "simulate": "gpufleet.sim.timeline",
}

__all__ = [
    "CycleMode",
    "FailureModel",
    "Progress",
    "QueueBy",
    "RunOutput",
    "RunSettings",
    "SimResult",
    "Variant",
    "Workload",
    "apply_variant",
    "build_report",
    "check_invariants",
    "compute_metrics",
    "load_cluster",
    "parse_compare",
    "parse_duration",
    "parse_failures",
    "prepare",
    "queue_by_warning",
    "select_jobs",
    "simulate",
    "summary_rows",
]
__getattr__ = lazy_exports(__name__, _WHERE)
