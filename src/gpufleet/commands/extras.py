"""The optional parts of the package (its extras) that a command needs, checked before the work starts.

``gpufleet[reports]`` (matplotlib) draws the HTML reports' figures; the container image leaves it out
so that the controller's image stays small. A command asked for a report checks for it first, so the
user learns which extra to install in one line, exit 2, before a long run rather than after it.
"""

from __future__ import annotations

import importlib

from gpufleet.commands.base import CommandError

__all__ = ["REPORTS_EXTRA", "require_reports_extra"]

REPORTS_EXTRA = "pip install 'gpufleet[reports]'"


def require_reports_extra(what: str) -> None:
    """Raise :class:`CommandError` (exit 2) naming the ``reports`` extra when matplotlib cannot be imported."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        raise CommandError(f"{what} needs the reports extra: {REPORTS_EXTRA}") from None
