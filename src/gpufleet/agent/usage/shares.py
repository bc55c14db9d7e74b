"""Each pod's share of each GPU at one poll, pure: the processes NVML reported, their owners (from
their cgroups) and the node's pods in; one :class:`PodShare` per (GPU, pod) out.

A pod's share of a GPU is the sum over its processes on that GPU of their SM utilisation (NVML's
per-process ``smUtil``, percent of the sample period a kernel of the process ran; at most 100 in all:
under MPS processes' kernels overlap) and of their framebuffer memory. A process in no pod's cgroup
(a host process) or in the cgroup of a pod the index does not know (the index lags a new pod) counts
in the whole GPU's figures only, and in the per-GPU process counts by :class:`Attribution`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gpufleet.agent.gpus import GpuUtilisation, ProcessUtilisation
from gpufleet.agent.usage.cgroups import CgroupOwner
from gpufleet.agent.usage.owners import Owner
from gpufleet.agent.usage.pods import PodIndex

__all__ = ["Attribution", "PodShare", "UsageSample", "pod_shares"]


class Attribution(StrEnum):
    """Whom a GPU process was found to belong to (the ``attribution`` label of
    ``gpufleet_agent_gpu_processes``)."""

    POD = "pod"  # a pod of the index
    UNKNOWN_POD = "unknown_pod"  # a pod's cgroup, but a pod the index does not (yet) hold
    HOST = "host"  # no pod's cgroup
    UNREADABLE = "unreadable"  # its proc files could not be read (gone, or no host /proc)


@dataclass(frozen=True, slots=True)
class PodShare:
    """One pod's use of one GPU (``gpu_uuid``: the device its processes ran on, a GPU's ``GPU-`` or a
    MIG instance's ``MIG-`` UUID). ``container``: the names of the pod's containers with a process
    there, sorted and comma-separated (one, nearly always; ``""`` for a GPU the pod was allocated
    without a process on it)."""

    gpu_index: int
    gpu_uuid: str
    pod_uid: str
    namespace: str
    pod: str
    container: str
    util_percent: float
    fb_used_mib: int


@dataclass(frozen=True, slots=True)
class UsageSample:
    """One poll: the GPUs' own figures, the pods' shares (sorted by GPU index, device, namespace and
    pod), and how many processes each GPU had by attribution (``(index, attribution) -> count``)."""

    at: float
    gpus: tuple[GpuUtilisation, ...]
    shares: tuple[PodShare, ...]
    processes: Mapping[tuple[int, Attribution], int]


@dataclass(slots=True)
class _Sum:
    uid: str
    util: float = 0.0
    fb: int = 0
    containers: set[str] = field(default_factory=set)


def _attribution(owner: Owner, pods: PodIndex) -> Attribution:
    if owner is None:
        return Attribution.HOST
    if not isinstance(owner, CgroupOwner):
        return Attribution.UNREADABLE
    return Attribution.POD if owner.pod_uid in pods else Attribution.UNKNOWN_POD


def pod_shares(gpus: Sequence[GpuUtilisation], processes: Sequence[ProcessUtilisation],
               owners: Mapping[int, Owner], pods: PodIndex, at: float,
               devices: Mapping[str, int] | None = None) -> UsageSample:
    """The :class:`UsageSample` of one poll. ``owners``: each process's owner by PID (a PID missing is
    :data:`~gpufleet.agent.usage.owners.UNREADABLE`); ``devices``: device UUID -> GPU index of the
    node's GPUs and MIG instances (default: the GPUs of ``gpus``), for the zero shares of allocated
    GPUs without a process of their pod."""
    # keyed by the pod's name, not its UID: a static pod's two keys (its UID and its config hash)
    # give one series
    sums: dict[tuple[int, str, str, str], _Sum] = {}
    counts: dict[tuple[int, Attribution], int] = {}
    for process in processes:
        owner = owners.get(process.pid)
        attribution = _attribution(owner, pods) if process.pid in owners else Attribution.UNREADABLE
        counts[process.index, attribution] = counts.get((process.index, attribution), 0) + 1
        if attribution is not Attribution.POD:
            continue
        assert isinstance(owner, CgroupOwner)
        entry = pods[owner.pod_uid]
        key = (process.index, process.uuid, entry.namespace, entry.name)
        total = sums.get(key)
        if total is None:
            total = sums[key] = _Sum(owner.pod_uid)
        total.util += process.sm_util_percent
        total.fb += process.memory_used_mib
        total.containers.add(entry.containers.get(owner.container_id, ""))
    known = devices if devices is not None else {gpu.uuid: gpu.index for gpu in gpus}
    for uid, entry in pods.items():
        for uuid in entry.gpus:
            index = known.get(uuid)
            if index is not None and (index, uuid, entry.namespace, entry.name) not in sums:
                sums[index, uuid, entry.namespace, entry.name] = _Sum(uid)
    shares = [
        PodShare(gpu_index=index, gpu_uuid=uuid, pod_uid=total.uid, namespace=namespace, pod=name,
                 container=",".join(sorted(c for c in total.containers if c)),
                 util_percent=min(100.0, max(0.0, total.util)), fb_used_mib=total.fb)
        for (index, uuid, namespace, name), total in sums.items()
    ]
    shares.sort(key=lambda s: (s.gpu_index, s.gpu_uuid, s.namespace, s.pod, s.pod_uid))
    return UsageSample(at=at, gpus=tuple(gpus), shares=tuple(shares), processes=counts)
