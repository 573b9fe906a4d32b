"""Engine setup, transactions and retries — in one place.

* **SQLite** (``sqlite+aiosqlite``): WAL, ``busy_timeout`` and ``foreign_keys=ON`` on
  every connection. The driver's own transaction handling is switched off so that we
  emit ``BEGIN`` ourselves: read transactions use a plain (deferred) ``BEGIN``, write
  transactions ``BEGIN IMMEDIATE``, so two writers queue on the busy timeout instead of
  failing with a lock-upgrade deadlock. SQLite is for one worker; fleets use PostgreSQL.
* **PostgreSQL** (``postgresql+asyncpg``): a pool of ``pool_size`` + ``max_overflow``
  connections with ``pool_pre_ping``; writers lock the rows that order them
  (``SELECT ... FOR NO KEY UPDATE``) inside the transaction.
* :func:`run_transaction` runs one unit of work on one connection in one transaction
  (SQLAlchemy Core: no ORM session, no identity map), retries transient failures a
  bounded number of times and wraps every driver error in
  :class:`~coach.errors.StorageError`, saying whether it may pass by itself.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.ext.asyncio import create_async_engine as _create_async_engine

from ..errors import CoachError, InvalidWrite, StorageError

__all__ = [
    "DEFAULT_ATTEMPTS",
    "create_engine",
    "is_transient",
    "normalize_url",
    "run_transaction",
    "write_engine",
]

log = logging.getLogger("coach.persistence")

T = TypeVar("T")

DEFAULT_ATTEMPTS: Final = 4
SQLITE_BUSY_TIMEOUT_MS: Final = 15_000
_WRITE_OPTION: Final = "coach_write"
_TRANSIENT_SQLSTATES: Final = frozenset(
    {"40001", "40P01", "55P03", "57P01", "08000", "08003", "08006"}
)
_LOCKED_MESSAGES: Final = ("database is locked", "database is busy", "database table is locked")


def normalize_url(url: str | URL) -> URL:
    """Return ``url`` with its async driver: ``sqlite`` -> aiosqlite, ``postgresql`` -> asyncpg."""
    parsed = make_url(url)
    if parsed.drivername in ("sqlite", "sqlite+pysqlite"):
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    elif parsed.drivername in ("postgresql", "postgres", "postgresql+psycopg2"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    return parsed


def create_engine(
    url: str | URL,
    *,
    pool_size: int = 5,
    max_overflow: int = 10,
    busy_timeout_ms: int = SQLITE_BUSY_TIMEOUT_MS,
    echo: bool = False,
) -> AsyncEngine:
    """Create the async engine for ``url`` with coach's settings.

    Args:
        url: A SQLAlchemy URL; ``sqlite://`` and ``postgresql://`` get their async driver.
        pool_size: PostgreSQL pool size (``COACH_DB_POOL_SIZE``).
        max_overflow: PostgreSQL pool overflow (``COACH_DB_MAX_OVERFLOW``).
        busy_timeout_ms: How long a SQLite writer waits for the write lock.
        echo: Log every statement (debugging).

    Returns:
        The engine; dispose of it with ``await engine.dispose()``.
    """
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = _create_async_engine(parsed, echo=echo)
        _configure_sqlite(engine, busy_timeout_ms)
        return engine
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "postgresql":
        kwargs["connect_args"] = {"server_settings": {"application_name": "coach"}, "timeout": 10}
    return _create_async_engine(
        parsed,
        echo=echo,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_pre_ping=True,
        pool_recycle=1800,
        **kwargs,
    )


def _configure_sqlite(engine: AsyncEngine, busy_timeout_ms: int) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # We emit BEGIN ourselves (see _on_begin); the driver must not.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(_WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def write_engine(engine: AsyncEngine) -> AsyncEngine:
    """Return a view of ``engine`` whose transactions take the write lock up front.

    On SQLite that is ``BEGIN IMMEDIATE``; elsewhere it changes nothing.
    """
    return engine.execution_options(**{_WRITE_OPTION: True})


def _sqlstate(exc: BaseException) -> str | None:
    orig = getattr(exc, "orig", None)
    for obj in (orig, getattr(orig, "__cause__", None), exc):
        code = getattr(obj, "sqlstate", None) or getattr(obj, "pgcode", None)
        if isinstance(code, str):
            return code
    return None


def is_transient(exc: BaseException, *, committing: bool = False) -> bool:
    """Return True when retrying the whole transaction may succeed.

    A lost connection during ``COMMIT`` is *not* transient: the commit may have landed,
    and retrying would write twice.
    """
    if isinstance(exc, DBAPIError):
        text = str(exc.orig).lower() if exc.orig is not None else str(exc).lower()
        if any(message in text for message in _LOCKED_MESSAGES):
            return True
        state = _sqlstate(exc)
        if state in ("40001", "40P01"):
            return True  # serialization failure / deadlock: rolled back, safe to rerun
        if committing:
            return False
        return exc.connection_invalidated or state in _TRANSIENT_SQLSTATES
    if isinstance(exc, (OSError, TimeoutError)):
        return not committing
    return False


async def run_transaction(
    engine: AsyncEngine,
    op: Callable[[AsyncConnection], Awaitable[T]],
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    what: str = "database operation",
) -> T:
    """Run ``op`` on one connection in one transaction, committing when it returns.

    Pass :func:`write_engine` of the engine for a write (it takes the lock up front).

    Transient failures (SQLite lock timeouts, PostgreSQL serialization failures and
    deadlocks, connections lost before the commit) are retried up to ``attempts``
    times with a short jittered backoff. :class:`~coach.errors.CoachError` raised by
    ``op`` rolls back and propagates unchanged.

    Raises:
        StorageError: When the database fails for good; the driver error is the cause and
            ``transient`` says whether the failure may pass by itself (an outage) or not.
    """
    for attempt in range(1, attempts + 1):
        committing = False
        try:
            async with engine.begin() as conn:
                result = await op(conn)
                committing = True
            return result
        except CoachError:
            raise
        except (UnicodeError, ValueError, TypeError) as exc:
            # Bad content (a lone surrogate, a NUL byte, a value the driver cannot bind):
            # retrying cannot help, and the message may quote it, so name only the type.
            raise InvalidWrite(
                f"{what}: the driver refused a value ({type(exc).__name__})"
            ) from exc
        except (SQLAlchemyError, OSError, TimeoutError) as exc:
            if attempt < attempts and is_transient(exc, committing=committing):
                delay = 0.05 * 2 ** (attempt - 1) * (1 + random.random())
                log.warning(
                    "transient database error, retrying",
                    extra={"attempt": attempt, "operation": what, "error": type(exc).__name__},
                )
                await asyncio.sleep(delay)
                continue
            error = StorageError(f"{what} failed: {_describe(exc)}")
            error.transient = is_transient(exc)
            raise error from exc
    raise AssertionError("unreachable")  # pragma: no cover


def _describe(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    return f"{type(orig or exc).__name__}: {orig or exc}".splitlines()[0][:300]
