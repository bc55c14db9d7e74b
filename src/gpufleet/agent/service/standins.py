"""Minimal discovery, health rules and usage export, so that the agent runs before the rooms that
own them are wired in (TO BE REPLACED: ``gpufleet.agent.discovery``, ``gpufleet.agent.health``,
``gpufleet.agent.usage``; :mod:`.wiring` is the one place that picks them).

The stand-in rules: a GPU is unhealthy on a critical Xid, when it fell off the bus, on a double-bit
ECC error or a row-remap failure (a counter that grew), or with more retired pages than the policy
allows; unknown when it cannot be read; it comes back after ``clean_period_s`` without a new signal,
or at once when the operator uncordons it (the counters it had then become its new baseline).
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpufleet.agent.gpus import GpuHealthReading, GpuInfo, GpuUtilisation, ProcessUtilisation, XidEvent
from gpufleet.agent.service.ports import ANNOTATION_GPU_UNCORDON, ConditionWanted, HealthChange, NodeMetadata
from gpufleet.domain import ANNOTATION_NVLINK_DOMAINS, LABEL_GPU_MEMORY, LABEL_GPU_PRODUCT

__all__ = ["BasicHealthRules", "GpuRecord", "HealthPolicy", "NoUsage", "basic_describe", "parse_index_list"]

log = logging.getLogger(__name__)

LABEL_GPU_COUNT = "nvidia.com/gpu.count"
# Xids whose documented action is a reset, a reboot or a field diagnosis (NVIDIA's Xid catalogue).
CRITICAL_XIDS = frozenset({13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120})


def _ranges(indices: Sequence[int]) -> str:
    """[0, 1, 2, 3] -> "0-3"; [0, 2] -> "0,2"."""
    parts: list[str] = []
    ordered = sorted(indices)
    start = prev = ordered[0]
    for i in [*ordered[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        if i is not None:
            start = prev = i
    return ",".join(parts)


def _nvlink_domains(gpus: Sequence[GpuInfo]) -> str:
    """Connected components of the NVLink graph (every NVSwitch GPU in one), of two or more GPUs."""
    parent = {g.index: g.index for g in gpus}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    switched = [g.index for g in gpus if g.nvswitch]
    for a, b in itertools.pairwise(switched):
        parent[root(a)] = root(b)
    for g in gpus:
        for peer in g.nvlink_peers:
            if peer in parent:
                parent[root(g.index)] = root(peer)
    groups: dict[int, list[int]] = {}
    for g in gpus:
        groups.setdefault(root(g.index), []).append(g.index)
    return ";".join(_ranges(members) for members in sorted(groups.values()) if len(members) > 1)


def basic_describe(gpus: tuple[GpuInfo, ...]) -> NodeMetadata:
    """GFD-style product, memory and count labels and the NVLink domains annotation."""
    owned_labels = frozenset({LABEL_GPU_PRODUCT, LABEL_GPU_MEMORY, LABEL_GPU_COUNT})
    owned_annotations = frozenset({ANNOTATION_NVLINK_DOMAINS})
    if not gpus:
        return NodeMetadata(owned_labels=owned_labels, owned_annotations=owned_annotations)
    labels = {LABEL_GPU_PRODUCT: gpus[0].product.replace(" ", "-"), LABEL_GPU_MEMORY: str(gpus[0].memory_mib),
              LABEL_GPU_COUNT: str(len(gpus))}
    domains = _nvlink_domains(gpus)
    return NodeMetadata(labels=labels, annotations={ANNOTATION_NVLINK_DOMAINS: domains} if domains else {},
                        owned_labels=owned_labels, owned_annotations=owned_annotations)


def parse_index_list(text: str) -> frozenset[int]:
    """ "1,3" -> {1, 3}; ValueError naming the text otherwise."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or len(part) > 4:
            raise ValueError(f'{ANNOTATION_GPU_UNCORDON}: must be GPU indices such as "1,3", got {text!r}')
        out.add(int(part))
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    clean_period_s: float = 600.0  # a bad GPU comes back after this long without a new signal
    retired_pages_limit: int = 60  # NVIDIA's RMA threshold for pre-Ampere retired pages
    critical_xids: frozenset[int] = CRITICAL_XIDS


@dataclass(frozen=True, slots=True)
class GpuRecord:
    uuid: str
    status: str = "healthy"  # healthy | unhealthy | unknown
    reason: str = ""  # the last signal, for the condition and `gpufleet gpu list`
    since: float = 0.0  # when the status last changed
    clean_since: float | None = None  # unhealthy: since when no signal (None: a lasting one, e.g. lost)
    dbe: int = 0  # the counters' baseline (a growth is a new signal)
    remap_failed: bool = False


