"""Engine setup, transactions and retries — in one place.

* **SQLite** (``sqlite+aiosqlite``): WAL, ``busy_timeout`` and ``foreign_keys=ON`` on
  every connection. The driver's own transaction handling is switched off so that we
  emit ``BEGIN`` ourselves: read transactions use a plain (deferred) ``BEGIN``, write
  transactions ``BEGIN IMMEDIATE``, so two writers queue on the busy timeout instead of
  failing with a lock-upgrade deadlock. SQLite is for one worker; fleets use PostgreSQL.
* **PostgreSQL** (``postgresql+asyncpg``): a pool of ``pool_size`` + ``max_overflow``
  connections; writers lock the rows that order them (``SELECT ... FOR NO KEY UPDATE``)
  inside the transaction. No ``pool_pre_ping`` (a round trip before every transaction):
  a pooled connection the server closed (a restart, ``pg_terminate_backend``, an idle
  timeout) fails its first statement, SQLAlchemy invalidates it — and every other
  connection of the pool that is as old — and :meth:`Database.run` retries the unit on a
  new one, so the call succeeds. (A connection lost *during* ``COMMIT`` is not retried:
  the commit may have landed. The caller gets a transient ``StorageError``.)
* :class:`Database` runs units of work: plain functions over one SQLAlchemy Core
  ``Connection`` in one transaction. On PostgreSQL they run on the event loop through
  asyncpg (``run_sync``); on SQLite, whose driver is a blocking library, each runs whole
  in a worker thread of the database's own pool over the sqlite3 driver — one thread
  hand-off per transaction, not several per statement —, on a connection kept open from
  one unit to the next (a unit that fails gives its back to the pool). Either way
  transient failures are retried a bounded number of times and every driver error is
  wrapped in :class:`~coach.errors.StorageError`, saying whether it may pass by itself.
* :func:`create_engine` gives an async engine for tooling that wants one (tests);
  migrations and checks run through a :class:`Database` of their own
  (:func:`~.migrate.tooling_database`).
* **In memory** (:func:`is_memory`): a :class:`Database` is one connection for its life.
  A *named* database (:mod:`.inmemory`) is shared by the process's connections to it;
  ``sqlite://`` is a new, empty one per connection, so migrations and tooling refuse it
  (:func:`require_shared`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from sqlalchemy import create_engine as _create_sync_engine
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError, StatementError
from sqlalchemy.pool import Pool, StaticPool

from ..errors import CoachError, ConfigError, InvalidWrite, StorageError
from .failures import describe, is_resource_error, is_transient
from .threads import Workers

if TYPE_CHECKING:  # imported where PostgreSQL needs it: the asyncio extension imports
    # SQLAlchemy's ORM, a tenth of a second of every command that opens a SQLite database
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "DEFAULT_ATTEMPTS",
    "DEFAULT_TIMEOUT",
    "Database",
    "create_engine",
    "driver_rowids",
    "driver_sql",
    "is_memory",
    "is_transient",
    "normalize_url",
    "require_shared",
]

log = logging.getLogger("coach.persistence")

T = TypeVar("T")

DEFAULT_ATTEMPTS: Final = 4
DEFAULT_TIMEOUT: Final = 5.0
"""Seconds a PostgreSQL call may take in all, retries included (``COACH_DB_TIMEOUT``)."""
SQLITE_BUSY_TIMEOUT_MS: Final = 15_000


def normalize_url(url: str | URL) -> URL:
    """Return ``url`` with its async driver: ``sqlite`` -> aiosqlite, ``postgresql`` -> asyncpg."""
    parsed = make_url(url)
    if parsed.drivername in ("sqlite", "sqlite+pysqlite"):
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    elif parsed.drivername in ("postgresql", "postgres", "postgresql+psycopg2"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    return parsed


def is_memory(url: str | URL) -> bool:
    """True for a SQLite database in memory: ``sqlite://``, ``sqlite:///:memory:`` or a
    URI filename (``?uri=true``) in ``mode=memory`` or on the ``memdb`` VFS."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return False
    if not parsed.database or parsed.database == ":memory:":
        return True
    query = parsed.query
    return query.get("uri") == "true" and (
        query.get("vfs") == "memdb" or query.get("mode") == "memory"
    )


