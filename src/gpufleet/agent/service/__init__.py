"""``gpufleet agent``'s service: the loop that keeps the Node true to its GPUs (docs/agent.md).

- :mod:`.loop`: :class:`AgentLoop`, one poll after another on the injected clock;
- :mod:`.node_writes`: the Node's labels, annotations, ``GPUHealthy`` condition and Events, written
  only on change, conflicts retried;
- :mod:`.ports`: what the loop calls and is not its own (discovery, health rules, usage export);
- :mod:`.standins`: minimal versions of those until their rooms are wired in (:mod:`.wiring`);
- :mod:`.pods`: the pods bound to this node, for the usage export.
"""

from gpufleet.agent.service.loop import AgentLoop, AgentSettings, print_write
from gpufleet.agent.service.node_writes import DesiredNode, NodeWriter, condition_patch, metadata_patch, patch_node
from gpufleet.agent.service.ports import (
    ANNOTATION_GPU_HEALTH,
    ANNOTATION_GPU_UNCORDON,
    CONDITION_GPU_HEALTHY,
    ConditionWanted,
    Describe,
    HealthChange,
    HealthRules,
    NodeMetadata,
    UsageSink,
)
from gpufleet.agent.service.standins import BasicHealthRules, HealthPolicy, NoUsage, basic_describe, parse_index_list

__all__ = [
    "ANNOTATION_GPU_HEALTH",
    "ANNOTATION_GPU_UNCORDON",
    "CONDITION_GPU_HEALTHY",
    "AgentLoop",
    "AgentSettings",
    "BasicHealthRules",
    "ConditionWanted",
    "Describe",
    "DesiredNode",
    "HealthChange",
    "HealthPolicy",
    "HealthRules",
    "NoUsage",
    "NodeMetadata",
    "NodeWriter",
    "UsageSink",
    "basic_describe",
    "condition_patch",
    "metadata_patch",
    "parse_index_list",
    "patch_node",
    "print_write",
]
