"""Rendering decisions: the JSON of api.md section 2, and a table for people."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from gpufleet.adapters.text import text_table
from gpufleet.domain import Decisions, Move
from gpufleet.domain.units import rfc3339


def decisions_to_dict(decisions: Decisions) -> dict[str, list[dict[str, Any]]]:
    bindings: list[dict[str, Any]] = []
    for b in decisions.bindings:
        entry: dict[str, Any] = {"pod": b.pod, "node": b.node, "gpus": list(b.gpus)}
        if b.gpu_blocks is not None:
            entry["gpuBlocks"] = b.gpu_blocks
        if b.flavor is not None:  # only when the pod took a ResourceFlavor (docs/semantics.md)
            entry["flavor"] = b.flavor
        if b.volumes:
            entry["volumes"] = [
                {"claim": v.claim, "volume": v.volume} if v.volume is not None else
                {"claim": v.claim, "provisionOn": b.node}
                for v in b.volumes
            ]
        if b.devices:  # DRA: one entry per allocated device, with its claim (docs/semantics-notes.md)
            entry["devices"] = [
                {"claim": c.claim, "request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device}
                for c in b.devices for r in c.results
            ]
        bindings.append(entry)
    out: dict[str, list[dict[str, Any]]] = {
        "bindings": bindings,
        "evictions": [{"pod": e.pod, "reason": e.reason.value, "by": e.by} for e in decisions.evictions],
        "pending": [{"pod": p.pod, "reason": p.reason} for p in decisions.pending],
    }
    if decisions.moves is not None:  # consolidation on (docs/semantics.md): absent otherwise
        out["moves"] = [_move(m) for m in decisions.moves]
    if decisions.reservations:  # only when some gang holds one (docs/semantics.md, "Reservation and backfill")
        out["reservations"] = [{"gang": r.gang, "nodes": list(r.nodes), "start": rfc3339(r.start), "gpus": r.gpus}
                               for r in decisions.reservations]
    return out


def _move(m: Move) -> dict[str, Any]:
    entry: dict[str, Any] = {"pod": m.pod, "fromNode": m.from_node, "fromGpus": list(m.from_gpus),
                             "toNode": m.to_node, "toGpus": list(m.to_gpus)}
    if m.to_blocks is not None:
        entry["gpuBlocks"] = m.to_blocks
    entry["for"] = m.for_gang
    return entry


def render_json(decisions: Decisions) -> str:
    """``json.dumps(..., indent=1)`` of :func:`decisions_to_dict`, and a newline.

    With an indent Python's json writes in Python (its C encoder only writes compact JSON): about a
    tenth of a second for 10,000 bindings. msgspec writes and indents the same text in C when no
    string needs an escape (no backslash, nothing outside printable ASCII in what it wrote: json's
    ``ensure_ascii`` escapes differ from msgspec's); otherwise json writes it."""
    data = decisions_to_dict(decisions)
    text = msgspec.json.format(msgspec.json.encode(data), indent=1)
    if b"\\" in text or b"\x7f" in text or not text.isascii():
        return json.dumps(data, indent=1) + "\n"
    return text.decode("ascii") + "\n"


def render_table(decisions: Decisions) -> str:
    """What bound where, who was evicted by whom and why, what waits and why."""
    lines: list[str] = []
    lines.append(f"BOUND ({len(decisions.bindings)})")
    if decisions.bindings:
        rows = [
            [b.pod, b.node, ",".join(map(str, b.gpus)) or "-",
             f"{b.gpu_blocks}/100 of GPU {b.gpus[0]}" if b.gpu_blocks is not None else
             (f"{len(b.gpus)} whole" if b.gpus else "no GPU")]
            for b in decisions.bindings
        ]
        headers = ["pod", "node", "gpus", "share"]
        if any(b.flavor for b in decisions.bindings):  # a column only when some pod took a ResourceFlavor
            headers.append("flavor")
            for row, b in zip(rows, decisions.bindings, strict=True):
                row.append(b.flavor or "-")
        if any(b.volumes for b in decisions.bindings):  # a column only when some binding chose volumes
            headers.append("volumes")
            for row, b in zip(rows, decisions.bindings, strict=True):
                row.append(" ".join(f"{v.claim}={v.volume or 'new'}" for v in b.volumes) or "-")
        if any(b.devices for b in decisions.bindings):  # a column only when some binding allocated DRA devices
            headers.append("devices")
            for row, b in zip(rows, decisions.bindings, strict=True):
                row.append(" ".join(f"{c.claim}={r.pool}/{r.device}" for c in b.devices for r in c.results) or "-")
        lines += ["  " + r for r in text_table(headers, rows)]
    lines.append("")
    lines.append(f"EVICTED ({len(decisions.evictions)})")
    if decisions.evictions:
        why = {"reclaim": "reclaim: its queue borrows beyond quota; the evictor's queue is within quota",
               "preempt": "preempt: lower priority in the evictor's own queue",
               "reservation": "reservation: preemptible or past its declared runtime, on a due reservation's nodes"}
        rows = [[e.pod, e.by, why[e.reason.value]] for e in decisions.evictions]
        lines += ["  " + r for r in text_table(["pod", "evicted by", "why"], rows)]
    lines.append("")
    if decisions.moves:
        rows = [[m.pod, f"{m.from_node}:{','.join(map(str, m.from_gpus)) or '-'}",
                 f"{m.to_node}:{','.join(map(str, m.to_gpus)) or '-'}", m.for_gang] for m in decisions.moves]
        lines.append(f"MOVED ({len(decisions.moves)})")
        lines += ["  " + r for r in text_table(["pod", "from", "to", "to make room for"], rows)]
        lines.append("")
    lines.append(f"PENDING ({len(decisions.pending)})")
    if decisions.pending:
        rows = [[p.pod, p.reason] for p in decisions.pending]
        lines += ["  " + r for r in text_table(["pod", "why"], rows)]
    if decisions.reservations:
        lines.append("")
        lines.append(f"RESERVATIONS ({len(decisions.reservations)})")
        rows = [[r.gang, str(r.gpus), rfc3339(r.start), ",".join(r.nodes)] for r in decisions.reservations]
        lines += ["  " + r for r in text_table(["gang", "gpus", "start", "nodes"], rows)]
    if decisions.warnings:
        lines.append("")
        lines.append(f"WARNINGS ({len(decisions.warnings)})")
        lines += ["  " + w for w in decisions.warnings]
    return "\n".join(lines) + "\n"
