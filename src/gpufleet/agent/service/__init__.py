"""``gpufleet agent``'s service: the loop that keeps the Node true to its GPUs (docs/agent.md).

- :mod:`.loop`: :class:`AgentLoop`, one poll after another on the injected clock, calling the health
  rules (:mod:`gpufleet.agent.health`) and discovery (:mod:`gpufleet.agent.discovery`);
- :mod:`.node_writes`: the Node's labels, annotations, ``GPUHealthy`` condition and Events, written
  only on change, conflicts retried;
- :mod:`.metrics`: the agent's health figures on ``/metrics`` (Xid errors, health states, ECC);
- :mod:`.ports` and :mod:`.usage`: the usage export the loop feeds (:mod:`.wiring` builds both);
- :mod:`.pods`: the pods bound to this node (a field selector: this node's only), for the usage export.
"""

from gpufleet.agent.service.loop import AgentLoop, AgentSettings, change_event, print_write
from gpufleet.agent.service.metrics import AgentMetrics, xid_label
from gpufleet.agent.service.node_writes import DesiredNode, NodeWriter, condition_patch, metadata_patch, patch_node
from gpufleet.agent.service.ports import UsageSink

__all__ = [
    "AgentLoop",
    "AgentMetrics",
    "AgentSettings",
    "DesiredNode",
    "NodeWriter",
    "UsageSink",
    "change_event",
    "condition_patch",
    "metadata_patch",
    "patch_node",
    "print_write",
    "xid_label",
]
