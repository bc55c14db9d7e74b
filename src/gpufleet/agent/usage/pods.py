"""The pods of this node as the usage export needs them: :class:`PodEntry` by pod UID (a
:data:`PodIndex`), and :func:`pod_index` building one from pod objects (the kubelet's ``/pods`` or the
API server's, as JSON).

The agent service refreshes the index from its pod informer (or the kubelet); the export reads it
at each poll. Only what the cgroup of a process can name is kept: the UID, and each container's
runtime ID (``status.containerStatuses[].containerID`` without its ``containerd://`` scheme).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PodEntry", "PodIndex", "pod_index"]

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True, slots=True)
class PodEntry:
    """One pod of the node: its namespace and name, its containers' names by runtime ID, and the GPUs
    (UUIDs) it was allocated: a pod holding a GPU on which none of its processes runs is still
    exported for it, at zero, as dcgm-exporter does (so the idle rule sees an idle allocation). Fill
    ``gpus`` from a source the pod's tenant cannot write (the device plugin's record), never from
    annotations."""

    namespace: str
    name: str
    containers: Mapping[str, str] = field(default_factory=dict)
    gpus: frozenset[str] = frozenset()


PodIndex = Mapping[str, PodEntry]
"""Pod UID (lower case, dashed) -> :class:`PodEntry`."""


def _container_id(raw: object) -> str:
    text = raw if isinstance(raw, str) else ""
    return text.rsplit("://", 1)[-1].lower()


def _entry(pod: Mapping[str, Any]) -> tuple[str, PodEntry] | None:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    uid, namespace, name = meta.get("uid"), meta.get("namespace"), meta.get("name")
    if not (isinstance(uid, str) and uid and isinstance(namespace, str) and isinstance(name, str)):
        return None
    containers: dict[str, str] = {}
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for container in status.get(key) or ():
            if not isinstance(container, Mapping):
                continue
            cid, cname = _container_id(container.get("containerID")), container.get("name")
            if cid and isinstance(cname, str):
                containers[cid] = cname
    return uid.lower(), PodEntry(namespace=namespace, name=name, containers=containers)


def pod_index(pods: Iterable[Mapping[str, Any]],
              gpus: Mapping[str, frozenset[str]] | None = None) -> dict[str, PodEntry]:
    """The index of ``pods`` (pod objects as JSON; ones without a UID, namespace or name are left
    out), with ``gpus`` (pod UID -> allocated GPU UUIDs) attached.

    A static pod's cgroup is named after its config hash, which its mirror pod on the API server
    carries in the ``kubernetes.io/config.mirror`` annotation (the kubelet's own ``/pods`` gives the
    hash as the UID). The hash is added as a second key only when no pod has it as its UID and only
    one pod claims it: a tenant's pod annotated with another pod's UID or hash gains nothing."""
    index: dict[str, PodEntry] = {}
    claims: dict[str, list[PodEntry]] = {}
    allocated = gpus or {}
    for pod in pods:
        found = _entry(pod)
        if found is None:
            continue
        uid, entry = found
        if uid in allocated:
            entry = PodEntry(entry.namespace, entry.name, entry.containers, frozenset(allocated[uid]))
        index[uid] = entry
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        mirror = annotations.get(MIRROR_ANNOTATION) if isinstance(annotations, Mapping) else None
        if isinstance(mirror, str) and mirror:
            claims.setdefault(mirror.lower(), []).append(entry)
    for uid, entries in claims.items():
        if uid not in index and len(entries) == 1:
            index[uid] = entries[0]
    return index
