"""From labelled samples to per-GPU readings and per-pod usage; the exporter's text read with
prometheus-client's parser (never by hand).

Both sources end here: the exporter's ``/metrics`` page gives (metric name, labels, value) samples
through :func:`prometheus_client.parser.text_string_to_metric_families`, a Prometheus server's
instant vector gives the same triples. Only the three counters of :data:`WANTED_METRICS` are kept;
a GPU's identity is its UUID on its host (with ``/gi<GPU_I_ID>`` for a MIG instance), and the pod
holding it is named by the labels of :class:`PodLabels`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from gpufleet.telemetry.model import WANTED_METRICS, GpuReading, PodKey, PodLabels, PodUsage, TelemetryError

__all__ = ["Sample", "parse_exporter_text", "pod_usage", "readings_from_samples", "wanted_lines"]

Sample = tuple[str, Mapping[str, str], float]

_DEFAULT_LABELS = PodLabels()
_FIELD = dict(zip(WANTED_METRICS, ("gpu_util_percent", "sm_active", "fb_used_mib"), strict=True))


def _first(labels: Mapping[str, str], names: tuple[str, ...]) -> str:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return ""


@dataclass(slots=True)
class _Gpu:
    hostname: str
    model: str
    pod: PodKey | None
    pod_uid: str | None
    gpu_util_percent: float | None = None
    sm_active: float | None = None
    fb_used_mib: float | None = None


def readings_from_samples(samples: Iterable[Sample], labels: PodLabels = _DEFAULT_LABELS) -> list[GpuReading]:
    """One :class:`GpuReading` per (host, GPU, pod) among ``samples`` of the wanted metrics (others and
    NaN values are left out; a GPU's counter seen twice keeps the last value)."""
    gpus: dict[tuple[str, str, PodKey | None], _Gpu] = {}
    for name, sample_labels, value in samples:
        field_name = _FIELD.get(name)
        if field_name is None or math.isnan(value):
            continue
        uuid = _first(sample_labels, labels.uuid) or f"gpu-{sample_labels.get('gpu', '?')}"
        instance = sample_labels.get("GPU_I_ID")
        gpu_id = f"{uuid}/gi{instance}" if instance else uuid
        hostname = _first(sample_labels, labels.hostname)
        pod_name = _first(sample_labels, labels.pod)
        pod = PodKey(_first(sample_labels, labels.namespace), pod_name) if pod_name else None
        key = (hostname, gpu_id, pod)
        gpu = gpus.get(key)
        if gpu is None:
            uid = _first(sample_labels, labels.uid) if pod is not None else ""
            gpu = gpus[key] = _Gpu(hostname, sample_labels.get("modelName", ""), pod, uid or None)
        setattr(gpu, field_name, float(value))
    return [
        GpuReading(gpu_id=gpu_id, hostname=g.hostname, model=g.model, pod=g.pod, pod_uid=g.pod_uid,
                   gpu_util_percent=g.gpu_util_percent, sm_active=g.sm_active, fb_used_mib=g.fb_used_mib)
        for (_, gpu_id, _), g in gpus.items()
    ]


def wanted_lines(text: str) -> str:
    """The lines of ``text`` that name one of the three counters anywhere (their ``# HELP``, ``# TYPE``
    and sample lines, and any other line that merely mentions one): what the parser needs to read.

    A selection, not a parse: a line that does not contain a counter's name can be no line of that
    counter's family (the text format puts one sample or comment on a line), and the parser reads
    every line kept. It spares the parser the exporter's 23 other families: reading a node's page
    takes about an eighth of the time (BENCHMARKS.md, "Issue 14: DCGM telemetry"). Other families'
    lines are then not checked: a page whose wanted lines are well-formed reads well."""
    gpu, sm, fb = WANTED_METRICS
    return "\n".join(line for line in text.split("\n") if gpu in line or sm in line or fb in line)


def parse_exporter_text(text: str, source: str, labels: PodLabels = _DEFAULT_LABELS, *,
                        select: bool = True) -> list[GpuReading]:
    """The GPU readings of one dcgm-exporter ``/metrics`` page (Prometheus text format 0.0.4), read by
    prometheus-client's parser; ``select``: parse the :func:`wanted_lines` only (``False``: the whole
    page).

    Raises :class:`TelemetryError` (one line naming ``source``) for text the parser refuses."""
    try:
        samples = [
            (sample.name, sample.labels, sample.value)
            for family in text_string_to_metric_families(wanted_lines(text) if select else text)
            if family.name in WANTED_METRICS
            for sample in family.samples
        ]
    except (ValueError, IndexError, KeyError, TypeError) as err:
        detail = str(err)
        detail = detail if len(detail) <= 160 else detail[:157] + "..."
        raise TelemetryError(f"{source}: malformed exposition text: {detail}") from None
    return readings_from_samples(samples, labels)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def pod_usage(readings: Iterable[GpuReading], at: float) -> dict[PodKey, PodUsage]:
    """Each pod's usage at ``at`` over the GPUs its readings name (GPUs no pod holds are left out)."""
    by_pod: dict[PodKey, list[GpuReading]] = {}
    for reading in readings:
        if reading.pod is not None:
            by_pod.setdefault(reading.pod, []).append(reading)
    usage: dict[PodKey, PodUsage] = {}
    for key, gpus in by_pod.items():
        util = [g.gpu_util_percent for g in gpus if g.gpu_util_percent is not None]
        sm = [g.sm_active for g in gpus if g.sm_active is not None]
        fb = [g.fb_used_mib for g in gpus if g.fb_used_mib is not None]
        uids = [g.pod_uid for g in gpus if g.pod_uid]
        usage[key] = PodUsage(
            key=key, at=at, gpus=tuple(sorted({g.gpu_id for g in gpus})),
            gpu_util_percent=_mean(util), sm_active=_mean(sm), fb_used_mib=sum(fb) if fb else None,
            pod_uid=uids[0] if uids else None, hostnames=tuple(sorted({g.hostname for g in gpus if g.hostname})),
        )
    return usage

