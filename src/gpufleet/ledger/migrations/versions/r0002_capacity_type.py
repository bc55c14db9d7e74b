"""The node's capacity type of each interval (on-demand, spot or reserved), for the reports' prices.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("ledger_intervals", sa.Column("capacity_type", sa.String()))


def downgrade() -> None:
    with op.batch_alter_table("ledger_intervals") as batch:
        batch.drop_column("capacity_type")
