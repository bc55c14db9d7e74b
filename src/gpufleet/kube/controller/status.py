"""The ``status`` of gpufleet's own resources, as the controller writes it.

These pydantic models are the one definition of the status fields: the CRDs' status schemas are
generated from them (:mod:`gpufleet.kube.install.crds`) and the controller builds its status patches with
them, so what it writes always validates against what the API server enforces::

    status = QueueStatus(usage={"nvidia.com/gpu": format_quantity(6000)}, admittedGangs=3)
    patch = {"status": status.to_api()}
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr, WithJsonSchema

from gpufleet.adapters import QUANTITY_JSON_SCHEMA, to_milli
from gpufleet.domain import MILLI

__all__ = [
    "Condition",
    "ConditionStatus",
    "PodGroupPhase",
    "PodGroupStatus",
    "ProjectStatus",
    "QueueReservation",
    "QueueStatus",
    "format_quantity",
]


def format_quantity(milli: int) -> str:
    """An integer milli-quantity as Kubernetes quantity text: ``6000`` -> ``"6"``, ``500`` -> ``"500m"``."""
    if milli < 0:
        raise ValueError(f"negative quantity {milli}")
    return str(milli // MILLI) if milli % MILLI == 0 else f"{milli}m"


def _check_quantity(text: str) -> str:
    to_milli(text)  # QuantityError (a ValueError) for anything malformed or negative
    return text


# Quantities in a status are strings (what format_quantity gives); the schema still admits
# integers, as Kubernetes does for every quantity.
QuantityText = Annotated[StrictStr, AfterValidator(_check_quantity), WithJsonSchema(QUANTITY_JSON_SCHEMA)]
Count = Annotated[StrictInt, Field(ge=0, le=2**31 - 1)]


class _Status(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def to_api(self) -> dict[str, Any]:
        """The JSON form for a status patch (unset optional fields left out)."""
        return self.model_dump(mode="json", exclude_none=True)


class ConditionStatus(str, Enum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(_Status):
    """A standard Kubernetes condition (the shape of metav1.Condition)."""

    type: Annotated[StrictStr, Field(min_length=1, max_length=316)] = Field(
        description="Type of condition in CamelCase, e.g. Ready."
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: Annotated[StrictStr, Field(min_length=1, max_length=1024)] = Field(
        description="Programmatic identifier of the last transition, in CamelCase."
    )
    message: Annotated[StrictStr, Field(max_length=32768)] = Field(
        "", description="Human-readable details of the last transition."
    )
    lastTransitionTime: datetime = Field(description="When the condition last changed status.")
    observedGeneration: Annotated[StrictInt, Field(ge=0)] | None = Field(
        None, description="metadata.generation the condition was set for."
    )


class QueueReservation(_Status):
    gang: StrictStr = Field(description="The gang holding it: its PodGroup (namespace/name), or its pod alone.")
    nodes: list[StrictStr] = Field(description="The nodes it holds, in name order.")
    start: datetime = Field(description="When the gang is expected to fit on them.")
    gpus: Count = Field(description="Whole GPUs the gang needs there.")


class QueueStatus(_Status):
    usage: dict[StrictStr, QuantityText] = Field(
        default_factory=dict, description="Resources held by running and bound pods of this queue (subtree)."
    )
    guaranteedUsage: dict[StrictStr, QuantityText] = Field(
        default_factory=dict, description="The part of usage within quota."
    )
    borrowed: dict[StrictStr, QuantityText] = Field(
        default_factory=dict, description="The part of usage above quota, lent by other queues."
    )
    admittedGangs: Count = Field(0, description="Gangs of this queue admitted (bound, all or nothing).")
    pendingGangs: Count = Field(0, description="Gangs of this queue waiting to be admitted.")
    decayedUsage: dict[StrictStr, QuantityText] | None = Field(
        None, description="Usage averaged over time with the SchedulerConfig's fairShare.usageHalfLife (the "
        "fair order weighs it); kept by the scheduler, set only while that half-life is on.",
    )
    decayedUsageTime: datetime | None = Field(None, description="When decayedUsage was computed.")
    reservations: list[QueueReservation] | None = Field(
        None, description="Nodes held for this queue's gangs that waited longer than the SchedulerConfig's "
        "reservation.after (docs/semantics.md, \"Reservation and backfill\"), as of the last cycle; set only "
        "while one is held.",
    )
    conditions: list[Condition] | None = Field(
        None,
        description="Standard conditions.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class PodGroupPhase(str, Enum):
    PENDING = "Pending"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    FAILED = "Failed"


class PodGroupStatus(_Status):
    phase: PodGroupPhase = Field(PodGroupPhase.PENDING, description="Pending, Admitted, Running or Failed.")
    boundPods: Count = Field(0, description="Pods of the group bound to a node.")
    lastReason: StrictStr = Field("", description="Why the group is in its phase, e.g. why it cannot be placed.")
    lastTransitionTime: datetime | None = Field(None, description="When the phase last changed.")
    conditions: list[Condition] | None = Field(
        None,
        description="Standard conditions: Scheduled (True once minMember pods are bound; False with reason "
        "Unschedulable and the scheduler's message while it waits, PodsFailed when too many failed).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class ProjectStatus(_Status):
    namespaceCount: Count = Field(0, description="Namespaces the project governs (claimed by no other project).")
    conditions: list[Condition] | None = Field(
        None,
        description="Standard conditions: NamespaceConflict (True while a namespace it claims is also "
        "claimed by another Project).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
