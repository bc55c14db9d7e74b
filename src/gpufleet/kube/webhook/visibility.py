"""Refuse GPU visibility that a pod sets itself (pure; no I/O).

A container gets GPUs from a device plugin (``nvidia.com/gpu``, gpufleet's ``gpufleet.dev/mps-share``)
or a DRA claim, through the kubelet, never from its own pod spec. But the NVIDIA container runtime
also reads a device list from places a tenant can write, and a pod that names GPUs there gets them
on any GPU node, whatever the scheduler counted:

- the env vars ``NVIDIA_VISIBLE_DEVICES``, ``NVIDIA_MIG_CONFIG_DEVICES`` and
  ``NVIDIA_MIG_MONITOR_DEVICES`` of a container (init and ephemeral containers too);
- volume mounts at or under ``/var/run/nvidia-container-devices`` (the runtime's volume-mount list);
- CDI annotations ``cdi.k8s.io/*`` on the pod (containerd and CRI-O inject the devices they name);
- hostPath volumes that reach the GPU device nodes (``/dev/nvidia*``), the MPS DaemonSet's root
  (every GPU's pipe and shared memory), the kubelet's device-plugin sockets, or the CDI spec
  directories (``/etc/cdi``, ``/var/run/cdi``), including any directory above them (``/``, ``/dev``);
- the resource ``gpufleet.dev/mps-share`` in a pod that is not a fractional pod of gpufleet's (the
  webhook gives it to those only; gpufleet's device plugin answers it with an MPS share of a GPU);
- ``spec.resourceClaims`` in a new pod of another scheduler: kube-scheduler would allocate its DRA
  devices (GPUs included) outside gpufleet's quota; gpufleet is the allocator of the namespaces this
  entry covers (docs/gpu-assignment.md; workloads of other DRA drivers go in its excluded namespaces);
- the scheduler-owned annotations ``gpufleet.dev/gpu-index`` and ``gpufleet.dev/mps-mem-limit`` on a
  new pod of another scheduler (gpufleet's device plugin reads them; on gpufleet's own pods the
  scheduler overwrites them at binding, and fractional ones are refused by the preset rule).

:func:`visibility_denial` finds the first such field of an admitted pod and says which, in one line
(docs/fractional-gpus.md lists the messages). Env vars set through ``envFrom`` (a ConfigMap or a
Secret) cannot be seen at admission: the node runtime setting
``accept-nvidia-visible-devices-envvar-when-unprivileged = false`` closes that path (and the
``NVIDIA_VISIBLE_DEVICES=all`` of CUDA images) for unprivileged containers.

At ``UPDATE`` only what an update can change is checked: CDI annotations added or changed, and
the containers of a ``pods/ephemeralcontainers`` update (the scheduler-owned annotations are guarded
at updates by the ValidatingAdmissionPolicy: only the controller may change them).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping
from typing import Any

from gpufleet.domain.wire import (
    ANNOTATION_GPU_INDEX,
    ANNOTATION_MPS_MEM_LIMIT,
    MPS_HOST_ROOT,
    RESOURCE_MPS_SHARE,
    SCHEDULER_NAME,
)

__all__ = [
    "CDI_ANNOTATION_PREFIX",
    "DEVICE_LIST_MOUNT_DIR",
    "PROTECTED_HOST_DIRS",
    "SCHEDULER_OWNED_ANNOTATIONS",
    "VISIBILITY_ENV_VARS",
    "VISIBILITY_REASON",
    "visibility_denial",
]

VISIBILITY_ENV_VARS = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES")
DEVICE_LIST_MOUNT_DIR = "/var/run/nvidia-container-devices"
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
# Host directories no tenant pod may mount (nor any directory above them); the MPS root is added
# from the webhook's --mps-host-dir.
PROTECTED_HOST_DIRS = ("/var/lib/kubelet/device-plugins", "/etc/cdi", "/var/run/cdi")
_DEVICE_NODES = "/dev/nvidia"  # /dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-caps/...
SCHEDULER_OWNED_ANNOTATIONS = (ANNOTATION_GPU_INDEX, ANNOTATION_MPS_MEM_LIMIT)
VISIBILITY_REASON = "a pod may not choose the GPUs it sees; request GPUs as resources"
_SECTIONS = ("initContainers", "containers", "ephemeralContainers")


def _clean(path: str) -> str:
    """``path`` as the host resolves it: absolute, normalised, ``/var/run`` as ``/run`` (a symlink
    on every distribution the NVIDIA runtime supports)."""
    clean = posixpath.normpath("/" + path.lstrip("/"))
    if clean == "/var/run" or clean.startswith("/var/run/"):
        clean = "/run" + clean[len("/var/run"):]
    return clean


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _reached(path: str, mps_root: str) -> str | None:
    """The protected place a hostPath of ``path`` reaches (at, under or above it), if any."""
    host = _clean(path)
    if host.startswith(_DEVICE_NODES) or _within(_DEVICE_NODES.rsplit("/", 1)[0], host):
        return f"{_DEVICE_NODES}*"
    for root in (mps_root, *PROTECTED_HOST_DIRS):
        clean_root = _clean(root)
        if _within(host, clean_root) or _within(clean_root, host):
            return root
    return None


def _containers(spec: Mapping[str, Any], sections: tuple[str, ...]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    for section in sections:
        containers = spec.get(section)
        if isinstance(containers, list):
            for index, container in enumerate(containers):
                if isinstance(container, dict):
                    yield section, index, container


def _container_denial(section: str, index: int, container: Mapping[str, Any], may_share: bool) -> str | None:
    where = f"spec.{section}[{index}]"
    who = f"(container {container.get('name', '?')!s})"
    env = container.get("env")
    for i, entry in enumerate(env if isinstance(env, list) else []):
        if isinstance(entry, dict) and entry.get("name") in VISIBILITY_ENV_VARS:
            return f"{where}.env[{i}] {who} sets {entry['name']}: {VISIBILITY_REASON}"
    mounts = container.get("volumeMounts")
    for i, mount in enumerate(mounts if isinstance(mounts, list) else []):
        path = mount.get("mountPath") if isinstance(mount, dict) else None
        if isinstance(path, str) and _within(_clean(path), _clean(DEVICE_LIST_MOUNT_DIR)):
            return (f"{where}.volumeMounts[{i}] {who} mounts at {path}, under {DEVICE_LIST_MOUNT_DIR}: "
                    f"{VISIBILITY_REASON}")
    resources = container.get("resources")
    if not may_share and isinstance(resources, dict):
        for kind in ("limits", "requests"):
            amounts = resources.get(kind)
            if isinstance(amounts, dict) and RESOURCE_MPS_SHARE in amounts:
                return (f"{where}.resources.{kind}[{RESOURCE_MPS_SHARE}] {who}: only fractional pods of gpufleet's "
                        f"get {RESOURCE_MPS_SHARE} (from its webhook); {VISIBILITY_REASON}")
    return None


def _cdi_denial(annotations: object, old: object) -> str | None:
    if not isinstance(annotations, dict):
        return None
    before = old if isinstance(old, dict) else {}
    for key, value in annotations.items():
        if isinstance(key, str) and key.startswith(CDI_ANNOTATION_PREFIX) and before.get(key) != value:
            return f"metadata.annotations[{key}] names CDI devices: {VISIBILITY_REASON}"
    return None


def _annotations(obj: object) -> object:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta.get("annotations") if isinstance(meta, dict) else None


def visibility_denial(request: Mapping[str, Any], fractional_of_ours: bool,
                      mps_root: str = MPS_HOST_ROOT) -> str | None:
    """The first field of the pod in ``request`` (an AdmissionRequest of a Pod) that sets GPU
    visibility, as one line; None when there is none. ``fractional_of_ours``: the pod may hold
    ``gpufleet.dev/mps-share`` (the webhook adds it to those)."""
    pod = request.get("object")
    if not isinstance(pod, dict):
        return None
    operation, sub = request.get("operation"), request.get("subResource") or ""
    spec = pod.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    if operation == "UPDATE" and sub == "ephemeralcontainers":
        for section, index, container in _containers(spec, ("ephemeralContainers",)):
            denial = _container_denial(section, index, container, may_share=fractional_of_ours)
            if denial is not None:
                return denial
        return None
    if operation not in ("CREATE", "UPDATE") or sub:
        return None
    old = request.get("oldObject") if operation == "UPDATE" else None
    denial = _cdi_denial(_annotations(pod), _annotations(old))
    if denial is not None or operation == "UPDATE":
        return denial  # env, mounts, volumes and resources cannot change at an update
    annotations = _annotations(pod)
    claims = spec.get("resourceClaims")
    if spec.get("schedulerName") != SCHEDULER_NAME and isinstance(claims, list) and claims:
        return (f"spec.resourceClaims: a pod of scheduler {spec.get('schedulerName') or 'default-scheduler'} would get "
                f"its devices from kube-scheduler, outside gpufleet's quota; set schedulerName: {SCHEDULER_NAME}")
    if spec.get("schedulerName") != SCHEDULER_NAME and isinstance(annotations, dict):
        for key in SCHEDULER_OWNED_ANNOTATIONS:
            if key in annotations:
                return (f"metadata.annotations[{key}] is written by gpufleet's scheduler at binding and read by its "
                        f"device plugin; a pod of scheduler {spec.get('schedulerName') or 'default-scheduler'} "
                        f"may not set it: {VISIBILITY_REASON}")
    for section, index, container in _containers(spec, _SECTIONS):
        denial = _container_denial(section, index, container, may_share=fractional_of_ours)
        if denial is not None:
            return denial
    volumes = spec.get("volumes")
    for i, volume in enumerate(volumes if isinstance(volumes, list) else []):
        host = volume.get("hostPath") if isinstance(volume, dict) else None
        path = host.get("path") if isinstance(host, dict) else None
        reached = _reached(path, mps_root) if isinstance(path, str) else None
        if reached is not None:
            return (f"spec.volumes[{i}] (volume {volume.get('name', '?')!s}) is a hostPath of {path}, "
                    f"which reaches {reached}: {VISIBILITY_REASON}")
    return None
