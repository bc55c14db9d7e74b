"""PersistentVolumeClaims, PersistentVolumes and StorageClasses as an API server holds them, for the
controller's volume tests (after the Kubernetes documentation's examples: a local PV pinned to a
node by its node affinity, a WaitForFirstConsumer class of a CSI provisioner)."""

from __future__ import annotations

from typing import Any

LOCAL = "local-storage"  # kubernetes.io/no-provisioner, WaitForFirstConsumer: pre-created local PVs
FAST = "fast-ssd"  # a CSI provisioner, WaitForFirstConsumer
SELECTED = "volume.kubernetes.io/selected-node"  # what the controller writes on a claim to provision
BOUND_BY = "pv.kubernetes.io/bound-by-controller"  # and on a PV whose claimRef it writes


def storage_class(name: str, provisioner: str, *, wait: bool = True, default: bool = False) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name}, "provisioner": provisioner,
                           "volumeBindingMode": "WaitForFirstConsumer" if wait else "Immediate"}
    if default:
        obj["metadata"]["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    return obj


def local_pv(name: str, node: str, size: str = "100Gi", storage_class_name: str = LOCAL) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Filesystem",
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": storage_class_name,
            "local": {"path": "/mnt/disks/ssd1"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
        },
        "status": {"phase": "Available"},
    }


def claim(name: str, storage_class_name: str | None = FAST, size: str = "50Gi", *, namespace: str = "ml",
          annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if storage_class_name is not None:
        spec["storageClassName"] = storage_class_name
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def with_claims(pod: dict[str, Any], *claims: str) -> dict[str, Any]:
    """``pod`` mounting the PersistentVolumeClaims ``claims`` (volumes named after them)."""
    volumes = [{"name": f"vol-{c}", "persistentVolumeClaim": {"claimName": c}} for c in claims]
    return {**pod, "spec": {**pod["spec"], "volumes": volumes}}
