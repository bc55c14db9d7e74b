"""Which queue each trace job goes to, and the queues (with quotas) the simulated cluster has.

A rule picks a job attribute (``--queue-by vc|user|group|qos|queue``, or ``none``: everything in the
SchedulerConfig default queue). A job's queue is then, first match wins:

1. the queue a mapping file names for the attribute's value (``map:``);
2. with a queues file: the leaf queue named like the value, if there is one;
   without one: the value itself (a derived queue);
3. the mapping file's ``default``, else the SchedulerConfig ``defaultQueue``.

Queues come from a YAML file of Queue objects (our CRD, read with the replay loader) or, without
one, are **derived**: one top-level queue per distinct value, each with an ``nvidia.com/gpu``
quota proportional to its share of the trace's GPU-time (duration x GPUs), in whole GPUs that add
up to the cluster's GPUs (largest remainders), so the quotas exactly cover the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpufleet.adapters.errors import InputError
from gpufleet.adapters.k8s_yaml import load_snapshot_file
from gpufleet.adapters.traces.records import TraceJob
from gpufleet.domain import GPU, MILLI, Queue, QueueName, QueueResource
from gpufleet.domain.queues import QueueTree

__all__ = [
    "QueueBy",
    "QueueMapping",
    "QueuePlan",
    "derived_quotas",
    "load_queue_map",
    "plan_queues",
    "queue_by_warning",
]


class QueueBy(str, Enum):
    VC = "vc"
    USER = "user"
    GROUP = "group"
    QOS = "qos"
    QUEUE = "queue"  # the generic CSV's queue column
    NONE = "none"


@dataclass(frozen=True, slots=True)
class QueueMapping:
    by: QueueBy = QueueBy.NONE
    explicit: Mapping[str, QueueName] = field(default_factory=dict)
    default: QueueName | None = None  # None: the SchedulerConfig default queue

    def key(self, job: TraceJob) -> str | None:
        """The attribute value the rule reads (None: the job has none, or the rule is ``none``)."""
        if self.by is QueueBy.NONE:
            return None
        value = job.attrs.get(self.by.value)
        return value if value else None


def queue_by_warning(jobs: Sequence[TraceJob], by: QueueBy | None) -> str | None:
    """Why ``--queue-by`` cannot work on ``jobs`` (None when it can): no job has the attribute, so
    every job would go to the default queue. Names the attributes the jobs do have."""
    if by is None or by is QueueBy.NONE or any(job.attrs.get(by.value) for job in jobs):
        return None
    names = {q.value for q in QueueBy if q is not QueueBy.NONE}
    present = sorted({k for job in jobs for k, v in job.attrs.items() if v and k in names})
    return (f"--queue-by {by.value}: no job of the trace has a {by.value}, so every job goes to the default queue; "
            f"its jobs have {', '.join(present) if present else 'none of ' + ', '.join(sorted(names))}")


class _MapFile(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    queue_by: QueueBy | None = Field(default=None, alias="queueBy")
    map: dict[str, str] = Field(default_factory=dict)
    default: str | None = None


def load_queue_map(path: str | Path, by: QueueBy | None) -> QueueMapping:
    """Read a mapping file; ``by`` (from ``--queue-by``) wins over the file's ``queueBy``."""
    import yaml

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror or err}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: malformed YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise InputError(f"{path}: expected a mapping with queueBy, map and default")
    try:
        spec = _MapFile.model_validate({str(k): v for k, v in raw.items()})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(f"{path}: {where}: {first['msg']}") from None
    rule = by if by is not None else spec.queue_by
    if rule is None:
        raise InputError(f"{path}: queueBy: required (or give --queue-by)")
    return QueueMapping(
        by=rule,
        explicit={str(k): QueueName(v) for k, v in spec.map.items()},
        default=QueueName(spec.default) if spec.default else None,
    )


@dataclass(frozen=True, slots=True)
class QueuePlan:
    """The queues of a run and the queue of every job (same order as the jobs given)."""

    queues: tuple[Queue, ...]
    job_queues: tuple[QueueName, ...]
    derived: bool


def derived_quotas(weights: Mapping[str, float], total_gpus: int) -> dict[str, int]:
    """Whole-GPU quotas proportional to ``weights`` adding up to ``total_gpus`` (largest remainders;
    ties by name). All-zero weights share equally."""
    names = sorted(weights)
    if not names:
        return {}
    total_w = sum(max(0.0, weights[n]) for n in names)
    exact = {n: (max(0.0, weights[n]) / total_w if total_w > 0 else 1 / len(names)) * total_gpus for n in names}
    quota = {n: int(exact[n]) for n in names}
    left = total_gpus - sum(quota.values())
    for n in sorted(names, key=lambda n: (-(exact[n] - quota[n]), n))[:left]:
        quota[n] += 1
    return quota


def _gpu_seconds(job: TraceJob) -> float:
    return (job.duration_s or 0.0) * job.gpu_request_milli / MILLI


def plan_queues(
    jobs: Sequence[TraceJob],
    mapping: QueueMapping,
    *,
    default_queue: QueueName,
    total_gpus: int,
    queues_file: str | Path | None = None,
) -> QueuePlan:
    """Queues and the queue of every job; raises InputError for a mapping that names no leaf queue."""
    fallback = mapping.default or default_queue
    if queues_file is not None:
        snapshot = load_snapshot_file(queues_file)
        queues = snapshot.queues
        leaves = QueueTree.of(queues).leaves()
        known = {q.name for q in queues}
        for value, target in sorted(mapping.explicit.items()):
            if target in known and target not in leaves:
                raise InputError(f"{queues_file}: queue {target} (mapped from {value!r}) is not a leaf queue")
        if fallback in known and fallback not in leaves:
            raise InputError(f"{queues_file}: default queue {fallback} is not a leaf queue")
        out: list[QueueName] = []
        for job in jobs:
            key = mapping.key(job)
            if key is not None and key in mapping.explicit:
                out.append(mapping.explicit[key])
            elif key is not None and key in leaves:
                out.append(QueueName(key))
            else:
                out.append(fallback)
        missing = sorted({q for q in out if q not in known and q != default_queue})
        if missing:
            raise InputError(f"{queues_file}: no Queue named {missing[0]} (the queue mapping sends jobs there)")
        return QueuePlan(tuple(queues), tuple(out), derived=False)

    names: list[QueueName] = []
    for job in jobs:
        key = mapping.key(job)
        if key is not None and key in mapping.explicit:
            names.append(mapping.explicit[key])
        elif key is not None:
            names.append(QueueName(key))
        else:
            names.append(fallback)
    if mapping.by is QueueBy.NONE and not mapping.explicit:
        return QueuePlan((), tuple(names), derived=True)  # the engine's implicit default queue
    weights: dict[str, float] = {}
    for job, name in zip(jobs, names, strict=True):
        weights[name] = weights.get(name, 0.0) + _gpu_seconds(job)
    quotas = derived_quotas(weights, total_gpus)
    queues = tuple(
        Queue(name=QueueName(n), resources={GPU: QueueResource(quota=quotas[n] * MILLI)}) for n in sorted(quotas)
    )
    return QueuePlan(queues, tuple(names), derived=True)
