"""Which nodes are spot (provider-preemptible) nodes: a node lost with its pods is a ``spot-reclaim``
rather than a ``node-failure`` when it was one (docs/semantics-notes.md, "Usage ledger")."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["SPOT_LABELS", "is_spot_node"]

# label key -> the value (compared case-insensitively) that marks a spot node
SPOT_LABELS: Mapping[str, str] = {
    "gpufleet.dev/spot": "true",
    "karpenter.sh/capacity-type": "spot",
    "eks.amazonaws.com/capacityType": "spot",
    "cloud.google.com/gke-spot": "true",
    "cloud.google.com/gke-preemptible": "true",
    "kubernetes.azure.com/scalesetpriority": "spot",
    "node.kubernetes.io/lifecycle": "spot",
}


def is_spot_node(labels: Mapping[str, str]) -> bool:
    """Whether a node's labels say it is a spot node (any of :data:`SPOT_LABELS` with its value)."""
    return any(str(labels.get(key, "")).lower() == value for key, value in SPOT_LABELS.items())
