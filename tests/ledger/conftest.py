"""The ledger's tests run on SQLite and on a real PostgreSQL (Debian's server binaries, started here).

``postgres`` (session scope) runs ``initdb`` and ``pg_ctl start`` on a throwaway data directory in a
temporary directory, listening on a unix socket there only (with a free port number); as root it runs
them as the ``postgres`` system user (initdb refuses root). It skips only where the server binaries
are absent (Debian's package ``postgresql``; ``.ci/run`` installs it); a server that is there but does
not start fails the tests. ``ledger_url`` gives each test a fresh SQLite file or a fresh PostgreSQL
database.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpufleet.ledger import LedgerStore, open_ledger

BACKENDS = ["sqlite", "postgresql"]


@dataclass(frozen=True)
class PgServer:
    socket_dir: str
    port: int

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@/{database}?host={self.socket_dir}&port={self.port}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(host=self.socket_dir, port=self.port, user="postgres", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]


def _server_binaries() -> Path | None:
    found = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if not found:
        return None
    newest = max(found, key=lambda path: int(Path(path).parent.parent.name) if Path(path).parent.parent.name.isdigit()
                 else 0)
    return Path(newest).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres() -> list[str]:
    """The command prefix that runs the server as the ``postgres`` user when we are root."""
    if os.getuid() != 0:
        return []
    return ["runuser", "-u", "postgres", "--"] if shutil.which("runuser") else ["setpriv", "--reuid=postgres",
                                                                                  "--regid=postgres", "--init-groups"]


@pytest.fixture(scope="session")
def postgres() -> Iterator[PgServer]:
    bindir = _server_binaries()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb): install Debian's "
                    "package postgresql (.ci/run does)")
    root = Path(tempfile.mkdtemp(prefix="gpf-pg-"))
    prefix = _as_postgres()
    if prefix:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.fail("PostgreSQL's binaries are installed but there is no postgres user to run the server as")
        os.chown(root, user.pw_uid, user.pw_gid)
    data, log, port = root / "data", root / "server.log", _free_port()

    def run(*args: str) -> None:
        done = subprocess.run([*prefix, *args], cwd=root, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            tail = log.read_text()[-2000:] if log.exists() else ""
            pytest.fail(f"{args[0]} failed ({done.returncode}): {done.stderr[-2000:]} {tail}")

    run(str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C",
        "--no-sync")
    options = f"-p {port} -k {root} -c listen_addresses='' -c fsync=off -c synchronous_commit=off " \
              "-c full_page_writes=off -c max_connections=50"
    run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "-o", options, "start")
    try:
        yield PgServer(str(root), port)
    finally:
        subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], cwd=root,
                       capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


_databases = itertools.count()


def fresh_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty ledger database on ``backend``."""
    if backend == "sqlite":
        return str(tmp_path / f"ledger-{next(_databases)}.db")
    server: PgServer = request.getfixturevalue("postgres")
    name = f"ledger_{os.getpid()}_{next(_databases)}"
    server.admin(f"CREATE DATABASE {name}")
    return server.url(name)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def ledger_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return fresh_url(backend, request, tmp_path)


@pytest.fixture
def store(ledger_url: str) -> Iterator[LedgerStore]:
    with open_ledger(ledger_url) as opened:
        yield opened
