"""The scheduling engine: a pure function of a cluster snapshot.

``schedule(snapshot)`` runs scheduling cycles until nothing changes and returns the decisions
(bindings, evictions, pending pods with reasons). No I/O, no clock, no randomness.
"""

from gpufleet.engine.fit import blocks_for_memory, gpu_fit, node_fit, resources_fit, share_cells
from gpufleet.engine.scheduler import schedule

__all__ = ["schedule"]

# The fit test (does a pod fit a node now, which GPUs a share may take), for the simulator's fill
# experiment: the placement's own rule, so that "fits" cannot mean two things.
__all__ += [
    "blocks_for_memory",
    "gpu_fit",
    "node_fit",
    "resources_fit",
    "share_cells",
]
