"""The ledger's Alembic environment and migrations, applied by :func:`gpufleet.ledger.open_ledger`."""