def require_directory(url: URL) -> None:
    """Refuse a SQLite file whose directory does not exist: a typo in the path must not
    silently start an empty database somewhere new (the default directory is made by
    settings, before this)."""
    if url.database and url.database != ":memory:" and not url.database.startswith("file:"):
        folder = Path(url.database).expanduser().parent
        if not folder.is_dir():
            raise ConfigError(
                f"the SQLite database {url.database} cannot be opened: its directory "
                f"{folder} does not exist (COACH_DATABASE_URL; check the path, or create it)"
            )


def require_shared(url: str | URL) -> URL:
    """``url`` normalized (:func:`normalize_url`), refused when it is ``sqlite://`` (or
    ``sqlite:///:memory:``): each connection to it is a new, empty database, so
    migrations and tooling cannot reach the one a store writes to.

    Raises:
        ConfigError: It is such a database.
    """
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ConfigError(
            f"{parsed.render_as_string(hide_password=True)} is a new, empty database on "
            "every connection, so migrations and tooling cannot reach the one a store "
            "writes to: for a store in memory use coach.testing.memory_store() (or a "
            "named in-memory database: coach.persistence.inmemory.memory_database())"
        )
    return parsed


def create_engine(
    url: str | URL,
    *,
    pool_size: int = 5,
    max_overflow: int = 10,
    busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS,
    timeout: float | None = None,
    echo: bool = False,
    foreign_keys: bool = True,
) -> AsyncEngine:
    """Create the async engine for ``url`` with coach's settings.

    Args:
        url: A SQLAlchemy URL; ``sqlite://`` and ``postgresql://`` get their async driver.
        pool_size: PostgreSQL pool size (``COACH_DB_POOL_SIZE``).
        max_overflow: PostgreSQL pool overflow (``COACH_DB_MAX_OVERFLOW``).
        busy_timeout_ms: How long a SQLite writer waits for the write lock.
        timeout: How long PostgreSQL may take to connect, hand out a pooled
            connection or answer one statement (a stalled server never hangs a call).
            ``None`` (migrations, tooling): 10 s to connect, statements unbounded.
        echo: Log every statement (debugging).
        foreign_keys: Enforce SQLite's foreign keys; migrations turn them off, as
            SQLite asks for a table rebuilt by copying (its drop would cascade).

    Returns:
        The engine; dispose of it with ``await engine.dispose()``.

    Raises:
        ConfigError: ``url`` is ``sqlite://`` (or ``sqlite:///:memory:``): each of the
            engine's connections would be a new, empty database of its own.
    """
    from sqlalchemy.ext.asyncio import create_async_engine as _create_async_engine

    parsed = require_shared(url)
    if parsed.get_backend_name() == "sqlite":
        require_directory(parsed)
        engine = _create_async_engine(parsed, echo=echo)
        _configure_sqlite(engine.sync_engine, busy_timeout_ms, foreign_keys=foreign_keys)
        _begin_on_transaction(engine)
        return engine
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "postgresql":
        kwargs["connect_args"] = {
            "server_settings": {"application_name": "coach"},
            "timeout": timeout or 10,
            "command_timeout": timeout,
        }
        if timeout is not None:
            kwargs["pool_timeout"] = timeout
    return _create_async_engine(
        parsed,
        echo=echo,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_recycle=1800,
        **kwargs,
    )


