"""Pending reasons never contradict themselves (docs/semantics-notes.md, "Pending reasons").

Every "K/N nodes fit: ..." part of a pending reason counts each of the N nodes once: under the
first cause that rules it out, or among the K that fit. The engine gives that form only for a
pod it could not place, so K is 0.
"""

from __future__ import annotations

import re
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain import Placement, Snapshot
from gpufleet.engine import schedule

from .strategies import inter_pod_snapshots, single_gang_snapshots, snapshots, volume_snapshots
from .test_properties import PROPERTY

FIT = re.compile(r"(\d+)/(\d+) nodes fit(?:: ([^;]*))?")
COUNT = re.compile(r"(\d+) \S")


def causes_of(text: str) -> list[str]:
    """The causes of a "K/N nodes fit: ..." part, split at the commas outside parentheses and quotes."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        quoted ^= ch == '"'
        if ch == "," and depth == 0 and not quoted and not text[i + 1:].lstrip().startswith('"'):
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def contradictions(reason: str, nodes: int) -> list[str]:
    found: list[str] = []
    for match in FIT.finditer(reason):
        fits, n = int(match.group(1)), int(match.group(2))
        if n != nodes:
            found.append(f"{n} nodes counted, the cluster has {nodes}")
        if fits:
            found.append(f"{fits} nodes said to fit a pod that was not placed")
        counts = []
        for cause in causes_of(match.group(3)) if match.group(3) else []:
            count = COUNT.match(cause)
            if count is None or int(count.group(1)) < 1:
                found.append(f"cause without a count of at least 1: {cause!r}")
            else:
                counts.append(int(count.group(1)))
        if sum(counts) + fits != n:
            found.append(f"causes count {sum(counts)} nodes, {fits} fit, of {n}")
    return found


def check(snapshot: Snapshot) -> None:
    decisions = schedule(snapshot)
    for pending in decisions.pending:
        bad = contradictions(pending.reason, len(snapshot.nodes))
        assert not bad, f"{pending.pod}: {pending.reason!r}: {bad}"


PLACEMENTS = st.sampled_from(list(Placement))


@PROPERTY
@given(snapshots(), PLACEMENTS)
def test_reasons_add_up(snapshot: Snapshot, placement: Placement) -> None:
    check(replace(snapshot, config=replace(snapshot.config, placement=placement)))


@PROPERTY
@given(single_gang_snapshots(), PLACEMENTS)
def test_reasons_add_up_for_a_single_gang(snapshot: Snapshot, placement: Placement) -> None:
    check(replace(snapshot, config=replace(snapshot.config, placement=placement)))


@PROPERTY
@given(inter_pod_snapshots())
def test_reasons_add_up_with_inter_pod_rules(snapshot: Snapshot) -> None:
    check(snapshot)


@PROPERTY
@given(volume_snapshots())
def test_reasons_add_up_with_volumes(snapshot: Snapshot) -> None:
    check(snapshot)


def test_the_checker_sees_a_contradiction() -> None:
    # The reason once printed for a fractional pod (issue 12).
    assert contradictions("1/1 nodes fit: 1 without a GPU with 25 free blocks", 1) == [
        "1 nodes said to fit a pod that was not placed",
        "causes count 1 nodes, 1 fit, of 1",
    ]
    assert contradictions("0/3 nodes fit: 2 outside project ml-vision's node pools (a100, h100), "
                          "1 without 1 free GPU (most free on one node: 0); no eligible victims", 3) == []
