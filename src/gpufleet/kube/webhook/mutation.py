"""What the admission webhook changes in a fractional-GPU pod of gpufleet's (pure; no I/O).

A fractional pod (annotation ``gpufleet.dev/gpu-blocks`` or ``gpufleet.dev/gpu-memory``, and
``spec.schedulerName: gpufleet``) does not request ``nvidia.com/gpu``, so the NVIDIA device plugin
gives it nothing: the webhook connects it to its share of a GPU instead. Every container (init
containers included) gets, in this order (later entries use ``$(GPUFLEET_GPU_INDEX)``, which the
kubelet expands from the entry before them):

- ``GPUFLEET_GPU_INDEX`` and ``NVIDIA_VISIBLE_DEVICES``: downward API references to the
  ``gpufleet.dev/gpu-index`` annotation the scheduler writes at bind time. The NVIDIA container
  runtime exposes exactly that GPU; the value also overrides the ``NVIDIA_VISIBLE_DEVICES=all`` that
  CUDA base images set. Missing annotation: an empty value, which exposes no GPU (fails closed).
- ``CUDA_MPS_PIPE_DIRECTORY``: the pipe directory of that GPU's MPS control daemon.
- ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``: from ``gpufleet.dev/gpu-blocks`` (a block is 1 %).
- ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``: from ``gpufleet.dev/mps-mem-limit``.

plus two hostPath volumes: the MPS root (pipes of every GPU) and its ``shm`` directory mounted at
``/dev/shm``, which MPS clients share with the server. Both use ``type: Directory``, so a pod placed
on a node without the MPS DaemonSet fails to start instead of running without limits.

The mutation is expressed as the desired pod; the webhook diffs it against the admitted pod into a
JSONPatch. Entries of ours that a user already set are replaced, not duplicated, and a pod that
already has everything gives an empty diff: admitting a pod twice changes nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.adapters import FieldError, pod_from_dict
from gpufleet.domain import (
    ANNOTATION_GPU_BLOCKS,
    ANNOTATION_GPU_INDEX,
    ANNOTATION_GPU_MEMORY,
    ANNOTATION_MPS_MEM_LIMIT,
    SCHEDULER_NAME,
)
from gpufleet.domain.units import blocks_for_gpu_memory
from gpufleet.kube.webhook.annotations import mps_memory_limit

__all__ = [
    "ENV_GPU_INDEX",
    "MPS_MOUNT_PATH",
    "MutationSettings",
    "PodMutation",
    "mutate_pod",
    "without_our_volumes",
]

ENV_GPU_INDEX = "GPUFLEET_GPU_INDEX"
ENV_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
ENV_PIPE_DIRECTORY = "CUDA_MPS_PIPE_DIRECTORY"
ENV_THREAD_PERCENTAGE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
ENV_MEM_LIMIT = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"

VOLUME_MPS = "gpufleet-mps"
VOLUME_SHM = "gpufleet-mps-shm"
MPS_MOUNT_PATH = "/run/gpufleet/mps"  # where the MPS root appears inside client containers
SHM_MOUNT_PATH = "/dev/shm"
DEFAULT_MPS_HOST_DIR = "/run/gpufleet/mps"

_FRACTIONAL_PATHS = (f"metadata.annotations.{ANNOTATION_GPU_BLOCKS}", f"metadata.annotations.{ANNOTATION_GPU_MEMORY}")


@dataclass(frozen=True, slots=True)
class MutationSettings:
    """How the webhook wires a fractional pod to MPS on its node."""

    mps_host_dir: str = DEFAULT_MPS_HOST_DIR  # the DaemonSet's hostPath: <dir>/gpu-<i>/pipe, <dir>/shm
    # Static mode, for fleets whose GPUs all have this much memory: the memory limit (and the thread
    # percentage of gpu-memory pods) are written as plain values at admission instead of being read
    # from annotations at bind time. None: read them from the scheduler's bind-time annotations.
    gpu_memory_mib: int | None = None
    # Added to the pod's nodeSelector (keys it already has win): keep fractional pods on the nodes
    # where the MPS DaemonSet runs.
    node_selector: Mapping[str, str] = field(default_factory=dict)
    runtime_class: str | None = None  # set as spec.runtimeClassName when the pod names none


@dataclass(frozen=True, slots=True)
class PodMutation:
    """The outcome for one admitted pod.

    ``denial``: a one-line reason to reject the pod (its fractional annotations are invalid);
    otherwise ``pod`` is the desired pod (the input itself when nothing is to change) and
    ``warnings`` are lines for the user (``kubectl`` prints them)."""

    pod: Mapping[str, Any]
    warnings: tuple[str, ...] = ()
    denial: str | None = None
    fractional: bool = False


def _annotation_ref(key: str) -> dict[str, Any]:
    return {"fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.annotations['{key}']"}}


def _our_env(settings: MutationSettings, static_blocks: int | None) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": ENV_GPU_INDEX, "valueFrom": _annotation_ref(ANNOTATION_GPU_INDEX)},
        {"name": ENV_VISIBLE_DEVICES, "valueFrom": _annotation_ref(ANNOTATION_GPU_INDEX)},
        {"name": ENV_PIPE_DIRECTORY, "value": f"{MPS_MOUNT_PATH}/gpu-$({ENV_GPU_INDEX})/pipe"},
    ]
    if static_blocks is not None and settings.gpu_memory_mib is not None:
        env.append({"name": ENV_THREAD_PERCENTAGE, "value": str(static_blocks)})
        env.append({"name": ENV_MEM_LIMIT, "value": mps_memory_limit(static_blocks, settings.gpu_memory_mib)})
    else:
        env.append({"name": ENV_THREAD_PERCENTAGE, "valueFrom": _annotation_ref(ANNOTATION_GPU_BLOCKS)})
        env.append({"name": ENV_MEM_LIMIT, "valueFrom": _annotation_ref(ANNOTATION_MPS_MEM_LIMIT)})
    return env


def _our_volumes(settings: MutationSettings) -> list[dict[str, Any]]:
    root = settings.mps_host_dir.rstrip("/") or "/"
    return [
        {"name": VOLUME_MPS, "hostPath": {"path": root, "type": "Directory"}},
        {"name": VOLUME_SHM, "hostPath": {"path": f"{root}/shm", "type": "Directory"}},
    ]


def _with_ours(items: list[Any], ours: list[dict[str, Any]], key: str) -> list[Any]:
    """``items`` without the entries named like ours, then ours (in our order)."""
    names = {entry[key] for entry in ours}
    kept = [item for item in items if not (isinstance(item, dict) and item.get(key) in names)]
    return kept + copy.deepcopy(ours)  # each container gets its own entries, never shared ones


def _wire_container(container: dict[str, Any], env: list[dict[str, Any]], where: str, warnings: list[str]) -> None:
    raw_env = container.get("env")
    container["env"] = _with_ours(raw_env if isinstance(raw_env, list) else [], env, "name")
    raw_mounts = container.get("volumeMounts")
    mounts: list[Any] = raw_mounts if isinstance(raw_mounts, list) else []
    ours = [{"name": VOLUME_MPS, "mountPath": MPS_MOUNT_PATH}]
    shm_taken = any(
        isinstance(m, dict) and m.get("mountPath") in (SHM_MOUNT_PATH, SHM_MOUNT_PATH + "/")
        and m.get("name") != VOLUME_SHM
        for m in mounts
    )
    if shm_taken:
        warnings.append(
            f"{where} mounts its own {SHM_MOUNT_PATH}: MPS clients need the MPS server's {SHM_MOUNT_PATH}, "
            "so CUDA in this container may fail to connect to MPS"
        )
    else:
        ours.append({"name": VOLUME_SHM, "mountPath": SHM_MOUNT_PATH})
    container["volumeMounts"] = _with_ours(mounts, ours, "name")


def _validate(pod: Mapping[str, Any], namespace: str | None) -> tuple[int | None, int | None, str | None, str | None]:
    """(gpu blocks, gpu memory bytes, denial, warning) as the scheduler's loader reads the pod.

    The loader is the one place that knows what gpufleet accepts, so the webhook asks it rather than
    repeating its rules. A pod created with ``generateName`` has no name yet at admission; it gets a
    stand-in so that only real problems are reported."""
    candidate = dict(pod)
    raw_meta = pod.get("metadata")
    meta: dict[str, Any] = dict(raw_meta) if isinstance(raw_meta, dict) else {}
    if not meta.get("name"):
        meta["name"] = f"{meta.get('generateName') or 'pod-'}(generated)"
    if not meta.get("namespace") and namespace:
        meta["namespace"] = namespace
    candidate["metadata"] = meta
    try:
        parsed = pod_from_dict(candidate)
    except FieldError as err:
        line = f"{err.path}: {err.message}" if err.path else err.message
        if err.path in _FRACTIONAL_PATHS:
            return None, None, line, None
        return None, None, None, f"gpufleet cannot read this pod and will leave it pending: {line}"
    return parsed.gpu_blocks, parsed.gpu_memory_bytes, None, None


def is_fractional_pod_of_ours(pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec")
    meta = pod.get("metadata")
    if not isinstance(spec, dict) or spec.get("schedulerName") != SCHEDULER_NAME or not isinstance(meta, dict):
        return False
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        return False
    return ANNOTATION_GPU_BLOCKS in annotations or ANNOTATION_GPU_MEMORY in annotations


def mutate_pod(pod: Mapping[str, Any], settings: MutationSettings, *, namespace: str | None = None) -> PodMutation:
    """The desired form of an admitted pod (see the module docstring); never raises on odd input."""
    if not is_fractional_pod_of_ours(pod):
        return PodMutation(pod=pod)
    blocks, memory, denial, warning = _validate(pod, namespace)
    if denial is not None:
        return PodMutation(pod=pod, denial=denial, fractional=True)
    warnings: list[str] = [warning] if warning else []

    static_blocks: int | None = None
    if settings.gpu_memory_mib is not None:
        if blocks is not None:
            static_blocks = blocks
        elif memory is not None:
            static_blocks = blocks_for_gpu_memory(memory, settings.gpu_memory_mib)
            if static_blocks is None:
                return PodMutation(
                    pod=pod,
                    denial=(
                        f"metadata.annotations.{ANNOTATION_GPU_MEMORY}: more than one GPU of this cluster "
                        f"has ({settings.gpu_memory_mib} MiB)"
                    ),
                    fractional=True,
                )

    desired: dict[str, Any] = copy.deepcopy(dict(pod))
    spec: dict[str, Any] = desired["spec"]
    env = _our_env(settings, static_blocks)
    for section in ("initContainers", "containers"):
        containers = spec.get(section)
        if not isinstance(containers, list):
            continue
        for index, container in enumerate(containers):
            if isinstance(container, dict):
                _wire_container(container, env, f"{section}[{index}] ({container.get('name', '?')})", warnings)
    raw_volumes = spec.get("volumes")
    spec["volumes"] = _with_ours(raw_volumes if isinstance(raw_volumes, list) else [], _our_volumes(settings), "name")
    if settings.node_selector:
        raw_selector = spec.get("nodeSelector")
        selector = dict(raw_selector) if isinstance(raw_selector, dict) else {}
        for key, value in settings.node_selector.items():
            selector.setdefault(key, value)
        spec["nodeSelector"] = selector
    if settings.runtime_class and not spec.get("runtimeClassName"):
        spec["runtimeClassName"] = settings.runtime_class
    return PodMutation(pod=desired, warnings=tuple(warnings), fractional=True)


def without_our_volumes(pod: Mapping[str, Any], settings: MutationSettings) -> Mapping[str, Any]:
    """``pod`` without the volumes the wiring adds, when they are exactly ours (a pod admitted again
    after its wiring), so that a Project's volume rules judge only the user's own volumes."""
    spec = pod.get("spec")
    volumes = spec.get("volumes") if isinstance(spec, dict) else None
    if not isinstance(spec, dict) or not isinstance(volumes, list):
        return pod
    ours = _our_volumes(settings)
    kept = [v for v in volumes if v not in ours]
    if len(kept) == len(volumes):
        return pod
    return {**pod, "spec": {**spec, "volumes": kept}}
