"""A simulated run as usage-ledger intervals: what ``simulate run --ledger`` writes.

Pure: :func:`ledger_intervals` maps a :class:`~gpufleet.sim.timeline.SimResult` (its allocations: every
start of a job's pods, to its stop) to :class:`~gpufleet.ledger.Interval` records, one per pod per
start, without touching a database; the command writes them. The rules (docs/simulator.md, "The
usage ledger"):

- times are the simulated seconds plus ``origin_s`` (epoch seconds: ``--ledger-origin``, by default
  the trace's own start when its times are absolute, else :data:`DEFAULT_ORIGIN`);
- a pod's UID is a UUID (version 5) of the run's key, the pod's name and the job's start number
  (1 for its first start), so the same command gives the same UIDs and writing it twice adds nothing;
- the project is the job's ``vc`` (Philly's virtual cluster), else its ``group``, else its queue; the
  namespace is the project as a DNS label; the submitter is the job's ``user``;
- end reasons: completed; an eviction by reclaim or preemption -> ``evicted-reclaim`` /
  ``evicted-preemption`` with the preemptor (``namespace/pod``) the engine named; a node failure ->
  ``node-failure``; a spot reclaim -> ``spot-reclaim``; a job still running at the end stays open.
"""

from __future__ import annotations

import functools
import hashlib
import re
import uuid
from collections.abc import Callable, Iterator

from gpufleet.adapters.times import parse_when
from gpufleet.domain import LABEL_GPU_PRODUCT, MILLI
from gpufleet.ledger.model import EndReason, Interval, IntervalStart, gpu_amount
from gpufleet.sim.jobs import SimJob
from gpufleet.sim.timeline import InterruptKind, SimResult

__all__ = ["DEFAULT_ORIGIN", "DEFAULT_ORIGIN_S", "ledger_intervals", "parse_origin", "pod_uid"]

DEFAULT_ORIGIN = "2026-01-01T00:00:00Z"
DEFAULT_ORIGIN_S = 1_767_225_600.0  # DEFAULT_ORIGIN in epoch seconds
_UID_NAMESPACE = uuid.UUID("6f1c2b9e-5d0a-4c51-9a43-0f7e3c1d2b8a")  # gpufleet's simulated pods

_END_REASONS = {
    None: EndReason.COMPLETED,
    InterruptKind.RECLAIM: EndReason.EVICTED_RECLAIM,
    InterruptKind.PREEMPT: EndReason.EVICTED_PREEMPTION,
    InterruptKind.FAILURE: EndReason.NODE_FAILURE,
    InterruptKind.SPOT: EndReason.SPOT_RECLAIM,
    # A consolidation move: the pod is evicted and restarts at once elsewhere.
    InterruptKind.MOVE: EndReason.MOVED,
}
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


def parse_origin(text: str, option: str = "--ledger-origin") -> float:
    """An ISO-8601 date-time (``2026-11-01T00:00:00Z``; no offset means UTC) in epoch seconds, or an
    InputError naming ``option`` (the one reading of command-line times, as the reports' window)."""
    return parse_when(text, option)


def pod_uid(run_key: str, pod_name: str, start: int) -> str:
    """The UID of a simulated pod at the job's ``start``-th start (1, 2, ...) in the run ``run_key``:
    ``uuid.uuid5`` of gpufleet's namespace and ``run_key``, the name and the start, made here by hand
    (``uuid.UUID`` objects are a third of the mapping's time on the whole Philly list)."""
    return _uid_maker(run_key)(pod_name, start)


def _uid_maker(run_key: str) -> Callable[[str, int], str]:
    prefix = hashlib.sha1(_UID_NAMESPACE.bytes + f"{run_key}\x1f".encode(), usedforsecurity=False)

    def uid(pod_name: str, start: int) -> str:
        digest = prefix.copy()
        digest.update(f"{pod_name}\x1f{start}".encode())
        raw = bytearray(digest.digest()[:16])
        raw[6] = (raw[6] & 0x0F) | 0x50  # version 5
        raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
        h = raw.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    return uid


@functools.lru_cache(maxsize=4096)
def _namespace(project: str) -> str:
    return _NOT_DNS.sub("-", project.lower()).strip("-")[:63].strip("-") or "sim"


def _owner(job: SimJob) -> tuple[str, str, str | None]:
    """(namespace, project, submitter) of a job."""
    project = job.attrs.get("vc") or job.attrs.get("group") or str(job.queue)
    return _namespace(project), project, job.attrs.get("user") or None


def ledger_intervals(result: SimResult, *, origin_s: float, run_key: str) -> Iterator[Interval]:
    """Every pod's allocation interval of the run, in start order (the pods of one start in pod order)."""
    jobs = result.setup.jobs
    nodes = [n.node for n in result.setup.cluster.nodes]
    names = [n.name for n in nodes]
    models = [n.gpu_product or n.labels.get(LABEL_GPU_PRODUCT) or None for n in nodes]
    non_preemptible = result.setup.config.non_preemptible_priority
    owners: dict[int, tuple[str, str, str | None]] = {}
    make_uid = _uid_maker(run_key)
    starts: dict[int, int] = {}

    def owner(j: int) -> tuple[str, str, str | None]:
        got = owners.get(j)
        if got is None:
            got = owners[j] = _owner(jobs[j])
        return got

    for allocation in result.allocations:
        j = allocation.job
        job = jobs[j]
        namespace, project, submitter = owner(j)
        start = starts[j] = starts.get(j, 0) + 1
        bound = origin_s + allocation.start_s
        ended = None if allocation.end_s is None else origin_s + allocation.end_s
        reason = None if ended is None else _END_REASONS[allocation.stopped_by]
        preemptor = None
        if allocation.preemptor is not None and reason is not None:
            by_job, by_pod = allocation.preemptor
            preemptor = f"{owner(by_job)[0]}/{jobs[by_job].pod_names[by_pod]}"
        for (node, gpus, blocks), name, shape in zip(allocation.placement, job.pod_names, job.pods, strict=True):
            yield Interval(
                start=IntervalStart(
                    pod_uid=make_uid(name, start),
                    bound_at=bound,
                    namespace=namespace,
                    pod_name=name,
                    queue=str(job.queue),
                    node=names[node],
                    gpus=gpu_amount(shape.whole, blocks),
                    project=project,
                    submitter=submitter,
                    pod_group=job.name if job.gang else None,
                    preemptible=job.priority < non_preemptible,
                    gpu_model=models[node] if shape.gpu_milli else None,
                    gpu_indices=gpus,
                    gpu_blocks=blocks,
                    cpu_milli=shape.cpu,
                    memory_bytes=shape.memory // MILLI,
                    created_at=origin_s + job.submit_s,
                ),
                ended_at=ended,
                end_reason=reason,
                preemptor=preemptor,
            )
