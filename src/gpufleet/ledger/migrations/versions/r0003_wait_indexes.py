"""Indexes that hold the reports' waits in order, so that the wait percentiles walk an index instead of
sorting every wait (``gpufleet report usage``; BENCHMARKS.md, "Issue 14: report usage under 5 s").

Both are partial (intervals with a creation time: the only ones with a wait) and covering: the wait
``bound_us - created_us`` is an expression of the index, and both its columns are in it too, so that
SQLite (before 3.41, which cannot read an indexed expression's value back) need not visit the table.

* ``ix_ledger_intervals_waits``: every wait in order (the percentiles over all, the wait CDF);
* ``ix_ledger_intervals_project_model_waits``: the waits in order per project and GPU model (the
  report's usual grouping: a bill per project priced per GPU model).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_WITH_WAIT = "created_us IS NOT NULL"


def upgrade() -> None:
    wait = sa.text("(bound_us - created_us)")
    op.create_index("ix_ledger_intervals_waits", "ledger_intervals", [wait, "bound_us", "created_us"],
                    sqlite_where=sa.text(_WITH_WAIT), postgresql_where=sa.text(_WITH_WAIT))
    op.create_index("ix_ledger_intervals_project_model_waits", "ledger_intervals",
                    ["project", "gpu_model", wait, "bound_us", "created_us"],
                    sqlite_where=sa.text(_WITH_WAIT), postgresql_where=sa.text(_WITH_WAIT))


def downgrade() -> None:
    op.drop_index("ix_ledger_intervals_project_model_waits", "ledger_intervals")
    op.drop_index("ix_ledger_intervals_waits", "ledger_intervals")
