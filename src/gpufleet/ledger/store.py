"""The ledger's store: SQLAlchemy 2 Core over SQLite (a file, by default) or PostgreSQL (by URL).

:func:`open_ledger` checks the URL, connects and brings the schema to the newest Alembic revision (the
migrations ship in ``gpufleet/ledger/migrations``). Every write is one transaction and idempotent:
starts are ``INSERT .. ON CONFLICT DO NOTHING`` keyed by (pod UID, bound time), an end closes only an
interval still open, a utilisation sample is applied only when it is later than the last one applied
to its interval. SQLite runs in WAL mode with ``synchronous=FULL``: a committed write survives the
process being killed (and the machine losing power).
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.util.exc import CommandError as AlembicCommandError
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    Integer,
    bindparam,
    create_engine,
    event,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from gpufleet.adapters.errors import describe
from gpufleet.ledger._schema import intervals, labels
from gpufleet.ledger.errors import LedgerUnavailableError, LedgerUrlError
from gpufleet.ledger.model import (
    EndReason,
    Interval,
    IntervalEnd,
    IntervalStart,
    LedgerEvent,
    UtilisationSample,
    to_micros,
)

__all__ = ["LedgerStore", "database_url", "open_ledger"]

_MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_MICROS = 1_000_000.0
_USAGE = "use a file path, sqlite:///FILE or postgresql+psycopg://USER@HOST/DATABASE"
_SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=FULL",
    "PRAGMA busy_timeout=30000",
    "PRAGMA foreign_keys=ON",
)


def database_url(url: str) -> URL:
    """The SQLAlchemy URL of ``url`` (a URL, or a plain path meaning an SQLite file), or
    :class:`LedgerUrlError` naming what is wrong with it in one line."""
    text = url.strip()
    if not text:
        raise LedgerUrlError(f"--database: empty; {_USAGE}")
    if "://" not in text:
        return _sqlite_file_url(text, text)
    try:
        parsed = make_url(text)
    except (ArgumentError, ValueError) as err:
        raise LedgerUrlError(f"--database {describe(text)}: not a database URL ({err}); {_USAGE}") from None
    shown = parsed.render_as_string(hide_password=True)
    backend, driver = parsed.get_backend_name(), parsed.drivername.partition("+")[2]
    if backend == "sqlite":
        if driver not in ("", "pysqlite"):
            raise LedgerUrlError(f"--database {shown!r}: SQLite through the driver {driver!r} is not supported; "
                                 "use sqlite:///FILE")
        if not parsed.database or parsed.database == ":memory:":
            return parsed.set(drivername="sqlite+pysqlite", database=":memory:")
        return _sqlite_file_url(parsed.database, shown)
    if backend == "postgresql":
        if driver not in ("", "psycopg"):
            raise LedgerUrlError(f"--database {shown!r}: PostgreSQL through the driver {driver!r} is not "
                                 "supported; use postgresql+psycopg://USER@HOST/DATABASE")
        if importlib.util.find_spec("psycopg") is None:
            raise LedgerUrlError(f"--database {shown!r}: PostgreSQL needs psycopg, which is not installed; "
                                 "install gpufleet[postgres]")
        return parsed.set(drivername="postgresql+psycopg")
    raise LedgerUrlError(f"--database {shown!r}: unsupported database {backend!r}; {_USAGE}")


def _sqlite_file_url(path: str, shown: str) -> URL:
    folder = Path(path).expanduser().parent
    if Path(path).expanduser().is_dir():
        raise LedgerUrlError(f"--database {shown!r}: a directory, not a file")
    if not folder.is_dir():
        raise LedgerUrlError(f"--database {shown!r}: the directory {str(folder)!r} does not exist")
    return URL.create("sqlite+pysqlite", database=str(Path(path).expanduser()))


def open_ledger(url: str, *, connect: bool = True) -> LedgerStore:
    """The ledger at ``url`` (a plain path is an SQLite file), its schema brought up to date.

    A bad URL raises :class:`LedgerUrlError` at once. With ``connect`` False the first read or write
    connects and migrates instead (so that a controller can start while the database is down); a
    database that cannot be reached raises :class:`LedgerUnavailableError` then.
    """
    store = LedgerStore(database_url(url))
    if connect:
        store.migrate()
    return store


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        for pragma in _SQLITE_PRAGMAS:
            cursor.execute(pragma)
    finally:
        cursor.close()


def _engine(url: URL) -> Engine:
    if url.get_backend_name() == "sqlite":
        if url.database == ":memory:":
            engine = create_engine(url, poolclass=StaticPool, connect_args={"check_same_thread": False})
        else:
            engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": 10})


class LedgerStore:
    """The usage ledger in one database. Thread-safe (the buffered writer flushes from a worker thread)."""

    def __init__(self, url: URL) -> None:
        self.url = url
        self.shown_url = url.render_as_string(hide_password=True)
        self.dialect = url.get_backend_name()
        self._engine = _engine(url)
        self._ready = False
        self._lock = threading.Lock()
        insert = sqlite.insert if self.dialect == "sqlite" else postgresql.insert
        self._insert_interval = _DriverSql(self._engine, _START_COLUMNS, insert(intervals).values(
            {name: bindparam(name, type_=intervals.c[name].type) for name in _START_COLUMNS}
        ).on_conflict_do_nothing(index_elements=["pod_uid", "bound_us"]))
        self._insert_label = _DriverSql(self._engine, _LABEL_COLUMNS, insert(labels).values(
            {name: bindparam(name, type_=labels.c[name].type) for name in _LABEL_COLUMNS}
        ).on_conflict_do_nothing(index_elements=["pod_uid", "bound_us", "key"]))
        key = (intervals.c.pod_uid == bindparam("k_uid")) & (intervals.c.bound_us == bindparam("k_bound",
                                                                                                  type_=BigInteger))
        self._close = _DriverSql(self._engine, ("e_us", "e_reason", "e_preemptor", "k_uid", "k_bound"), (
            update(intervals)
            .where(key & intervals.c.ended_us.is_(None))
            .values(ended_us=bindparam("e_us", type_=BigInteger), end_reason=bindparam("e_reason"),
                    preemptor=bindparam("e_preemptor"))
        ))
        at = bindparam("s_at", type_=BigInteger)
        sample_names = ("k_uid", "k_bound", "s_at", "s_util", "s_util_n", "s_sm", "s_sm_n", "s_fb", "s_fb_n")
        self._sample = _DriverSql(self._engine, sample_names, (
            update(intervals)
            .where(key & or_(intervals.c.last_sample_us.is_(None), intervals.c.last_sample_us < at))
            .values(
                util_sum=intervals.c.util_sum + bindparam("s_util", type_=Float(53)),
                util_n=intervals.c.util_n + bindparam("s_util_n", type_=Integer),
                sm_sum=intervals.c.sm_sum + bindparam("s_sm", type_=Float(53)),
                sm_n=intervals.c.sm_n + bindparam("s_sm_n", type_=Integer),
                fb_sum=intervals.c.fb_sum + bindparam("s_fb", type_=Float(53)),
                fb_n=intervals.c.fb_n + bindparam("s_fb_n", type_=Integer),
                last_sample_us=at,
            )
        ))

    def __enter__(self) -> LedgerStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the store's connections."""
        self._engine.dispose()

    def migrate(self) -> None:
        """Bring the schema to the newest revision (idempotent; :func:`open_ledger` calls it)."""
        with self._lock:
            if self._ready:
                return
            config = Config()
            config.set_main_option("script_location", str(_MIGRATIONS))
            try:
                with self._connection() as conn:
                    config.attributes["connection"] = conn
                    command.upgrade(config, "head")
            except AlembicCommandError as err:  # e.g. a revision newer than this gpufleet knows
                raise LedgerUnavailableError(f"ledger {self.shown_url}: its schema cannot be brought up to date "
                                             f"by this gpufleet: {err}") from None
            self._ready = True

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        """A connection in a transaction committed at the end; database errors as LedgerUnavailableError."""
        try:
            with self._engine.begin() as conn:
                yield conn
        except SQLAlchemyError as err:
            cause = str(getattr(err, "orig", None) or err).strip().splitlines()
            raise LedgerUnavailableError(f"ledger {self.shown_url}: {cause[0] if cause else type(err).__name__}") \
                from err

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        if not self._ready:
            self.migrate()
        with self._connection() as conn:
            yield conn

    def reading(self) -> AbstractContextManager[Connection]:
        """A connection for the reports' queries (one transaction; errors as LedgerUnavailableError)."""
        return self._transaction()

    # --- writes ------------------------------------------------------------------------------------

    def write(self, events: Sequence[LedgerEvent]) -> None:
        """Write a batch in one transaction: its starts, then its ends, then its samples (a whole
        :class:`Interval` counts as its start and its end)."""
        starts = [e if isinstance(e, IntervalStart) else e.start for e in events
                  if isinstance(e, IntervalStart | Interval)]
        ends = [e for e in events if isinstance(e, IntervalEnd)]
        for whole in events:
            if isinstance(whole, Interval) and (closing := whole.end()) is not None:
                ends.append(closing)
        samples = [e for e in events if isinstance(e, UtilisationSample)]
        with self._transaction() as conn:
            self._write_starts(conn, starts)
            self._write_ends(conn, ends)
            self._write_samples(conn, samples)

    def record_starts(self, starts: Iterable[IntervalStart]) -> None:
        """Open intervals (one transaction); a start already recorded is left as it is."""
        with self._transaction() as conn:
            self._write_starts(conn, list(starts))

    def record_ends(self, ends: Iterable[IntervalEnd]) -> None:
        """Close intervals (one transaction); an interval already closed, or never opened, is left alone."""
        with self._transaction() as conn:
            self._write_ends(conn, list(ends))

    def record_samples(self, samples: Iterable[UtilisationSample]) -> None:
        """Add utilisation samples to their intervals' means (one transaction)."""
        with self._transaction() as conn:
            self._write_samples(conn, list(samples))

    def _write_starts(self, conn: Connection, starts: Sequence[IntervalStart]) -> None:
        if not starts:
            return
        self._insert_interval.run(conn, [_start_row(s) for s in starts])
        label_rows = [(s.pod_uid, to_micros(s.bound_at), k, v) for s in starts if s.labels for k, v in s.labels.items()]
        if label_rows:
            self._insert_label.run(conn, label_rows)

    def _write_ends(self, conn: Connection, ends: Sequence[IntervalEnd]) -> None:
        if not ends:
            return
        self._close.run(conn, [
            (to_micros(e.ended_at), e.reason.value, e.preemptor, e.pod_uid, to_micros(e.bound_at)) for e in ends
        ])

    def _write_samples(self, conn: Connection, samples: Sequence[UtilisationSample]) -> None:
        if not samples:
            return
        ordered = sorted(samples, key=lambda s: (s.pod_uid, to_micros(s.bound_at), to_micros(s.at)))
        self._sample.run(conn, [
            (s.pod_uid, to_micros(s.bound_at), to_micros(s.at),
             s.gpu_util or 0.0, int(s.gpu_util is not None),
             s.sm_active or 0.0, int(s.sm_active is not None),
             s.fb_used_bytes or 0.0, int(s.fb_used_bytes is not None))
            for s in ordered
        ])

    # --- reads -------------------------------------------------------------------------------------

    def open_intervals(self) -> list[IntervalStart]:
        """The intervals not yet closed (for reconciliation after a restart), by bound time."""
        return [interval.start for interval in self._read([intervals.c.ended_us.is_(None)])]

    def intervals(self, *, since: float | None = None, until: float | None = None, namespace: str | None = None,
                  pod_names: Sequence[str] | None = None) -> list[Interval]:
        """The intervals that overlap [since, until) (all when neither is given), by bound time; with
        ``namespace`` (and ``pod_names``), only those of that namespace (and those pods)."""
        where: list[ColumnElement[bool]] = []
        if namespace is not None:
            where.append(intervals.c.namespace == namespace)
        if pod_names is not None:
            where.append(intervals.c.pod_name.in_(list(pod_names)))
        if until is not None:
            where.append(intervals.c.bound_us < to_micros(until))
        if since is not None:
            where.append(or_(intervals.c.ended_us.is_(None), intervals.c.ended_us > to_micros(since)))
        return self._read(where)

    def _read(self, where: Sequence[ColumnElement[bool]]) -> list[Interval]:
        rows_query = select(intervals).where(*where).order_by(intervals.c.bound_us, intervals.c.pod_uid)
        labels_query = (
            select(labels.c.pod_uid, labels.c.bound_us, labels.c.key, labels.c.value)
            .join(intervals, (labels.c.pod_uid == intervals.c.pod_uid) & (labels.c.bound_us == intervals.c.bound_us))
            .where(*where)
        )
        with self._transaction() as conn:
            rows = conn.execute(rows_query).mappings().all()
            label_rows = conn.execute(labels_query).all() if rows else []
        by_key: dict[tuple[str, int], dict[str, str]] = {}
        for uid, bound_us, key, value in label_rows:
            by_key.setdefault((uid, bound_us), {})[key] = value
        return [_interval(row, by_key.get((row["pod_uid"], row["bound_us"]), {})) for row in rows]


