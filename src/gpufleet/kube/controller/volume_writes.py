"""The volume writes before a pod's Binding, as kube-scheduler's VolumeBinding PreBind makes them.

For each volume a binding chose (:attr:`gpufleet.domain.Binding.volumes`, docs/semantics-notes.md,
"Volumes"):

- a chosen PersistentVolume gets ``spec.claimRef`` (apiVersion v1, kind PersistentVolumeClaim, the
  claim's namespace, name and uid) and the annotation ``pv.kubernetes.io/bound-by-controller: "yes"``;
  the PV controller then binds the claim to it;
- a claim to provision gets the annotation ``volume.kubernetes.io/selected-node: <node>``; the
  external provisioner then creates a volume reachable from that node.

A PV whose claimRef already names the claim (pre-bound by its owner) only gets the claim's uid
filled in, without the annotation, as kube-scheduler does. The objects are those of the informers'
cache. A write already in place (an earlier cycle wrote it
and the Binding failed, or the controller restarted in between) is not made again. Each write is a
JSON merge patch carrying the cached ``metadata.resourceVersion`` as a precondition, as
kube-scheduler's updates do: a PV that changed meanwhile (the PV controller gave it to another
claim) is answered 409 and is never taken over; the pod's gang is then decided again with the new
state. This module only says what to write; :class:`gpufleet.kube.controller.binder.Binder` writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.domain import Binding
from gpufleet.domain.wire import ANNOTATION_BOUND_BY_CONTROLLER, ANNOTATION_SELECTED_NODE
from gpufleet.kube.client.port import Kind

__all__ = ["CachedObject", "VolumeWrite", "VolumeWriteProblem", "claim_ref", "volume_writes"]

JsonDict = dict[str, Any]
CachedObject = Callable[[Kind, str, str], Mapping[str, Any] | None]  # (kind, namespace, name) -> object


class VolumeWriteProblem(Exception):
    """A volume write that cannot even be made (its claim or PV is not in the cache), in one line."""


@dataclass(frozen=True, slots=True)
class VolumeWrite:
    kind: Kind  # PERSISTENT_VOLUME or PERSISTENT_VOLUME_CLAIM
    namespace: str  # "" for a PV
    name: str
    patch: JsonDict
    what: str  # for messages: 'persistentvolumeclaim "data": the claimRef of persistentvolume "pv-1"'

    @property
    def target(self) -> tuple[Kind, str, str]:
        return (self.kind, self.namespace, self.name)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations = _meta(obj).get("annotations")
    return annotations if isinstance(annotations, Mapping) else {}


def _precondition(obj: Mapping[str, Any]) -> JsonDict:
    version = _meta(obj).get("resourceVersion")
    return {"resourceVersion": str(version)} if version else {}


def claim_ref(namespace: str, name: str, uid: str) -> JsonDict:
    """The ``spec.claimRef`` of a PV bound to the claim ``namespace/name`` of ``uid``."""
    ref: JsonDict = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": namespace, "name": name}
    if uid:
        ref["uid"] = uid
    return ref


def _pv_write(namespace: str, claim: str, claim_obj: Mapping[str, Any], pv_name: str,
              cached: CachedObject) -> VolumeWrite | None:
    what = f'persistentvolumeclaim "{claim}": the claimRef of persistentvolume "{pv_name}"'
    pv = cached(Kind.PERSISTENT_VOLUME, "", pv_name)
    if pv is None:
        raise VolumeWriteProblem(f'persistentvolumeclaim "{claim}": persistentvolume "{pv_name}" not found')
    uid = str(_meta(claim_obj).get("uid") or "")
    spec = pv.get("spec")
    current = spec.get("claimRef") if isinstance(spec, Mapping) else None
    current = current if isinstance(current, Mapping) else {}
    # As kube-scheduler's GetBindVolumeToClaim: a PV already bound to the claim (by the user, whose
    # claimRef may lack the uid) is not marked bound by a controller; the uid is filled in.
    named = current.get("namespace") == namespace and current.get("name") == claim
    bound = named and current.get("uid") in (None, "", uid)
    meta: JsonDict = {}
    if not bound and ANNOTATION_BOUND_BY_CONTROLLER not in _annotations(pv):
        meta["annotations"] = {ANNOTATION_BOUND_BY_CONTROLLER: "yes"}
    patch: JsonDict = {}
    if not named or (current.get("uid") or "") != uid:
        patch["spec"] = {"claimRef": claim_ref(namespace, claim, uid)}
    if not meta and not patch:
        return None  # already in place
    patch["metadata"] = meta | _precondition(pv)
    return VolumeWrite(Kind.PERSISTENT_VOLUME, "", pv_name, patch, what)


def _claim_write(namespace: str, claim: str, claim_obj: Mapping[str, Any], node: str) -> VolumeWrite | None:
    if _annotations(claim_obj).get(ANNOTATION_SELECTED_NODE) == node:
        return None  # already in place
    patch = {"metadata": {"annotations": {ANNOTATION_SELECTED_NODE: node}} | _precondition(claim_obj)}
    what = f'persistentvolumeclaim "{claim}": its {ANNOTATION_SELECTED_NODE} annotation'
    return VolumeWrite(Kind.PERSISTENT_VOLUME_CLAIM, namespace, claim, patch, what)


def volume_writes(binding: Binding, cached: CachedObject) -> list[VolumeWrite]:
    """The writes ``binding``'s volumes still need, in claim order; raises
    :class:`VolumeWriteProblem` when a claim or a chosen PV is not in the cache (deleted meanwhile)."""
    namespace = str(binding.pod).partition("/")[0]
    writes: list[VolumeWrite] = []
    for chosen in binding.volumes:
        claim_obj = cached(Kind.PERSISTENT_VOLUME_CLAIM, namespace, chosen.claim)
        if claim_obj is None:
            raise VolumeWriteProblem(f'persistentvolumeclaim "{chosen.claim}" not found')
        if chosen.volume is not None:
            write = _pv_write(namespace, chosen.claim, claim_obj, chosen.volume, cached)
        else:
            write = _claim_write(namespace, chosen.claim, claim_obj, str(binding.node))
        if write is not None:
            writes.append(write)
    return writes
