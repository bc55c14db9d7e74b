"""docs/agent.md's Xid table says what the catalog in code does."""

from __future__ import annotations

from pathlib import Path

from gpufleet.agent.health import XID_CATALOG

DOC = Path(__file__).resolve().parents[3] / "docs" / "agent.md"


def test_the_xid_table_of_the_docs_matches_the_catalog() -> None:
    rows = {}
    for line in DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].isdigit():
            rows[int(cells[0])] = cells
    assert set(rows) == set(XID_CATALOG)
    for xid, rule in XID_CATALOG.items():
        meaning, nvidia_action, action, verdict, _why = rows[xid][1:]
        assert (meaning, nvidia_action, action) == (rule.meaning, f"`{rule.nvidia_action}`", rule.action.value)
        assert ("marks the GPU" in verdict) is rule.marks_unhealthy, xid
        assert ("counts toward a storm" in verdict) is rule.counts_toward_storm, xid