def _configure_sqlite(engine: Engine, busy_timeout_ms: int, *, foreign_keys: bool = True) -> None:
    """Set SQLite's pragmas on every new connection, and leave ``BEGIN`` to coach."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # We emit BEGIN ourselves (Database's units, _begin_on_transaction); the driver
        # must not.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cursor.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()


def _begin_on_transaction(engine: AsyncEngine) -> None:
    """Emit ``BEGIN`` on every transaction of a tooling engine. :class:`Database` emits
    its own in the unit instead: a connection event makes SQLAlchemy dispatch events
    around every statement (~20 % of a turn's write)."""

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN")


def _listeners(conn: Connection) -> Any:
    """``conn``'s events when a listener of them was ever added to it or its engine, else
    ``None``: SQLAlchemy's own test before it looks for listeners, a tenth of the cost."""
    return conn.dispatch if conn._has_events or conn.engine._has_events else None


def driver_sql(
    conn: Connection, sql: str, params: Sequence[Any] = (), *, many: bool = False
) -> tuple[int, list[tuple[Any, ...]]]:
    """Run ``sql`` on ``conn``'s own driver cursor, inside its transaction: the row
    count and the rows (``many``: ``params`` is a sequence of parameter rows).

    For the hottest statements: a statement through SQLAlchemy's ``Connection`` —
    even ``exec_driver_sql`` — sets up an execution context and a result each time,
    which cost more than the statement on SQLite. What SQLAlchemy gives on the way is
    kept here: a driver error comes out as SQLAlchemy's :class:`~sqlalchemy.exc.DBAPIError`
    (so :class:`Database` retries and reports it alike), and a lost connection is
    invalidated with every pooled connection as old (the pool is replaced), as
    SQLAlchemy does, so the retry opens a new one. Listeners of the engine's
    ``before_cursor_execute`` and ``after_cursor_execute`` see the statement (with no
    execution context; they cannot rewrite it): it is dispatched only when there are.
    """
    cursor, events = _cursor(conn)
    try:
        _execute(conn, cursor, events, sql, params, many)
        return cursor.rowcount, (list(cursor.fetchall()) if cursor.description else [])
    except conn.dialect.loaded_dbapi.Error as error:
        raise _translated(conn, cursor, sql, params, error) from error
    finally:
        cursor.close()


def driver_rowids(conn: Connection, sql: str, rows: Sequence[Sequence[Any]]) -> list[int]:
    """Run the one-row ``INSERT`` ``sql`` once for each of ``rows`` on one driver cursor,
    as :func:`driver_sql` runs a statement: the new rows' ids (``lastrowid``), in order.

    For SQLite, where a row's id comes back with no ``RETURNING``: a multi-row
    ``INSERT ... RETURNING`` of a turn's two messages costs SQLite itself more than two
    of these.
    """
    cursor, events = _cursor(conn)
    params: Sequence[Any] = ()
    ids: list[int] = []
    try:
        for params in rows:
            _execute(conn, cursor, events, sql, params, False)
            ids.append(cursor.lastrowid)
        return ids
    except conn.dialect.loaded_dbapi.Error as error:
        raise _translated(conn, cursor, sql, params, error) from error
    finally:
        cursor.close()


def _cursor(conn: Connection) -> tuple[Any, Any]:
    """A new cursor of ``conn``'s driver connection, and its listeners (:func:`_listeners`)."""
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None  # checked out: the connection is live
    return dbapi.cursor(), _listeners(conn)


def _execute(conn: Connection, cursor: Any, events: Any, sql: str, params: Any, many: bool) -> None:
    if events is not None and events.before_cursor_execute:
        events.before_cursor_execute(conn, cursor, sql, params, None, many)
    if many:
        cursor.executemany(sql, params)
    else:
        cursor.execute(sql, params)
    if events is not None and events.after_cursor_execute:
        events.after_cursor_execute(conn, cursor, sql, params, None, many)


def _translated(conn: Connection, cursor: Any, sql: str, params: Any, error: Any) -> StatementError:
    """A driver's ``error`` as SQLAlchemy gives it; a lost connection invalidated, with
    every pooled connection as old (the checked-in ones are closed)."""
    dialect = conn.dialect
    lost = dialect.is_disconnect(error, conn.connection.dbapi_connection, cursor)
    if lost:
        conn.invalidate(error)
        conn.engine.dispose()
    translated: StatementError = DBAPIError.instance(
        sql, params, error, dialect.loaded_dbapi.Error,
        connection_invalidated=lost, dialect=dialect,
    )  # fmt: skip
    return translated


class _CommitFailed(Exception):
    """A failure while committing: the transaction may have landed."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class _Abandoned(Exception):
    """The caller stopped waiting before the unit could commit: it is rolled back."""


class _Caller:
    """Whether a unit's caller stopped waiting: set on the loop, read by the unit's
    thread before it commits (a flag, not a ``threading.Event``: nothing waits on it, and
    an event costs 3 µs to make)."""

    __slots__ = ("gone",)

    def __init__(self) -> None:
        self.gone = False


def _transact(
    conn: Connection,
    op: Callable[[Connection], T],
    caller: _Caller | None = None,
    begin: str | None = None,
) -> T:
    transaction = conn.begin()
    try:
        if begin is not None:
            driver_sql(conn, begin)
        result = op(conn)
        if caller is not None and caller.gone:
            raise _Abandoned
    except BaseException:
        transaction.rollback()
        raise
    try:
        transaction.commit()
    except (SQLAlchemyError, OSError) as exc:
        raise _CommitFailed(exc) from exc
    return result


class Database:
    """Where coach's units of work run: one transaction each, retried when transient.

    Args:
        url: A SQLAlchemy URL (``sqlite://`` or ``postgresql://``, any driver named).
        pool_size: Connections (PostgreSQL pool; SQLite worker threads).
        max_overflow: PostgreSQL pool overflow.
        busy_timeout_ms: How long a SQLite writer waits for the write lock.
        timeout: How long one PostgreSQL call may take in all, retries included
            (``None``: unbounded, for migrations). (A SQLite call is bounded by
            ``busy_timeout_ms``: its thread cannot be stopped, so it is never abandoned
            while it may still commit.)
        foreign_keys: Enforce SQLite's foreign keys; migrations turn them off
            (:func:`~.migrate.tooling_database`).
    """

    def __init__(
        self,
        url: str | URL,
        *,
        pool_size: int = 5,
        max_overflow: int = 10,
        busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS,
        timeout: float | None = DEFAULT_TIMEOUT,
        foreign_keys: bool = True,
    ) -> None:
        parsed = normalize_url(url)
        self._async: AsyncEngine | None = None
        self._sync: Engine | None = None
        self._threads: Workers | None = None
        self._idle: list[tuple[Connection, Pool]] = []
        """SQLite: connections between units, each with its pool, the one used last on
        top (see :meth:`_once`)."""
        self._idle_lock = threading.Lock()
        if parsed.get_backend_name() == "sqlite":
            self._sync = _sqlite_engine(parsed, pool_size, busy_timeout_ms, foreign_keys)
            workers = 1 if isinstance(self._sync.pool, StaticPool) else pool_size
            self._threads = Workers(workers, "coach-db")
            self.sync_engine = self._sync
        else:
            self._async = create_engine(
                parsed, pool_size=pool_size, max_overflow=max_overflow, timeout=timeout
            )
            self.sync_engine = self._async.sync_engine
        self.timeout = timeout
        self.url = parsed
        self.dialect = self.sync_engine.dialect.name
        """The dialect's name: ``sqlite`` or ``postgresql``."""

    async def run(
        self,
        op: Callable[[Connection], T],
        *,
        write: bool,
        what: str,
        attempts: int = DEFAULT_ATTEMPTS,
    ) -> T:
        """Run ``op`` on one connection in one transaction, committing when it returns.

        ``write`` takes the write lock up front (SQLite: ``BEGIN IMMEDIATE``). Transient
        failures (SQLite lock timeouts, PostgreSQL serialization failures and deadlocks,
        connections lost before the commit) are retried up to ``attempts`` times with a
        short jittered backoff. :class:`~coach.errors.CoachError` raised by ``op`` rolls
        back and propagates unchanged.

        Raises:
            InvalidWrite: The driver refused a value (bad content); nothing is written.
            StorageError: The database failed for good, or (PostgreSQL) did not answer
                within ``timeout``; the driver error is the cause, and ``transient``
                says whether the failure may pass by itself.
        """
        if self._async is None or self.timeout is None:
            return await self._run(op, write=write, what=what, attempts=attempts)
        try:
            async with asyncio.timeout(self.timeout):
                return await self._run(op, write=write, what=what, attempts=attempts)
        except TimeoutError as stalled:
            wrapped = StorageError(f"{what} failed: no answer within {self.timeout:g} s")
            wrapped.transient = True
            raise wrapped from stalled

    async def _run(
        self, op: Callable[[Connection], T], *, write: bool, what: str, attempts: int
    ) -> T:
        for attempt in range(1, attempts + 1):
            committing = False
            try:
                return await self._once(op, write)
            except CoachError:
                raise
            except _CommitFailed as failed:
                committing, exc = True, failed.error
            except (UnicodeError, ValueError, TypeError) as refused:
                # Bad content (a lone surrogate, a NUL byte, a value the driver cannot
                # bind): retrying cannot help, and the message may quote it.
                raise InvalidWrite(
                    f"{what}: the driver refused a value ({type(refused).__name__})"
                ) from refused
            except (SQLAlchemyError, OSError, TimeoutError) as failure:
                exc = failure
            if attempt < attempts and is_transient(exc, committing=committing):
                delay = 0.05 * 2 ** (attempt - 1) * (1 + random.random())
                # DEBUG: the caller reports the outage once (the recorder, a tool's words).
                log.debug(
                    "transient database error, retrying",
                    extra={"attempt": attempt, "operation": what, "error": type(exc).__name__},
                )
                await asyncio.sleep(delay)
                continue
            wrapped = StorageError(f"{what} failed: {describe(exc)}")
            wrapped.transient = is_transient(exc)
            raise wrapped from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(self, op: Callable[[Connection], T], write: bool) -> T:
        if self._sync is not None:
            if self._threads is None:
                raise StorageError("the database is closed")
            sync = self._sync
            begin = "BEGIN IMMEDIATE" if write else "BEGIN"
            caller = _Caller()

            def unit() -> T:
                # A connection stays open between units: checking one out of the pool and
                # in again costs more than a turn's statements (~40 µs of SQLAlchemy's
                # pool, events and reset against ~20 for the transaction). A unit that
                # fails gives its connection back to the pool instead, as before.
                conn, pool = self._take(sync)
                try:
                    result = _transact(conn, op, caller, begin)
                except BaseException as exc:
                    lost = isinstance(exc, DBAPIError | _CommitFailed)
                    if lost and is_resource_error(getattr(exc, "error", exc)):
                        conn.invalidate()  # the next unit opens a fresh connection
                    conn.close()
                    raise
                with self._idle_lock:
                    if self._threads is not None:
                        self._idle.append((conn, pool))
                        return result
                conn.close()  # the database was closed meanwhile
                return result

            try:
                return await self._threads.run(unit)
            except asyncio.CancelledError:
                # The caller gave up (a shutdown's deadline). The thread cannot be stopped
                # — waiting for a lock, it may go on for the busy timeout —, but it must
                # not commit later what the caller reports as not saved: it rolls back.
                caller.gone = True
                raise
        assert self._async is not None
        async with self._async.connect() as conn:
            return await conn.run_sync(_transact, op)

    async def dispose(self) -> None:
        """Close every connection (and the SQLite worker threads); idempotent."""
        if self._async is not None:
            await self._async.dispose()
        if self._sync is not None and self._threads is not None:
            with self._idle_lock:
                threads, self._threads = self._threads, None
                idle, self._idle = self._idle, []
            await threads.run(lambda: self._close(idle))
            threads.shutdown(wait=False)

    def _take(self, sync: Engine) -> tuple[Connection, Pool]:
        """A connection for a SQLite unit, and the pool it is of: the one kept last, or a
        new one. One of a pool replaced since (a lost connection disposes the engine's)
        is closed instead.

        Raises:
            StorageError: The database was closed (a unit queued before it ran after).
        """
        with self._idle_lock:
            if self._threads is None:
                raise StorageError("the database is closed")
            kept = self._idle.pop() if self._idle else None
        if kept is not None:
            if kept[1] is sync.pool:
                return kept
            kept[0].invalidate()  # closed now: the pool it would go back to is gone
        pool = sync.pool
        return sync.connect(), pool

    def _close(self, idle: list[tuple[Connection, Pool]]) -> None:
        """Close the connections kept between units, then the pool's."""
        for conn, _ in idle:
            conn.close()
        assert self._sync is not None
        self._sync.dispose()


def _sqlite_engine(url: URL, pool_size: int, busy_timeout_ms: int, foreign_keys: bool) -> Engine:
    url = url.set(drivername="sqlite+pysqlite")
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False}}
    if is_memory(url):
        # One connection for the database's life: ``sqlite://`` would be a new empty
        # database per connection, and a named one is kept while it is open.
        kwargs["poolclass"] = StaticPool
    else:
        require_directory(url)
        # Units keep up to ``pool_size`` connections (one a thread) between them; the
        # overflow serves anyone else on the engine (tooling, tests) without a wait.
        kwargs.update(pool_size=pool_size, max_overflow=pool_size)
    engine = _create_sync_engine(url, **kwargs)
    _configure_sqlite(engine, busy_timeout_ms, foreign_keys=foreign_keys)
    return engine
