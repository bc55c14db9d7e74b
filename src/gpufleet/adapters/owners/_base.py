"""What every owner reader shares: the pydantic base of foreign objects, object metadata and pod
templates, and the turning of a validation error into one line naming the field.

``extra="ignore"`` here, unlike gpufleet's own resources (``extra="forbid"``): an owner is another
project's object (a Job, a PyTorchJob, a RayCluster) with many fields gpufleet does not read and more
with each of their versions; refusing them would refuse every real manifest. Only the fields read are
validated, strictly."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr
from pydantic import ValidationError as PydanticValidationError

from gpufleet.adapters._fields import FieldError
from gpufleet.adapters._k8s_models import _message, loc_path
from gpufleet.domain import QueueName
from gpufleet.domain.wire import ANNOTATION_QUEUE_GRANT
from gpufleet.policy.grouping import Owner, OwnerRef, PodTemplate

__all__ = [
    "Count",
    "Foreign",
    "Meta",
    "OwnerReader",
    "PodTemplateModel",
    "StrictBool",
    "StrictStr",
    "template_of",
    "validate_spec",
]

Count = Annotated[StrictInt, Field(ge=0, le=2**31 - 1)]


class Foreign(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class OwnerReference(Foreign):
    uid: StrictStr
    controller: StrictBool = False


class Meta(Foreign):
    name: StrictStr
    namespace: StrictStr = "default"
    uid: StrictStr = ""  # absent in a manifest not yet created; the API server sets it
    labels: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    annotations: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    ownerReferences: list[OwnerReference] = Field(default_factory=list)


class _TemplateMeta(Foreign):
    annotations: dict[StrictStr, StrictStr] = Field(default_factory=dict)


class _TemplateSpec(Foreign):
    priorityClassName: StrictStr | None = None


class PodTemplateModel(Foreign):
    metadata: _TemplateMeta = _TemplateMeta()
    spec: _TemplateSpec = _TemplateSpec()


def template_of(model: PodTemplateModel | None) -> PodTemplate:
    if model is None:
        return PodTemplate()
    grant = model.metadata.annotations.get(ANNOTATION_QUEUE_GRANT)
    return PodTemplate(priority_class=model.spec.priorityClassName or None,
                       queue_grant=QueueName(grant) if grant else None)


_M = TypeVar("_M", bound=BaseModel)


def validate_spec(model: type[_M], raw: object) -> _M:
    """``raw`` (an object's ``spec``) as ``model``; a bad field raises one :class:`FieldError`."""
    try:
        return model.model_validate(raw if raw is not None else {})
    except PydanticValidationError as err:
        first = err.errors(include_url=False)[0]
        raise FieldError(loc_path(first["loc"], "spec"), _message(first)) from None


# A reader: the owner's identity and metadata, and its raw spec, to an Owner.
OwnerReader = Callable[[OwnerRef, Meta, Mapping[str, Any]], Owner]
