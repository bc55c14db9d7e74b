"""The usage ledger's first tables: allocation intervals and their cost-centre labels.

Revision ID: 0001
Revises:
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledger_intervals",
        sa.Column("pod_uid", sa.String(), nullable=False),
        sa.Column("bound_us", sa.BigInteger(), nullable=False),
        sa.Column("namespace", sa.String(), nullable=False),
        sa.Column("pod_name", sa.String(), nullable=False),
        sa.Column("project", sa.String()),
        sa.Column("queue", sa.String(), nullable=False),
        sa.Column("submitter", sa.String()),
        sa.Column("pod_group", sa.String()),
        sa.Column("priority_class", sa.String()),
        sa.Column("preemptible", sa.Boolean(), nullable=False),
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("gpu_model", sa.String()),
        sa.Column("gpu_indices", sa.String(), nullable=False),
        sa.Column("gpu_blocks", sa.Integer()),
        sa.Column("gpus", sa.Float(53), nullable=False),
        sa.Column("cpu_milli", sa.BigInteger(), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_us", sa.BigInteger()),
        sa.Column("ended_us", sa.BigInteger()),
        sa.Column("end_reason", sa.String()),
        sa.Column("preemptor", sa.String()),
        sa.Column("util_sum", sa.Float(53), nullable=False, server_default=sa.text("0")),
        sa.Column("util_n", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("sm_sum", sa.Float(53), nullable=False, server_default=sa.text("0")),
        sa.Column("sm_n", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("fb_sum", sa.Float(53), nullable=False, server_default=sa.text("0")),
        sa.Column("fb_n", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("last_sample_us", sa.BigInteger()),
        sa.PrimaryKeyConstraint("pod_uid", "bound_us", name="pk_ledger_intervals"),
    )
    op.create_index("ix_ledger_intervals_bound", "ledger_intervals", ["bound_us"])
    op.create_index("ix_ledger_intervals_ended", "ledger_intervals", ["ended_us"])
    op.create_index("ix_ledger_intervals_project", "ledger_intervals", ["project", "bound_us"])
    op.create_index("ix_ledger_intervals_queue", "ledger_intervals", ["queue", "bound_us"])
    op.create_index("ix_ledger_intervals_gpu_model", "ledger_intervals", ["gpu_model", "bound_us"])
    op.create_index(
        "ix_ledger_intervals_open",
        "ledger_intervals",
        ["pod_uid"],
        sqlite_where=sa.text("ended_us IS NULL"),
        postgresql_where=sa.text("ended_us IS NULL"),
    )
    op.create_table(
        "ledger_labels",
        sa.Column("pod_uid", sa.String(), nullable=False),
        sa.Column("bound_us", sa.BigInteger(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("value", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("pod_uid", "bound_us", "key", name="pk_ledger_labels"),
        sa.ForeignKeyConstraint(
            ["pod_uid", "bound_us"],
            ["ledger_intervals.pod_uid", "ledger_intervals.bound_us"],
            name="fk_ledger_labels_interval",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_ledger_labels_key_value", "ledger_labels", ["key", "value"])


def downgrade() -> None:
    op.drop_table("ledger_labels")
    op.drop_table("ledger_intervals")
