"""The controller schedules with consolidation as configured (docs/semantics.md, "Consolidation",
Controller) and turns the engine's moves into evictions and ``gpufleet.dev/moved-at`` writes
(:mod:`gpufleet.kube.controller.moves`)."""

from __future__ import annotations

from gpufleet.domain import (
    ANNOTATION_MOVED_AT,
    ANNOTATION_QUEUED_AT,
    Binding,
    Consolidation,
    Decisions,
    EvictionReason,
    Move,
    NodeName,
    Pod,
    PodGroup,
    PodKey,
    SchedulerConfig,
)
from gpufleet.kube.client.port import Kind
from gpufleet.kube.controller.convert import build_snapshot
from gpufleet.kube.controller.moves import move_evictions, moved_at_writes, target_text


def test_consolidation_is_kept_and_nothing_is_reported() -> None:
    config = SchedulerConfig(consolidation=Consolidation(True, 8, 1))
    view = build_snapshot({Kind.SCHEDULER_CONFIG: [config]}, now=100.0)
    assert view.snapshot.config.consolidation == config.consolidation
    assert view.snapshot.config.now == 100.0
    assert not any("consolidation" in p for p in view.problems)


def _pod(name: str, group: str | None = None, history: str | None = None, created: float = 10.0) -> Pod:
    return Pod(namespace="ml", name=name, group_label=group, creation_time=created,
               annotations={ANNOTATION_MOVED_AT: history} if history else {})


def _move(pod: str, for_gang: str) -> Move:
    return Move(PodKey(pod), NodeName("n1"), (0, 1), NodeName("n2"), (2, 3), for_gang)


def test_each_move_is_an_eviction_for_the_first_pod_of_its_gang() -> None:
    pods = [_pod("m-0", "mover"), _pod("w-1", "w"), _pod("w-0", "w"), _pod("solo")]
    view = build_snapshot({Kind.POD: pods, Kind.POD_GROUP: [PodGroup("ml", "mover"), PodGroup("ml", "w", 2)]},
                          now=100.0)
    bindings = tuple(Binding(PodKey(f"ml/{name}"), NodeName("n1")) for name in ("w-1", "w-0", "solo"))
    decisions = Decisions(bindings=bindings,
                          moves=(_move("ml/m-0", "ml/w"), _move("ml/x", "ml/solo")))
    out = move_evictions(view, decisions)
    assert [(e.pod, e.reason, e.by) for e in out.evictions] == [
        ("ml/m-0", EvictionReason.CONSOLIDATION, "ml/w-0"), ("ml/x", EvictionReason.CONSOLIDATION, "ml/solo")]
    assert target_text(out, PodKey("ml/m-0")) == "planned for node n2 GPUs 2,3"
    assert target_text(out, PodKey("ml/w-0")) == ""
    off = Decisions(bindings=decisions.bindings)
    assert move_evictions(view, off) is off  # consolidation off: nothing added


def test_moved_at_is_appended_on_the_pod_and_once_on_its_podgroup() -> None:
    pods = [_pod("m-0", "mover", "2026-01-01T00:00:00Z", created=50.0), _pod("m-1", "mover", created=40.0),
            _pod("solo", history=None)]
    group = PodGroup("ml", "mover", 2, moved_at="1.0")
    view = build_snapshot({Kind.POD: pods, Kind.POD_GROUP: [group]}, now=100.0)
    writes = moved_at_writes(view, [PodKey("ml/m-0"), PodKey("ml/m-1"), PodKey("ml/solo")], 3600.0)
    stamp = "1970-01-01T01:00:00.000000Z"
    by_target = {(w.kind, w.name): w.patch["metadata"]["annotations"] for w in writes}
    assert by_target == {
        (Kind.POD, "m-0"): {ANNOTATION_MOVED_AT: f"2026-01-01T00:00:00Z,{stamp}"},
        (Kind.POD, "m-1"): {ANNOTATION_MOVED_AT: stamp},
        (Kind.POD, "solo"): {ANNOTATION_MOVED_AT: stamp},
        # the gang's age kept for its replacements: its oldest pod's creation
        (Kind.POD_GROUP, "mover"): {ANNOTATION_MOVED_AT: f"1.0,{stamp}",
                                    ANNOTATION_QUEUED_AT: "1970-01-01T00:00:40.000000Z"},
    }