class _DriverSql:
    """A statement compiled once for the engine's dialect and run with the driver's ``executemany``.

    Rows are tuples in the order of ``names``; they skip SQLAlchemy's per-row parameter processing
    (about half the time of a batch), which the plain values here (str, int, float, bool, None) do not
    need. Positional drivers (sqlite3) get the tuples in the statement's order, named ones (psycopg)
    dictionaries.
    """

    def __init__(self, engine: Engine, names: Sequence[str], statement: Any) -> None:
        compiled = statement.compile(dialect=engine.dialect)
        self.sql = str(compiled)
        self.names = tuple(names)
        positions = compiled.positiontup
        self.order: tuple[int, ...] | None = None if positions is None else tuple(map(self.names.index, positions))
        assert set(compiled.params) <= set(self.names), compiled.params

    def run(self, conn: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        if self.order is None:
            names = self.names
            conn.exec_driver_sql(self.sql, [dict(zip(names, row, strict=True)) for row in rows])
        elif self.order == tuple(range(len(self.names))):
            conn.exec_driver_sql(self.sql, list(rows))
        else:
            order = self.order
            conn.exec_driver_sql(self.sql, [tuple(row[i] for i in order) for row in rows])


_START_COLUMNS = (
    "pod_uid", "bound_us", "namespace", "pod_name", "project", "queue", "submitter", "pod_group", "priority_class",
    "preemptible", "node", "gpu_model", "gpu_indices", "gpu_blocks", "gpus", "cpu_milli", "memory_bytes",
    "created_us", "capacity_type",
)
_LABEL_COLUMNS = ("pod_uid", "bound_us", "key", "value")


def _start_row(s: IntervalStart) -> tuple[Any, ...]:
    return (
        s.pod_uid, to_micros(s.bound_at), s.namespace, s.pod_name, s.project, s.queue, s.submitter, s.pod_group,
        s.priority_class, s.preemptible, s.node, s.gpu_model, ",".join(map(str, s.gpu_indices)), s.gpu_blocks,
        float(s.gpus), s.cpu_milli, s.memory_bytes, None if s.created_at is None else to_micros(s.created_at),
        None if s.capacity_type is None else s.capacity_type.value,
    )


def _seconds(micros: int | None) -> float | None:
    return None if micros is None else micros / _MICROS


def _mean(total: float, count: int) -> float | None:
    return total / count if count else None


def _interval(row: Any, label_map: dict[str, str]) -> Interval:
    start = IntervalStart(
        pod_uid=row["pod_uid"],
        bound_at=row["bound_us"] / _MICROS,
        namespace=row["namespace"],
        pod_name=row["pod_name"],
        queue=row["queue"],
        node=row["node"],
        gpus=row["gpus"],
        project=row["project"],
        submitter=row["submitter"],
        pod_group=row["pod_group"],
        priority_class=row["priority_class"],
        preemptible=bool(row["preemptible"]),
        gpu_model=row["gpu_model"],
        gpu_indices=tuple(int(i) for i in row["gpu_indices"].split(",") if i),
        gpu_blocks=row["gpu_blocks"],
        cpu_milli=row["cpu_milli"],
        memory_bytes=row["memory_bytes"],
        created_at=_seconds(row["created_us"]),
        labels=label_map,
        capacity_type=row["capacity_type"],
    )
    reason = row["end_reason"]
    return Interval(
        start=start,
        ended_at=_seconds(row["ended_us"]),
        end_reason=None if reason is None else EndReason(reason),
        preemptor=row["preemptor"],
        gpu_util_mean=_mean(row["util_sum"], row["util_n"]),
        sm_active_mean=_mean(row["sm_sum"], row["sm_n"]),
        fb_used_mean_bytes=_mean(row["fb_sum"], row["fb_n"]),
        samples=max(row["util_n"], row["sm_n"], row["fb_n"]),
    )

