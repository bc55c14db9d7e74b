"""Small builders for the ledger's tests."""

from __future__ import annotations

from typing import Any

from gpufleet.ledger import EndReason, IntervalEnd, IntervalStart

T0 = 1_790_000_000.0  # 2026-09-21, epoch seconds


def start(uid: str, bound: float = 0.0, **fields: Any) -> IntervalStart:
    values: dict[str, Any] = {
        "namespace": "ml",
        "pod_name": f"pod-{uid}",
        "queue": "team-a",
        "node": "node-1",
        "gpus": 1.0,
        "project": "vision",
        "gpu_model": "H100",
        "gpu_indices": (0,),
    }
    values.update(fields)
    return IntervalStart(pod_uid=uid, bound_at=T0 + bound, **values)


def end(uid: str, bound: float = 0.0, ended: float = 60.0, reason: EndReason = EndReason.COMPLETED,
        preemptor: str | None = None) -> IntervalEnd:
    return IntervalEnd(uid, T0 + bound, T0 + ended, reason, preemptor)
