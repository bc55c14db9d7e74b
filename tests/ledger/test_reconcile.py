"""Reconciliation after a restart: open intervals against the pods the API server shows."""

from __future__ import annotations

from gpufleet.ledger import EndReason, IntervalEnd, LedgerStore, ObservedPod, reconcile

from .helpers import T0, start

NOW = T0 + 1_000.0


def test_gone_pods_close_as_deleted_and_unknown_bound_pods_open() -> None:
    running, gone, new = start("run"), start("gone", 5.0), start("new", 7.0)
    plan = reconcile([running, gone], [ObservedPod(running), ObservedPod(new)], NOW)
    assert plan.starts == (new,)
    assert plan.ends == (IntervalEnd("gone", T0 + 5.0, NOW, EndReason.DELETED),)


def test_a_pod_whose_status_says_it_ended_closes_with_its_reason() -> None:
    done, failed, evicted = start("done"), start("failed"), start("evicted")
    plan = reconcile([done, failed, evicted], [
        ObservedPod(done, EndReason.COMPLETED, ended_at=T0 + 300.0),
        ObservedPod(failed, EndReason.FAILED, ended_at=NOW + 50.0),  # a clock ahead of ours: capped at now
        ObservedPod(evicted, EndReason.EVICTED_PREEMPTION, preemptor="ml/big"),
    ], NOW)
    assert plan.starts == ()
    assert plan.ends == (
        IntervalEnd("done", T0, T0 + 300.0, EndReason.COMPLETED),
        IntervalEnd("failed", T0, NOW, EndReason.FAILED),
        IntervalEnd("evicted", T0, NOW, EndReason.EVICTED_PREEMPTION, "ml/big"),
    )


def test_a_pod_bound_again_closes_the_old_interval_at_the_new_bound_time() -> None:
    old, again = start("p", 0.0), start("p", 400.0)
    plan = reconcile([old], [ObservedPod(again)], NOW)
    assert plan.ends == (IntervalEnd("p", T0, T0 + 400.0, EndReason.DELETED),)
    assert plan.starts == (again,)


def test_a_pod_that_ran_and_ended_while_the_controller_was_away_is_opened_and_closed() -> None:
    ran = start("ran", 10.0)
    plan = reconcile([], [ObservedPod(ran, EndReason.COMPLETED, ended_at=T0 + 20.0)], NOW)
    assert plan.starts == (ran,)
    assert plan.ends == (IntervalEnd("ran", T0 + 10.0, T0 + 20.0, EndReason.COMPLETED),)


def test_reconciling_against_the_store_twice_changes_nothing_the_second_time(store: LedgerStore) -> None:
    store.record_starts([start("run"), start("gone", 5.0)])
    shown = [ObservedPod(start("run")), ObservedPod(start("new", 7.0))]
    first = reconcile(store.open_intervals(), shown, NOW)
    store.write([*first.starts, *first.ends])
    assert [s.pod_uid for s in store.open_intervals()] == ["run", "new"]
    second = reconcile(store.open_intervals(), shown, NOW + 60.0)
    assert second.starts == () and second.ends == ()
    gone = next(i for i in store.intervals() if i.start.pod_uid == "gone")
    assert (gone.ended_at, gone.end_reason) == (NOW, EndReason.DELETED)
