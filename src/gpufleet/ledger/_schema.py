"""The ledger's tables as SQLAlchemy Core metadata (the Alembic migrations create exactly these).

Times are whole microseconds since the Unix epoch (BigInteger), so that durations are plain integer
arithmetic in SQL on every dialect.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    text,
)

__all__ = ["intervals", "labels", "metadata"]

metadata = MetaData()

intervals = Table(
    "ledger_intervals",
    metadata,
    Column("pod_uid", String, nullable=False),
    Column("bound_us", BigInteger, nullable=False),
    Column("namespace", String, nullable=False),
    Column("pod_name", String, nullable=False),
    Column("project", String),
    Column("queue", String, nullable=False),
    Column("submitter", String),
    Column("pod_group", String),
    Column("priority_class", String),
    Column("preemptible", Boolean, nullable=False),
    Column("node", String, nullable=False),
    Column("gpu_model", String),
    Column("gpu_indices", String, nullable=False),  # "0,1,2"; "" when not known
    Column("gpu_blocks", Integer),
    Column("gpus", Float(53), nullable=False),
    Column("cpu_milli", BigInteger, nullable=False),
    Column("memory_bytes", BigInteger, nullable=False),
    Column("created_us", BigInteger),
    Column("ended_us", BigInteger),
    Column("end_reason", String),
    Column("preemptor", String),
    # Utilisation: sums and counts per metric (means = sum / count), and the last sample applied.
    Column("util_sum", Float(53), nullable=False, server_default=text("0")),
    Column("util_n", Integer, nullable=False, server_default=text("0")),
    Column("sm_sum", Float(53), nullable=False, server_default=text("0")),
    Column("sm_n", Integer, nullable=False, server_default=text("0")),
    Column("fb_sum", Float(53), nullable=False, server_default=text("0")),
    Column("fb_n", Integer, nullable=False, server_default=text("0")),
    Column("last_sample_us", BigInteger),
    Column("capacity_type", String),  # on-demand | spot | reserved; NULL: on-demand (migration 0002)
    PrimaryKeyConstraint("pod_uid", "bound_us", name="pk_ledger_intervals"),
)

Index("ix_ledger_intervals_bound", intervals.c.bound_us)
Index("ix_ledger_intervals_ended", intervals.c.ended_us)
Index("ix_ledger_intervals_project", intervals.c.project, intervals.c.bound_us)
Index("ix_ledger_intervals_queue", intervals.c.queue, intervals.c.bound_us)
Index("ix_ledger_intervals_gpu_model", intervals.c.gpu_model, intervals.c.bound_us)
Index(
    "ix_ledger_intervals_open",
    intervals.c.pod_uid,
    sqlite_where=intervals.c.ended_us.is_(None),
    postgresql_where=intervals.c.ended_us.is_(None),
)

# The reports' waits in order (migration 0003): over all, and per project and GPU model. Partial (only
# intervals with a creation time have a wait) and covering (both columns of the wait are in it too).
_WAIT = intervals.c.bound_us - intervals.c.created_us
_WITH_WAIT = intervals.c.created_us.is_not(None)
Index("ix_ledger_intervals_waits", _WAIT, intervals.c.bound_us, intervals.c.created_us,
      sqlite_where=_WITH_WAIT, postgresql_where=_WITH_WAIT)
Index("ix_ledger_intervals_project_model_waits", intervals.c.project, intervals.c.gpu_model, _WAIT,
      intervals.c.bound_us, intervals.c.created_us, sqlite_where=_WITH_WAIT, postgresql_where=_WITH_WAIT)

labels = Table(
    "ledger_labels",
    metadata,
    Column("pod_uid", String, nullable=False),
    Column("bound_us", BigInteger, nullable=False),
    Column("key", String, nullable=False),
    Column("value", String, nullable=False),
    PrimaryKeyConstraint("pod_uid", "bound_us", "key", name="pk_ledger_labels"),
    ForeignKeyConstraint(
        ["pod_uid", "bound_us"],
        ["ledger_intervals.pod_uid", "ledger_intervals.bound_us"],
        name="fk_ledger_labels_interval",
        ondelete="CASCADE",
    ),
)

Index("ix_ledger_labels_key_value", labels.c.key, labels.c.value)
