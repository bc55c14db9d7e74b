"""Invariants of the grouping rules over generated owners."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.policy.grouping import (
    KINDS,
    MAX_NAME,
    GangUnit,
    GroupProblem,
    Owner,
    OwnerRef,
    Role,
    group_for,
    group_name,
)

from .helpers import FACTS

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Kubernetes object names: DNS-1123 subdomains (dots allowed), up to 253 characters.
names = st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", fullmatch=True)
uids = st.uuids().map(str)
kinds = st.sampled_from(sorted(KINDS))
units = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", max_size=40)


def _ref(kind: tuple[str, str], name: str, uid: str, namespace: str = "ml") -> OwnerRef:
    return OwnerRef(KINDS[kind].versions[0], kind[1], namespace, name, uid)


@settings(max_examples=300, deadline=None)
@given(kinds, names, uids, units)
def test_names_are_deterministic_dns1123_labels(kind: tuple[str, str], name: str, uid: str, unit: str) -> None:
    ref = _ref(kind, name, uid)
    first = group_name(KINDS[kind].short, ref, unit)
    assert first == group_name(KINDS[kind].short, _ref(kind, name, uid), unit)
    assert len(first) <= MAX_NAME
    assert DNS1123_LABEL.match(first), first


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(kinds, names, uids, units), min_size=2, max_size=8, unique=True))
def test_names_of_distinct_owners_or_units_differ(owners: list[tuple[tuple[str, str], str, str, str]]) -> None:
    made = {group_name(KINDS[k].short, _ref(k, n, u), unit) for k, n, u, unit in owners}
    assert len(made) == len(owners)


roles = st.builds(
    Role, name=st.sampled_from(["master", "worker", "launcher", "head", "g1"]),
    replicas=st.integers(0, 64), pods_per_replica=st.integers(1, 8),
    min_replicas=st.none() | st.integers(0, 64), max_replicas=st.none() | st.integers(0, 128),
    counted=st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(kinds, st.lists(roles, min_size=1, max_size=4, unique_by=lambda r: r.name),
       st.sampled_from(list(GangUnit)), st.integers(0, 5), st.none() | st.integers(-2, 600).map(str))
def test_min_member_never_above_the_members(kind: tuple[str, str], owner_roles: list[Role], unit: GangUnit,
                                            replica_count: int, min_member: str | None) -> None:
    annotations = {} if min_member is None else {"gpufleet.dev/min-member": min_member}
    owner = Owner(_ref(kind, "w", "u"), {}, annotations, tuple(owner_roles), unit, replica_count)
    result = group_for(owner, FACTS, "pod-0")
    if isinstance(result, GroupProblem):
        assert min_member is not None and result.reason.startswith(f"{owner.ref}: annotation gpufleet.dev/min-member")
        return
    for plan in result:
        assert 1 <= plan.min_member <= plan.max_member
    assert len({plan.name for plan in result}) == len(result)
