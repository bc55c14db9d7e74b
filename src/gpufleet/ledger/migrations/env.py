"""Alembic's environment for the ledger: always run online, on the connection the store hands over.

The store (``gpufleet.ledger.store``) runs ``alembic upgrade head`` programmatically with an open
connection in ``config.attributes["connection"]``; there is no alembic.ini. On PostgreSQL a
transaction-scoped advisory lock keeps two processes from migrating at once.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection

from gpufleet.ledger._schema import metadata

_MIGRATION_LOCK = 0x6770_666C  # "gpfl": the advisory lock key of ledger migrations


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if not isinstance(connection, Connection):
        raise RuntimeError("the ledger's migrations run through gpufleet.ledger.open_ledger, with a connection")
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("the ledger's migrations run online only")
run_migrations_online()
