"""A snapshot file's text into documents, JSON or YAML (private to the adapters).

The format: ``json`` when asked for, or for a ``.json`` file; YAML for a ``.yaml`` or ``.yml`` file;
otherwise JSON when the first character that is not white space is ``{`` or ``[`` and the text is
JSON, else YAML (a YAML flow document begins the same way). Malformed input of a file named or sniffed
as JSON is reported as malformed JSON, with its line and column.
"""

from __future__ import annotations

from typing import Any

from gpufleet.adapters._json_parse import is_json_source, looks_like_json, parse_json_documents
from gpufleet.adapters._yaml_parse import parse_documents
from gpufleet.adapters.errors import InputError

__all__ = ["parse_input"]


def parse_input(text: str, source: str, *, json: bool | None = None) -> list[Any]:
    """The documents of ``text`` (see the module's description); ``json`` True or False decides
    the format instead of the source's name and the text's first character."""
    if json is None:
        json = is_json_source(source)
    if json:
        return parse_json_documents(text, source)
    if json is None and looks_like_json(text):
        try:
            return parse_json_documents(text, source)
        except InputError as json_error:
            try:
                return parse_documents(text, source)
            except InputError:
                raise json_error from None
    return parse_documents(text, source)
