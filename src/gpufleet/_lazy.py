"""Package faces that import on first use.

A package's ``__init__`` names what its neighbours may use; importing every module behind those
names up front would make ``gpufleet replay`` pay for the simulator's matplotlib, the controller's
aiohttp or lightkube. :func:`lazy_exports` gives the package a module ``__getattr__`` (PEP 562)
that imports the module behind a name when the name is first read, and keeps it. Type checkers
and import-linter read the same names from the package's ``if TYPE_CHECKING:`` imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, where: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package`` that finds each name of ``where`` in the module
    ``where[name]``."""

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next read does not come here
        return value

    return __getattr__
