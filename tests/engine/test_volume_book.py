"""The volume book is built only when a pod of ours names a claim (docs/semantics-notes.md,
"Volumes"): a snapshot without claims pays nothing for volumes."""

from __future__ import annotations

from dataclasses import replace

from gpufleet.bench.shapes import make_shape
from gpufleet.domain import SCHEDULER_NAME
from gpufleet.engine.scheduler import Engine


def test_no_book_without_claims() -> None:
    snapshot = make_shape("basic", 0.01)
    assert Engine(snapshot).placer.volumes is None


def test_no_book_when_only_other_schedulers_name_claims() -> None:
    snapshot = make_shape("basic", 0.01)
    pods = tuple(replace(p, scheduler_name="default-scheduler", claims=("data",)) if i == 0 else p
                 for i, p in enumerate(snapshot.pods))
    assert Engine(replace(snapshot, pods=pods)).placer.volumes is None


def test_book_when_a_pod_of_ours_names_a_claim() -> None:
    snapshot = make_shape("basic", 0.01)
    ours = next(i for i, p in enumerate(snapshot.pods) if p.scheduler_name == SCHEDULER_NAME and p.node_name is None)
    pods = tuple(replace(p, claims=("data",)) if i == ours else p for i, p in enumerate(snapshot.pods))
    engine = Engine(replace(snapshot, pods=pods))
    assert engine.placer.volumes is not None
    decisions = engine.run()
    key = snapshot.pods[ours].key
    assert [p.reason for p in decisions.pending if p.pod == key] == ['persistentvolumeclaim "data" not found']
