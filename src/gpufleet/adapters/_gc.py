"""The cyclic garbage collector paused while an adapter builds tens of thousands of objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["no_gc"]


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic collector: the records built hold no cycles, and its repeated passes over
    them cost a third of Philly's load time and half of reading a cluster's DRA objects."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
