"""Admission by suspension: which suspended owners are unsuspended (owners_to_unsuspend), and why the
others are not (not_admitted)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain import QueueName
from gpufleet.policy.grouping import (
    SUSPENDABLE_KINDS,
    GroupPlan,
    NotAdmitted,
    OwnerRef,
    SuspendedOwner,
    VirtualGang,
    not_admitted,
    owners_to_unsuspend,
    virtual_gang,
)

_QUEUE = QueueName("default")


def _ref(name: str, api_version: str = "batch/v1", kind: str = "Job") -> OwnerRef:
    return OwnerRef(api_version, kind, "ml", name, f"uid-{name}")


def _gang(ref: OwnerRef, unit: str, min_member: int, size: int) -> VirtualGang:
    plan = GroupPlan(ref, f"{ref.name}-{unit}", min_member, size, _QUEUE, unit=unit)
    return VirtualGang(plan, tuple(f"{ref.name}-{unit}-{i}" for i in range(size)))


def test_a_job_of_four_with_three_placed_stays_suspended() -> None:
    job = SuspendedOwner(_ref("train"), (_gang(_ref("train"), "", 4, 4),))
    placed = {"train--0", "train--1", "train--2"}
    assert owners_to_unsuspend([job], placed) == ()
    assert owners_to_unsuspend([job], placed | {"train--3"}) == (job.ref,)


def test_every_gang_of_a_jobset_must_be_placed() -> None:
    ref = _ref("js", "jobset.x-k8s.io/v1alpha2", "JobSet")
    owner = SuspendedOwner(ref, (_gang(ref, "driver", 1, 1), _gang(ref, "workers", 2, 2)))
    assert owners_to_unsuspend([owner], {"js-driver-0", "js-workers-0"}) == ()
    assert owners_to_unsuspend([owner], {"js-driver-0", "js-workers-0", "js-workers-1"}) == (ref,)


def test_elastic_members_above_min_member_are_not_needed() -> None:
    job = SuspendedOwner(_ref("el"), (_gang(_ref("el"), "", 2, 4),))
    assert owners_to_unsuspend([job], {"el--1", "el--3"}) == (job.ref,)


def test_kinds_without_suspend_and_owners_without_gangs_are_never_unsuspended() -> None:
    ref = _ref("py", "kubeflow.org/v1", "PyTorchJob")
    py = SuspendedOwner(ref, (_gang(ref, "", 1, 1),))
    empty = SuspendedOwner(_ref("none"), ())
    assert owners_to_unsuspend([py, empty], {"py--0"}) == ()


_suspendable = sorted(SUSPENDABLE_KINDS)


@st.composite
def _owners(draw: st.DrawFn) -> tuple[list[SuspendedOwner], set[str]]:
    owners: list[SuspendedOwner] = []
    every_pod: list[str] = []
    for i in range(draw(st.integers(0, 5))):
        group, kind = draw(st.sampled_from(_suspendable))
        ref = _ref(f"o{i}", f"{group}/v1", kind)
        gangs = []
        for u in range(draw(st.integers(0, 3))):
            size = draw(st.integers(0, 6))
            gangs.append(_gang(ref, f"u{u}", draw(st.integers(0, size + 1)), size))
            every_pod.extend(gangs[-1].pods)
        owners.append(SuspendedOwner(ref, tuple(gangs)))
    placed = set(draw(st.lists(st.sampled_from(every_pod), unique=True))) if every_pod else set()
    placed |= set(draw(st.lists(st.text(max_size=4), max_size=3)))  # names of other pods
    return owners, placed


@settings(max_examples=300, deadline=None)
@given(_owners())
def test_never_an_owner_whose_gangs_are_not_wholly_placed(case: tuple[list[SuspendedOwner], set[str]]) -> None:
    owners, placed = case
    admitted = owners_to_unsuspend(owners, placed)
    by_ref = {o.ref: o for o in owners}
    for ref in admitted:
        gangs = by_ref[ref].gangs
        assert gangs
        for gang in gangs:
            assert gang.plan.min_member >= 1
            assert len(set(gang.pods) & placed) >= gang.plan.min_member
    # ... and every owner wholly placed is admitted, in input order.
    whole = [o.ref for o in owners if o.gangs and all(
        1 <= g.plan.min_member <= len(set(g.pods) & placed) for g in o.gangs)]
    assert list(admitted) == whole


def test_virtual_gang_has_max_member_pods_named_after_the_group() -> None:
    plan = GroupPlan(_ref("t"), "job-t-0123456789", 2, 3, _QUEUE)
    gang = virtual_gang(plan)
    assert gang.pods == ("job-t-0123456789-virtual-0", "job-t-0123456789-virtual-1", "job-t-0123456789-virtual-2")
    assert owners_to_unsuspend([SuspendedOwner(plan.owner, (gang,))], set(gang.pods[:2])) == (plan.owner,)
    assert owners_to_unsuspend([SuspendedOwner(plan.owner, (gang,))], set(gang.pods[:1])) == ()


def test_not_admitted_names_the_first_gang_not_placed_with_its_reason() -> None:
    ref = _ref("js", "jobset.x-k8s.io/v1alpha2", "JobSet")
    owner = SuspendedOwner(ref, (_gang(ref, "driver", 1, 1), _gang(ref, "workers", 2, 2)))
    pending = {"js-workers-1": "gang of 2 does not fit; ml/js-workers-1: 0/3 nodes fit: 3 without 8 free GPUs"}
    [why] = not_admitted([owner], {"js-driver-0", "js-workers-0"}, pending)
    # The virtual pod is not named: it exists nowhere.
    assert why == NotAdmitted(ref, "js-workers", "gang of 2 does not fit; a pod of the gang: 0/3 nodes fit: "
                                                 "3 without 8 free GPUs")
    assert not_admitted([owner], {"js-driver-0", "js-workers-0", "js-workers-1"}, {}) == ()  # admitted


def test_a_gang_the_engine_never_saw_is_said_to_have_no_templates_read() -> None:
    job = SuspendedOwner(_ref("train"), (_gang(_ref("train"), "", 4, 4),))
    [why] = not_admitted([job], set(), {})
    assert "could not be read" in why.reason
    [why] = not_admitted([job], {"train--0"}, {})
    assert why.reason == "1 of 4 members placed"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 4)), min_size=1, max_size=4), st.data())
def test_every_suspended_owner_is_either_admitted_or_told_why(shapes: list[tuple[int, int]],
                                                               data: st.DataObject) -> None:
    ref = _ref("o")
    gangs = tuple(_gang(ref, str(i), low, low + extra) for i, (low, extra) in enumerate(shapes))
    names = [pod for gang in gangs for pod in gang.pods]
    placed = set(data.draw(st.lists(st.sampled_from(names), unique=True)))
    owner = SuspendedOwner(ref, gangs)
    admitted, told = owners_to_unsuspend([owner], placed), not_admitted([owner], placed, {})
    assert len(admitted) + len(told) == 1
