"""Database URLs: what the ledger accepts, and one line (exit 2 in every command) for what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.adapters.errors import InputError
from gpufleet.commands.base import _as_line
from gpufleet.ledger import LedgerUnavailableError, LedgerUrlError, database_url, open_ledger


@pytest.mark.parametrize(("url", "message"), [
    ("", "--database: empty; use a file path, sqlite:///FILE or postgresql+psycopg://USER@HOST/DATABASE"),
    ("mysql://u@h/db", "--database 'mysql://u@h/db': unsupported database 'mysql'; use a file path, "
                       "sqlite:///FILE or postgresql+psycopg://USER@HOST/DATABASE"),
    ("postgresql+asyncpg://u:secret@h/db", "--database 'postgresql+asyncpg://u:***@h/db': PostgreSQL through the "
                                           "driver 'asyncpg' is not supported; use postgresql+psycopg://USER@HOST/DATABASE"),
    ("sqlite+aiosqlite:///x.db", "--database 'sqlite+aiosqlite:///x.db': SQLite through the driver 'aiosqlite' is "
                                 "not supported; use sqlite:///FILE"),
    ("no such dir/x/ledger.db", "--database 'no such dir/x/ledger.db': the directory 'no such dir/x' does not exist"),
    ("sqlite:////nonexistent-dir/l.db", "--database 'sqlite:////nonexistent-dir/l.db': the directory "
                                        "'/nonexistent-dir' does not exist"),
    ("http://", "--database 'http://': unsupported database 'http'; use a file path, sqlite:///FILE or "
                "postgresql+psycopg://USER@HOST/DATABASE"),
    ("/tmp", "--database '/tmp': a directory, not a file"),
    ("://nothing", "--database \"://nothing\": not a database URL"),
])
def test_a_bad_url_is_one_line_and_exit_2(url: str, message: str) -> None:
    with pytest.raises(LedgerUrlError) as caught:
        open_ledger(url)
    line = str(caught.value)
    assert line.startswith(message)
    assert "\n" not in line and "secret" not in line
    assert isinstance(caught.value, InputError)
    assert _as_line(caught.value, "gpufleet report usage") == (f"gpufleet report usage: {line}", 2)


def test_accepted_forms(tmp_path: Path) -> None:
    assert database_url(str(tmp_path / "l.db")).render_as_string() == f"sqlite+pysqlite:///{tmp_path}/l.db"
    assert database_url(f"sqlite:///{tmp_path}/l.db").drivername == "sqlite+pysqlite"
    assert database_url("sqlite://").database == ":memory:"
    assert database_url("postgresql://u@db:5432/ledger").drivername == "postgresql+psycopg"
    assert database_url("postgresql+psycopg://u@db/ledger").drivername == "postgresql+psycopg"


def test_an_in_memory_ledger_works() -> None:
    from .helpers import start

    with open_ledger("sqlite://") as store:
        store.record_starts([start("u1")])
        assert len(store.open_intervals()) == 1


def test_an_unreachable_database_is_one_line_without_the_password(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://u:secret@/ledger?host={tmp_path}/nowhere&port=1"
    with pytest.raises(LedgerUnavailableError) as caught:
        open_ledger(url)
    line = str(caught.value)
    assert line.startswith("ledger postgresql+psycopg://u:***@/ledger?") and "\n" not in line
    assert "secret" not in line and caught.value.exit_code == 1
    lazy = open_ledger(url, connect=False)  # the controller may start with the database down
    with pytest.raises(LedgerUnavailableError):
        lazy.open_intervals()
