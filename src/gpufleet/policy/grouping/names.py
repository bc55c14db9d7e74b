"""PodGroup names derived from owners: deterministic, a valid DNS-1123 label (pods carry the name in
their gpufleet.dev/pod-group label, at most 63 characters), and distinct for distinct owners or
units, whatever their names (the hash covers the owner's full identity, its uid included)."""

from __future__ import annotations

import functools
import hashlib
import re

from gpufleet.policy.grouping.model import OwnerRef

__all__ = ["MAX_NAME", "group_name"]

MAX_NAME = 63  # a label value
_HASH = 10  # hex digits: 40 bits
_NOT_LABEL = re.compile(r"[^a-z0-9-]+")


@functools.lru_cache(maxsize=1 << 16)  # every member pod of an owner asks for the same name
def group_name(short: str, owner: OwnerRef, unit: str = "") -> str:
    """``<short>-<owner name, cut>-<hash>``; the hash is of apiGroup, kind, namespace, name, uid, unit."""
    identity = "\x00".join((owner.api_group, owner.kind, owner.namespace, owner.name, owner.uid, unit))
    digest = hashlib.sha256(identity.encode()).hexdigest()[:_HASH]
    room = MAX_NAME - len(short) - _HASH - 2
    middle = _NOT_LABEL.sub("-", owner.name.lower())[:room].strip("-")
    return f"{short}-{middle}-{digest}" if middle else f"{short}-{digest}"
