"""Trace-neutral records that every trace loader produces and the simulator consumes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job (task) of a workload trace, in the units of the engine's inputs.

    GPU request follows the openb convention: ``num_gpu`` GPUs, each ``gpu_milli`` of 1000.
    A fractional job is ``num_gpu == 1`` with ``gpu_milli < 1000``; CPU-only jobs have 0 and 0.
    """

    name: str
    submit_s: float                  # seconds since the trace start (0 where the trace has no times)
    duration_s: float | None         # run time once started; None = unknown (never ends)
    num_gpu: int
    gpu_milli: int                   # per-GPU share in milli-GPU (1000 = whole GPU); 0 when num_gpu == 0
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_models: tuple[str, ...] = ()  # allowed GPU models; empty = any
    priority: int | None = None
    checkpoint_s: float | None = None  # checkpoint interval; None = the simulator's default
    attrs: Mapping[str, str] = field(default_factory=dict)  # user, group, vc, qos, ...: for queue mapping

    @property
    def fractional(self) -> bool:
        return self.num_gpu == 1 and 0 < self.gpu_milli < 1000

    @property
    def gpu_request_milli(self) -> int:
        """Total GPU asked for, in milli-GPU."""
        return self.num_gpu * self.gpu_milli


@dataclass(frozen=True, slots=True)
class TraceNode:
    """One machine of a trace's node list."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    gpu_model: str = ""
    gpu_memory_mib: int = 0           # per GPU; 0 = unknown
    attrs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What a loader read: rows accepted and rows skipped (only with skip_bad_rows)."""

    path: str
    rows: int
    skipped: int = 0
    first_errors: tuple[str, ...] = ()  # the first few skipped rows' errors, "FILE:LINE: field: problem"
    kind: str = ""                      # the format read: "openb-pods", "philly", "generic", ...
    start_epoch_s: float | None = None  # the trace's start (submit_s 0) in epoch seconds, when its times are absolute
