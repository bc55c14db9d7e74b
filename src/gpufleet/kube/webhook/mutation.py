"""What the admission webhook changes in a fractional-GPU pod of gpufleet's (pure; no I/O).

A fractional pod (annotation ``gpufleet.dev/gpu-blocks`` or ``gpufleet.dev/gpu-memory``, and
``spec.schedulerName: gpufleet``) does not request ``nvidia.com/gpu``, so the NVIDIA device plugin
gives it nothing. The webhook gives every container (init containers included) a limit and a
request of one ``gpufleet.dev/mps-share``; gpufleet's device plugin serves that resource when the
kubelet starts the container, after the bind, from the annotations the scheduler wrote
(:mod:`gpufleet.kube.webhook.annotations`): the CDI device of the GPU in ``gpufleet.dev/gpu-index``,
a mount of that GPU's MPS pipe directory only, that GPU's MPS shared memory at ``/dev/shm``, and
``CUDA_MPS_PIPE_DIRECTORY``, ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``. The pod itself gets no hostPath volume and no GPU env var:
a node without gpufleet's device plugin does not advertise the resource, so the pod never starts
there without its limits (it stays pending); the node selector of the MPS DaemonSet keeps it off
nodes without a daemon.

The mutation is expressed as the desired pod; the webhook diffs it against the admitted pod into a
JSONPatch. A share a user already set is replaced (one per container, always), and a pod that
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
    ANNOTATION_GPU_MEMORY,
    SCHEDULER_NAME,
)
from gpufleet.domain.units import blocks_for_gpu_memory
from gpufleet.domain.wire import MPS_HOST_ROOT, RESOURCE_MPS_SHARE

__all__ = [
    "DEFAULT_MPS_HOST_DIR",
    "MPS_SHARE_PER_CONTAINER",
    "MutationSettings",
    "PodMutation",
    "is_fractional_pod_of_ours",
    "mutate_pod",
]

DEFAULT_MPS_HOST_DIR = MPS_HOST_ROOT
SHM_PATH = "/dev/shm"  # where the device plugin mounts the GPU's MPS shared memory
MPS_SHARE_PER_CONTAINER = "1"  # the device plugin's unit: one share per container, whatever the blocks

_FRACTIONAL_PATHS = (f"metadata.annotations.{ANNOTATION_GPU_BLOCKS}", f"metadata.annotations.{ANNOTATION_GPU_MEMORY}")


@dataclass(frozen=True, slots=True)
class MutationSettings:
    """How the webhook treats fractional pods and GPU visibility."""

    # The MPS DaemonSet's host directory (gpu-<i>/{pipe,shm,log}): no tenant pod may mount it.
    mps_host_dir: str = DEFAULT_MPS_HOST_DIR
    # For fleets whose GPUs all have this much memory: a gpu-memory pod asking more than one GPU is
    # denied at admission. None: the scheduler leaves such a pod pending with its reason.
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


def _mounts_own_shm(container: Mapping[str, Any]) -> bool:
    mounts = container.get("volumeMounts")
    return any(isinstance(m, dict) and m.get("mountPath") in (SHM_PATH, SHM_PATH + "/")
               for m in (mounts if isinstance(mounts, list) else []))


def _with_share(container: dict[str, Any]) -> None:
    raw = container.get("resources")
    resources: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
    for kind in ("limits", "requests"):
        amounts = resources.get(kind)
        resources[kind] = {**(amounts if isinstance(amounts, dict) else {}),
                           RESOURCE_MPS_SHARE: MPS_SHARE_PER_CONTAINER}
    container["resources"] = resources


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

    if settings.gpu_memory_mib is not None and blocks is None and memory is not None \
            and blocks_for_gpu_memory(memory, settings.gpu_memory_mib) is None:
        return PodMutation(pod=pod, fractional=True, denial=(
            f"metadata.annotations.{ANNOTATION_GPU_MEMORY}: more than one GPU of this cluster "
            f"has ({settings.gpu_memory_mib} MiB)"))

    desired: dict[str, Any] = copy.deepcopy(dict(pod))
    spec: dict[str, Any] = desired["spec"]
    for section in ("initContainers", "containers"):
        containers = spec.get(section)
        if not isinstance(containers, list):
            continue
        for index, container in enumerate(containers):
            if isinstance(container, dict):
                _with_share(container)
                if _mounts_own_shm(container):
                    warnings.append(
                        f"{section}[{index}] ({container.get('name', '?')}) mounts its own {SHM_PATH}: gpufleet's "
                        f"device plugin mounts the MPS server's shared memory there, so CUDA in this container "
                        "may fail to connect to MPS")
    if settings.node_selector:
        raw_selector = spec.get("nodeSelector")
        selector = dict(raw_selector) if isinstance(raw_selector, dict) else {}
        for key, value in settings.node_selector.items():
            selector.setdefault(key, value)
        spec["nodeSelector"] = selector
    if settings.runtime_class and not spec.get("runtimeClassName"):
        spec["runtimeClassName"] = settings.runtime_class
    return PodMutation(pod=desired, warnings=tuple(warnings), fractional=True)

