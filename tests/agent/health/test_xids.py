"""The Xid catalog: the Xids the issue names are there, each with a rule consistent with NVIDIA's action."""

from __future__ import annotations

import pytest

from gpufleet.agent.health import XID_CATALOG, XidAction, xid_rule

REQUIRED = (13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120)
MARKING = {46, 48, 61, 62, 64, 74, 79, 95, 109, 119, 120, 140}
APPLICATION = {8, 13, 31, 43, 68, 69, 94}


def test_every_required_xid_is_in_the_catalog_with_a_meaning_and_a_reason_why() -> None:
    for xid in REQUIRED:
        rule = XID_CATALOG[xid]
        assert rule.xid == xid
        assert rule.meaning and rule.why and rule.nvidia_action and rule.mnemonic


def test_the_marking_xids_are_exactly_those_nvidia_resets_or_reboots_for() -> None:
    assert {xid for xid, rule in XID_CATALOG.items() if rule.marks_unhealthy} == MARKING
    for xid in MARKING:
        assert XID_CATALOG[xid].action in (XidAction.RESET_GPU, XidAction.REBOOT_NODE)
    for xid, rule in XID_CATALOG.items():
        if xid not in MARKING:
            assert rule.action not in (XidAction.RESET_GPU, XidAction.REBOOT_NODE), xid


def test_application_xids_count_toward_the_storm_and_45_does_not() -> None:
    assert {xid for xid, rule in XID_CATALOG.items() if rule.counts_toward_storm} == APPLICATION
    assert not XID_CATALOG[45].counts_toward_storm  # every killed process logs it, our evictions included


@pytest.mark.parametrize(("xid", "action"), [
    (79, XidAction.REBOOT_NODE), (119, XidAction.RESET_GPU), (95, XidAction.RESET_GPU),
    (94, XidAction.RESTART_APPLICATION), (13, XidAction.RESTART_APPLICATION), (63, XidAction.IGNORE),
    (154, XidAction.FOLLOW_RELATED_XID),
])
def test_actions_follow_nvidia_buckets(xid: int, action: XidAction) -> None:
    assert xid_rule(xid).action is action


def test_xid_79_reason_names_meaning_and_action() -> None:
    assert xid_rule(79).reason() == "Xid 79: GPU has fallen off the bus; action: reboot the node"


def test_unknown_xid_is_reported_not_marking() -> None:
    rule = xid_rule(4242)
    assert rule.xid == 4242
    assert rule.action is XidAction.UNKNOWN
    assert not rule.marks_unhealthy and not rule.counts_toward_storm
    assert "4242" in rule.reason()
