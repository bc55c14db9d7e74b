"""Which pod a process belongs to, read from its ``/proc/<pid>/cgroup`` text: pure parsing, no I/O.

The kubelet puts every container in a cgroup under its pod's, named after the pod's UID, whatever
the cgroup version, driver or runtime (kubernetes ``pkg/kubelet/cm``, ``cgroup_manager_linux.go``):

- systemd driver: ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/
  cri-containerd-<id>.scope``, the UID's dashes turned to underscores (``besteffort`` likewise;
  Guaranteed pods sit directly under ``kubepods.slice`` as ``kubepods-pod<uid>.slice``); the
  container's scope is ``cri-containerd-``, ``crio-`` or ``docker-`` (cri-dockerd) and its ID;
- cgroupfs driver: ``/kubepods/burstable/pod<uid>/<id>`` (Guaranteed: ``/kubepods/pod<uid>/<id>``);
- cgroup v2 gives one line ``0::<path>``; v1 one line per hierarchy (``4:memory:<path>``,
  ``1:name=systemd:<path>``), each naming the same pod; hybrid hosts add ``0::/``;
- read from a process in a private cgroup namespace (the agent's container, unless it shares the
  host's), paths are relative to the reader's own cgroup: ``0::/../../kubepods-...-pod<uid>.slice/...``;
  nested clusters (kind) put the whole tree under another prefix (``/kubelet.slice/kubelet-kubepods...``
  or ``/docker/<id>/kubepods/...``).

So the parser looks, in every line, for the path segment that ends in ``pod<uid>`` (or
``pod<uid>.slice``), and takes the segment after it as the container's. Anything else (a host
process, a system service, text that is not a cgroup file at all) gives ``None``; nothing raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CgroupOwner", "parse_cgroup", "parse_start_time"]


@dataclass(frozen=True, slots=True)
class CgroupOwner:
    """The pod (its UID, lower case, dashed) and the container (its runtime ID, without the runtime's
    ``containerd://`` scheme; ``""`` when the process sits in the pod's cgroup but no container's, as
    CRI-O's ``conmon`` does) a process belongs to."""

    pod_uid: str
    container_id: str


_HEX = "[0-9a-fA-F]"
# A pod UID: a dashed (or, in systemd slice names, underscored) UUID, or a static pod's 32-hex hash.
_UID = rf"{_HEX}{{8}}[-_]{_HEX}{{4}}[-_]{_HEX}{{4}}[-_]{_HEX}{{4}}[-_]{_HEX}{{12}}|{_HEX}{{32}}"
# The pod's segment: ``pod<uid>`` (cgroupfs) or ``<kubepods prefix>-pod<uid>.slice`` (systemd).
_POD_SEGMENT = re.compile(rf"(?:([\w.-]*)-)?pod({_UID})(\.slice)?")
# The container's segment: ``<id>`` (cgroupfs) or ``<runtime>-<id>.scope`` (systemd); IDs are 64 hex.
_CONTAINER_SEGMENT = re.compile(rf"(?:(?:cri-containerd|crio|docker|cri-o|containerd)-)?({_HEX}{{64}})(?:\.scope)?")


def _uid(raw: str) -> str:
    return raw.replace("_", "-").lower()


def _owner_of_path(path: str) -> CgroupOwner | None:
    segments = path.split("/")
    for at, segment in enumerate(segments):
        pod = _POD_SEGMENT.fullmatch(segment) if "pod" in segment else None
        if pod is None:
            continue
        prefix, uid, dot_slice = pod.groups()
        # ``pod<uid>`` (cgroupfs), or a systemd slice of the kubepods tree (``kubepods-...``,
        # ``kubelet-kubepods-...``): another unit's ``foo-pod<hex>.slice`` is not a pod's
        if (prefix is None) != (dot_slice is None) or (prefix is not None and "kubepods" not in prefix):
            continue
        after = segments[at + 1] if at + 1 < len(segments) else ""
        container = _CONTAINER_SEGMENT.fullmatch(after)
        return CgroupOwner(_uid(uid), container.group(1).lower() if container else "")
    return None


def parse_cgroup(text: str) -> CgroupOwner | None:
    """The pod and container of a ``/proc/<pid>/cgroup`` text, or ``None`` for a process in no pod's
    cgroup (and for any text that is not a cgroup file). Lines are ``<id>:<controllers>:<path>``;
    the first line naming a pod decides (in v1 every hierarchy names the same pod)."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or "pod" not in parts[2]:
            continue
        owner = _owner_of_path(parts[2].strip())
        if owner is not None:
            return owner
    return None


def parse_start_time(stat: str) -> int | None:
    """Field 22 of a ``/proc/<pid>/stat`` text (``starttime``: clock ticks after boot when the process
    started), or ``None`` for text that is not one. With the PID it names a process for good: a PID
    the kernel hands out again belongs to a process that started later.

    The command name (field 2) is in parentheses and may itself hold spaces and parentheses, so the
    fields are counted after the last ``)``."""
    close = stat.rfind(")")
    if close < 0:
        return None
    fields = stat[close + 1:].split()
    if len(fields) < 20:  # fields 3 (state) .. 22 (starttime)
        return None
    value = fields[19]
    return int(value) if value.isascii() and value.isdigit() else None
