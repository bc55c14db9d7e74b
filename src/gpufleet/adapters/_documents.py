"""One YAML file holding one document of ours (a ClusterSpec, a prices file), validated by its pydantic
model: the one rule for reading such files, with one line naming the file and the field on bad input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import ErrorDetails

from gpufleet.adapters._k8s_models import _message, loc_path
from gpufleet.adapters._yaml_parse import parse_documents
from gpufleet.adapters.errors import InputError, describe

__all__ = ["one_document"]

M = TypeVar("M", bound=BaseModel)


def one_document(text: str, source: str, model: type[M], what: str, mapping: str,
                 message: Callable[[ErrorDetails], str] = _message) -> M:
    """The one document of ``text`` as ``model``. ``what`` names the document (``ClusterSpec``) and
    ``mapping`` what a mapping of it holds, for the messages; ``message`` words a field's error."""
    docs = [doc for doc in parse_documents(text, source) if doc is not None]
    if len(docs) != 1:
        raise InputError(f"{source}: expected one {what} document, got {len(docs)}")
    raw: Any = docs[0]
    if not isinstance(raw, dict):
        raise InputError(f"{source}: expected {mapping}, got {describe(raw)}")
    try:
        return model.model_validate(raw)
    except PydanticValidationError as err:
        first = err.errors(include_url=False)[0]
        raise InputError(f"{source}: {loc_path(first['loc']) or '(top)'}: {message(first)}") from None
