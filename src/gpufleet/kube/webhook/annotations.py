"""The contract between the scheduler's bind step and what delivers a fractional GPU on the node.

The webhook runs at admission, before the scheduler has picked a node and a GPU: it only gives each
container of a fractional pod a ``gpufleet.dev/mps-share``. gpufleet's device plugin serves that
resource when the kubelet starts the containers, which is after the bind, and reads these pod
annotations then. The controller must therefore put them on the pod no later than the bind itself:
either as ``metadata.annotations`` of the ``Binding`` object (the API server copies them onto the pod
in the same write that sets ``spec.nodeName``), or by a patch of the pod before it posts the Binding.
Written after the bind, they race the kubelet.

=====================================  ==============================================  ==========
annotation                             value                                           who reads
=====================================  ==============================================  ==========
``gpufleet.dev/gpu-index``             the GPU index on the node, ``"3"``              device plugin: the CDI device,
                                                                                       MPS pipe and shm of that GPU
``gpufleet.dev/gpu-blocks``            the blocks held (1..100), ``"25"``              CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
``gpufleet.dev/mps-mem-limit``         ``"0=<MiB>M"``: blocks x GPU memory / 100       CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
=====================================  ==============================================  ==========

The device ordinal in ``mps-mem-limit`` is always 0: each GPU has its own MPS control daemon that
sees only that GPU (see ``deploy/helm/gpufleet/templates/mps-daemonset.yaml``), so the client sees
exactly one device. A block is 1/100 of a GPU, so the blocks are also the active thread percentage.

:func:`bind_annotations` computes the three values; the controller should call it rather than
format them itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.domain import ANNOTATION_GPU_BLOCKS, ANNOTATION_GPU_INDEX, ANNOTATION_MPS_MEM_LIMIT, BLOCKS_PER_GPU

__all__ = [
    "bind_annotations",
    "mps_memory_limit",
]


def mps_memory_limit(gpu_blocks: int, gpu_memory_mib: int) -> str:
    """``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` for ``gpu_blocks`` of a GPU of ``gpu_memory_mib`` MiB.

    MPS reads ``<device ordinal>=<amount><unit>`` where ``M`` is MiB; the ordinal is 0 because the
    client sees one device. Rounded down to whole MiB so that the limits of the pods sharing a GPU
    never add up to more than the GPU has.
    """
    if not 1 <= gpu_blocks <= BLOCKS_PER_GPU:
        raise ValueError(f"gpu_blocks must be 1..{BLOCKS_PER_GPU}, got {gpu_blocks}")
    if gpu_memory_mib <= 0:
        raise ValueError(f"gpu_memory_mib must be positive, got {gpu_memory_mib}")
    return f"0={gpu_blocks * gpu_memory_mib // BLOCKS_PER_GPU}M"


def bind_annotations(
    gpus: Sequence[int], gpu_blocks: int | None, gpu_memory_mib: int | None
) -> dict[str, str]:
    """The annotations the controller writes with a binding (see the module docstring).

    ``gpus`` are the GPU indices of the binding, ``gpu_blocks`` its blocks (None for whole GPUs)
    and ``gpu_memory_mib`` the node's ``nvidia.com/gpu.memory`` label (None when the node has none:
    then no memory limit can be computed and ``mps-mem-limit`` is left out, so MPS applies none).
    """
    annotations: dict[str, str] = {}
    if gpus:
        annotations[ANNOTATION_GPU_INDEX] = ",".join(str(index) for index in gpus)
    if gpu_blocks is not None:
        annotations[ANNOTATION_GPU_BLOCKS] = str(gpu_blocks)
        if gpu_memory_mib:
            annotations[ANNOTATION_MPS_MEM_LIMIT] = mps_memory_limit(gpu_blocks, gpu_memory_mib)
    return annotations
