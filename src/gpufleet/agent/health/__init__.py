"""The node agent's GPU health rules: pure (no I/O, no clock: the time is an argument).

- :mod:`.xids`: the Xid catalog: each Xid's meaning, NVIDIA's action and gpufleet's rule;
- :mod:`.machine`: each GPU's health as a state machine, :func:`step` once per poll;
- :mod:`.node`: what that says about the Node (``gpufleet.dev/unhealthy-gpus``, the ``GPUHealthy``
  condition) and the operator's ``gpufleet.dev/gpu-uncordon`` request;
- :mod:`.persist`: the health kept on the Node across restarts (``gpufleet.dev/gpu-health``).

docs/agent.md ("Health rules") explains the rules.
"""

from gpufleet.agent.health.machine import (
    TRANSITIONS,
    GpuHealth,
    GpuNotice,
    HealthChange,
    HealthEvent,
    HealthPolicy,
    HealthState,
    HealthStep,
    step,
)
from gpufleet.agent.health.node import (
    ANNOTATION_GPU_UNCORDON,
    ANNOTATION_UNHEALTHY_GPUS,
    CONDITION_GPU_HEALTHY,
    HealthAnnotationError,
    NodeCondition,
    format_gpu_indices,
    merge_uncordon,
    node_condition,
    parse_gpu_indices,
    parse_uncordon,
    unhealthy_indices,
)
from gpufleet.agent.health.persist import ANNOTATION_GPU_HEALTH, LoadedHealth, dump_health, load_health
from gpufleet.agent.health.xids import XID_CATALOG, XidAction, XidRule, xid_rule

__all__ = [
    "ANNOTATION_GPU_HEALTH",
    "ANNOTATION_GPU_UNCORDON",
    "ANNOTATION_UNHEALTHY_GPUS",
    "CONDITION_GPU_HEALTHY",
    "TRANSITIONS",
    "XID_CATALOG",
    "GpuHealth",
    "GpuNotice",
    "HealthAnnotationError",
    "HealthChange",
    "HealthEvent",
    "HealthPolicy",
    "HealthState",
    "HealthStep",
    "LoadedHealth",
    "NodeCondition",
    "XidAction",
    "XidRule",
    "dump_health",
    "format_gpu_indices",
    "load_health",
    "merge_uncordon",
    "node_condition",
    "parse_gpu_indices",
    "parse_uncordon",
    "step",
    "unhealthy_indices",
    "xid_rule",
]