@dataclass(frozen=True, slots=True)
class BasicHealthRules:
    """:class:`~gpufleet.agent.service.ports.HealthRules` over ``dict[int, GpuRecord]``."""

    policy: HealthPolicy = field(default_factory=HealthPolicy)

    def restore(self, text: str | None) -> dict[int, GpuRecord]:
        if not text:
            return {}
        try:
            raw = json.loads(text)
            return {int(k): GpuRecord(**v) for k, v in raw.items()}
        except (ValueError, TypeError, AttributeError) as err:
            log.warning("the Node's GPU health history is unreadable, starting afresh: %s", err)
            return {}

    def save(self, state: Mapping[int, GpuRecord]) -> str:
        def record(r: GpuRecord) -> dict[str, Any]:
            return {k: getattr(r, k) for k in GpuRecord.__dataclass_fields__}

        return json.dumps({str(i): record(state[i]) for i in sorted(state)}, separators=(",", ":"))

    def _signal(self, reading: GpuHealthReading, before: GpuRecord, xids: Sequence[int]) -> tuple[str, bool] | None:
        """The signal of this reading and whether it lasts (a state, not an event), or None."""
        if reading.lost:
            return "fell off the bus", True
        retired = (reading.retired_pages_sbe or 0) + (reading.retired_pages_dbe or 0)
        if retired > self.policy.retired_pages_limit:
            return f"{retired} retired pages (limit {self.policy.retired_pages_limit})", True
        critical = [x for x in xids if x in self.policy.critical_xids]
        if critical:
            return f"Xid {critical[-1]}", False
        if (reading.ecc_dbe_volatile or 0) > before.dbe:
            return f"double-bit ECC errors ({reading.ecc_dbe_volatile})", False
        if reading.row_remap_failure and not before.remap_failed:
            return "row remap failure", False
        return None

    def step(self, state: Mapping[int, GpuRecord], readings: Sequence[GpuHealthReading],
             events: Sequence[XidEvent], uncordoned: frozenset[int],
             now: float) -> tuple[dict[int, GpuRecord], tuple[HealthChange, ...]]:
        xids: dict[int, list[int]] = {}
        for event in events:
            xids.setdefault(event.index, []).append(event.xid)
        out: dict[int, GpuRecord] = {}
        changes: list[HealthChange] = []
        for reading in readings:
            before = state.get(reading.index)
            if before is None or before.uuid != reading.uuid:  # a new or replaced GPU: errors it has count
                before = GpuRecord(uuid=reading.uuid, since=now)
            after = self._next(before, reading, xids.get(reading.index, ()), reading.index in uncordoned, now)
            out[reading.index] = after
            if after.status != before.status:
                changes.append(_change(reading.index, after))
        return out, tuple(changes)

    def _next(self, before: GpuRecord, reading: GpuHealthReading, xids: Sequence[int], uncordoned: bool,
              now: float) -> GpuRecord:
        if reading.error is not None and not reading.lost:
            if before.status == "unhealthy":
                return before  # a bad GPU stays bad while it cannot be read
            reason = f"cannot be read: {reading.error}"
            if before.status == "unknown" and before.reason == reason:
                return before
            return replace(before, status="unknown", reason=reason, since=now, clean_since=None)
        signal = self._signal(reading, before, xids)
        counted = replace(before, dbe=max(before.dbe, reading.ecc_dbe_volatile or 0),
                          remap_failed=before.remap_failed or bool(reading.row_remap_failure))
        if uncordoned and not reading.lost:
            return replace(counted, status="healthy", reason="uncordoned by the operator", since=now,
                           clean_since=None)
        if signal is not None:  # the clean period counts from the last event, or from when a state ends
            text, lasting = signal
            quiet_since = None if lasting else now
            if before.status == "unhealthy":
                return replace(counted, reason=text, clean_since=quiet_since)
            return replace(counted, status="unhealthy", reason=text, since=now, clean_since=quiet_since)
        if before.status == "unhealthy":
            clean_since = before.clean_since if before.clean_since is not None else now
            if now - clean_since >= self.policy.clean_period_s:
                return replace(counted, status="healthy", reason=f"clean for {self.policy.clean_period_s:g} s",
                               since=now, clean_since=None)
            return replace(counted, clean_since=clean_since)
        if before.status == "unknown":
            return replace(counted, status="healthy", reason="readable again", since=now)
        return replace(counted)

    def unhealthy_indices(self, state: Mapping[int, GpuRecord]) -> frozenset[int]:
        return frozenset(i for i, r in state.items() if r.status == "unhealthy")

    def condition(self, state: Mapping[int, GpuRecord]) -> ConditionWanted:
        bad = [f"GPU {i} ({r.uuid}): {r.reason}" for i, r in sorted(state.items()) if r.status == "unhealthy"]
        if bad:
            return ConditionWanted("False", "GPUUnhealthy", "; ".join(bad))
        unknown = [f"GPU {i} ({r.uuid}): {r.reason}" for i, r in sorted(state.items()) if r.status == "unknown"]
        if unknown:
            return ConditionWanted("Unknown", "GPUHealthUnknown", "; ".join(unknown))
        return ConditionWanted("True", "GPUsHealthy", f"{len(state)} GPUs healthy")

    def parse_uncordon(self, text: str) -> frozenset[int]:
        return parse_index_list(text)


_REASONS = {"unhealthy": ("GPUUnhealthy", True), "healthy": ("GPUHealthy", False),
            "unknown": ("GPUHealthUnknown", True)}


def _change(index: int, record: GpuRecord) -> HealthChange:
    reason, warning = _REASONS[record.status]
    return HealthChange(index=index, uuid=record.uuid, reason=reason, warning=warning,
                        message=f"GPU {index} ({record.uuid}) is {record.status}: {record.reason}")


class NoUsage:
    """No utilisation export: nothing on ``/metrics`` but the agent's own health."""

    def update(self, gpus: Sequence[GpuUtilisation], processes: Sequence[ProcessUtilisation],
               pods: Sequence[Mapping[str, Any]], node_name: str, now: float) -> None:
        return None

    def render(self) -> bytes:
        return b""
