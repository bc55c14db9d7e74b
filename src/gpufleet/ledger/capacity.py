"""Which kind of capacity a node is (on-demand, spot or reserved): the one rule, read from its labels.

The reports price an interval's GPUs at the rate of its node's capacity type (``gpufleet report usage
--prices``); the controller records it with each interval (``IntervalStart.capacity_type``) from the
node's labels through :func:`capacity_type_of`. docs/semantics-notes.md, "Usage ledger (accounting)",
gives the rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

__all__ = ["CAPACITY_TYPE_LABEL", "CAPACITY_TYPE_LABELS", "CapacityType", "capacity_type_of"]


class CapacityType(StrEnum):
    """How a node's capacity is bought: the rate its GPUs are priced at. No capacity type is on-demand."""

    ON_DEMAND = "on-demand"
    SPOT = "spot"
    RESERVED = "reserved"


CAPACITY_TYPE_LABEL = "gpufleet.dev/capacity-type"  # set by the operator: on-demand | spot | reserved

# The labels read, first to last: the first one present with a value it knows decides. Values are
# compared without case, with '_' read as '-'.
CAPACITY_TYPE_LABELS: tuple[tuple[str, Mapping[str, CapacityType]], ...] = (
    (CAPACITY_TYPE_LABEL, {"on-demand": CapacityType.ON_DEMAND, "spot": CapacityType.SPOT,
                           "reserved": CapacityType.RESERVED}),
    ("gpufleet.dev/spot", {"true": CapacityType.SPOT, "false": CapacityType.ON_DEMAND}),  # the simulator's
    ("karpenter.sh/capacity-type", {"on-demand": CapacityType.ON_DEMAND, "spot": CapacityType.SPOT,
                                    "reserved": CapacityType.RESERVED}),
    ("cloud.google.com/gke-spot", {"true": CapacityType.SPOT}),
    ("cloud.google.com/gke-preemptible", {"true": CapacityType.SPOT}),
    ("eks.amazonaws.com/capacitytype", {"on-demand": CapacityType.ON_DEMAND, "spot": CapacityType.SPOT,
                                        "capacity-block": CapacityType.RESERVED}),
    ("kubernetes.azure.com/scalesetpriority", {"spot": CapacityType.SPOT, "regular": CapacityType.ON_DEMAND}),
)


def capacity_type_of(node_labels: Mapping[str, str]) -> CapacityType | None:
    """The capacity type the node's labels say, or None when none of :data:`CAPACITY_TYPE_LABELS` is
    present with a known value (the reports price it on-demand). Label keys are matched without case
    (EKS writes ``eks.amazonaws.com/capacityType``)."""
    folded = {key.lower(): value for key, value in node_labels.items()}
    for key, values in CAPACITY_TYPE_LABELS:
        value = folded.get(key)
        if value is not None:
            found = values.get(value.strip().lower().replace("_", "-"))
            if found is not None:
                return found
    return None
