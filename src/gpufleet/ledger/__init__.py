"""The usage ledger: every allocation interval (who held which GPUs, from when to when, and how it ended).

The public face, for the controller (records bindings and ends, reconciles after a restart), the
simulator (``simulate run --ledger``) and the reports:

* the records, plain frozen dataclasses: :class:`IntervalStart`, :class:`IntervalEnd`,
  :class:`UtilisationSample`, :class:`EndReason`, the read-back :class:`Interval` and its
  :class:`IntervalKey`; :func:`gpu_amount` and :func:`to_micros`;
* the store: :func:`open_ledger` (a path or ``sqlite:///FILE``, or ``postgresql+psycopg://...``;
  Alembic migrations applied on open), :class:`LedgerStore`, :func:`database_url`, the
  :class:`LedgerSink` protocol;
* :class:`BufferedWriter` (a bounded buffer with retries and backoff), :class:`Backoff`,
  :class:`WriterStatus`;
* :class:`CapacityType` and :func:`capacity_type_of` (a node's labels -> on-demand, spot or reserved);
* :func:`reconcile` with :class:`ObservedPod` and :class:`Reconciliation`;
* the errors: :class:`LedgerError`, :class:`LedgerUrlError` (an ``InputError``: exit 2) and
  :class:`LedgerUnavailableError`.

SQLAlchemy, Alembic and psycopg are imported only inside this package (an import-linter contract), and
only when the store is first used. The rules: docs/semantics-notes.md, "Usage ledger (accounting)".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet._lazy import lazy_exports

if TYPE_CHECKING:
    from gpufleet.ledger.capacity import CapacityType, capacity_type_of
    from gpufleet.ledger.errors import LedgerError, LedgerUnavailableError, LedgerUrlError
    from gpufleet.ledger.model import (
        ANNOTATION_EVICTED_BY,
        EndReason,
        Interval,
        IntervalEnd,
        IntervalKey,
        IntervalStart,
        LedgerEvent,
        UtilisationSample,
        gpu_amount,
        to_micros,
    )
    from gpufleet.ledger.reconciliation import ObservedPod, Reconciliation, reconcile
    from gpufleet.ledger.spot import is_spot_node
    from gpufleet.ledger.store import LedgerStore, database_url, open_ledger
    from gpufleet.ledger.writer import Backoff, BufferedWriter, LedgerSink, WriterStatus

_WHERE = {
    "CapacityType": "gpufleet.ledger.capacity",
    "capacity_type_of": "gpufleet.ledger.capacity",
    "LedgerError": "gpufleet.ledger.errors",
    "LedgerUnavailableError": "gpufleet.ledger.errors",
    "LedgerUrlError": "gpufleet.ledger.errors",
    "ANNOTATION_EVICTED_BY": "gpufleet.ledger.model",
    "EndReason": "gpufleet.ledger.model",
    "Interval": "gpufleet.ledger.model",
    "IntervalEnd": "gpufleet.ledger.model",
    "IntervalKey": "gpufleet.ledger.model",
    "IntervalStart": "gpufleet.ledger.model",
    "LedgerEvent": "gpufleet.ledger.model",
    "UtilisationSample": "gpufleet.ledger.model",
    "gpu_amount": "gpufleet.ledger.model",
    "to_micros": "gpufleet.ledger.model",
    "ObservedPod": "gpufleet.ledger.reconciliation",
    "Reconciliation": "gpufleet.ledger.reconciliation",
    "reconcile": "gpufleet.ledger.reconciliation",
    "is_spot_node": "gpufleet.ledger.spot",
    "LedgerSink": "gpufleet.ledger.writer",
    "LedgerStore": "gpufleet.ledger.store",
    "database_url": "gpufleet.ledger.store",
    "open_ledger": "gpufleet.ledger.store",
    "Backoff": "gpufleet.ledger.writer",
    "BufferedWriter": "gpufleet.ledger.writer",
    "WriterStatus": "gpufleet.ledger.writer",
}

__all__ = [
    "ANNOTATION_EVICTED_BY",
    "Backoff",
    "BufferedWriter",
    "CapacityType",
    "EndReason",
    "Interval",
    "IntervalEnd",
    "IntervalKey",
    "IntervalStart",
    "LedgerError",
    "LedgerEvent",
    "LedgerSink",
    "LedgerStore",
    "LedgerUnavailableError",
    "LedgerUrlError",
    "ObservedPod",
    "Reconciliation",
    "UtilisationSample",
    "WriterStatus",
    "capacity_type_of",
    "database_url",
    "gpu_amount",
    "is_spot_node",
    "open_ledger",
    "reconcile",
    "to_micros",
]
__getattr__ = lazy_exports(__name__, _WHERE)
