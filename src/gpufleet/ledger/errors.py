"""The ledger's errors, each one line.

:class:`LedgerUrlError` is an :class:`~gpufleet.adapters.errors.InputError`, so every command prints it as
one line and exits with status 2. :class:`LedgerUnavailableError` (the database cannot be reached, or
refused a write) carries ``exit_code`` 1: it is not the user's input; the controller's buffered writer
keeps the events and tries again.
"""

from __future__ import annotations

from gpufleet.adapters.errors import InputError

__all__ = ["LedgerError", "LedgerUnavailableError", "LedgerUrlError"]


class LedgerError(Exception):
    """Something about the usage ledger went wrong; the message is one line."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class LedgerUrlError(InputError, LedgerError):
    """A database URL the ledger cannot use (malformed, an unknown dialect or driver, a missing directory)."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        InputError.__init__(self, message)


class LedgerUnavailableError(LedgerError):
    """The database could not be reached, or failed a read or a write (the events are not written)."""
