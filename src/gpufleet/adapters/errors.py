"""The one exception the adapters raise for bad input."""

from __future__ import annotations

__all__ = ["InputError", "describe"]


class InputError(Exception):
    """Invalid input, described in exactly one human-readable line.

    The line names the source file and, where known, the document, the object and the field, e.g.
    ``snap.yaml: document 7 (Queue team-a): spec.resources.nvidia.com/gpu.quota: negative quantity "-1"``.
    Front ends print ``str(err)`` and exit with status 2.
    """

    def __init__(self, message: str) -> None:
        line = " ".join(part.strip() for part in message.splitlines() if part.strip())
        super().__init__(line)
        self.message = line

    def __str__(self) -> str:
        return self.message


def describe(value: object) -> str:
    """A short one-line rendering of a YAML value for error messages (strings quoted)."""
    if isinstance(value, str):
        text = value if len(value) <= 60 else value[:57] + "..."
        escaped = text.encode("unicode_escape").decode("ascii").replace('"', '\\"')
        return f'"{escaped}"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, int | float):
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    return f"a {type(value).__name__}"
