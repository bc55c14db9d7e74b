"""The scheduling engine: a pure function of a cluster snapshot.

``schedule(snapshot)`` runs scheduling cycles until nothing changes and returns the decisions
(bindings, evictions, pending pods with reasons). No I/O, no clock, no randomness.

Besides ``schedule``, the package offers what the simulator's fill experiment builds on: the
engine's node/GPU state (``ClusterState``), static feasibility, the fit test (does a pod fit a
node now, which GPUs a share may take: the placement's own rule, so that "fits" cannot mean two
things), the fragmentation model and its target workload, and ``PlacementSession`` (the engine's
placement, one pod at a time), ``admission_order`` (each leaf queue's pending gangs in the order
the engine tries them: ``gpufleet explain`` reports a pod's place in it), and ``screen`` (what
the engine leaves out of a snapshot, and why: the controller's Node Events and queue usage
follow it). Every name here is already loaded
by ``schedule``'s own imports, so importing the package costs no more.
"""

from gpufleet.engine.cluster import BoolArray, ClusterState, IntArray
from gpufleet.engine.feasibility import StaticFeasibility
from gpufleet.engine.fit import blocks_for_memory, gpu_fit, node_fit, resources_fit, share_cells
from gpufleet.engine.fragmentation import (
    ChangedNodes,
    FragmentationModel,
    NodeStates,
    TargetShape,
    TargetWorkload,
    shape_of,
)
from gpufleet.engine.incremental import IncrementalEngine
from gpufleet.engine.intake import Screened, screen
from gpufleet.engine.scheduler import admission_order, schedule
from gpufleet.engine.session import PlacementSession
from gpufleet.engine.workload import effective_priority, pod_preemptible

__all__ = [
    "BoolArray",
    "ChangedNodes",
    "ClusterState",
    "FragmentationModel",
    "IncrementalEngine",
    "IntArray",
    "NodeStates",
    "PlacementSession",
    "Screened",
    "StaticFeasibility",
    "TargetShape",
    "TargetWorkload",
    "admission_order",
    "blocks_for_memory",
    "effective_priority",
    "gpu_fit",
    "node_fit",
    "pod_preemptible",
    "resources_fit",
    "schedule",
    "screen",
    "shape_of",
    "share_cells",
]
