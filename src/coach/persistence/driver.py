"""The hottest statements — a turn's claim of memory positions, its messages and its
memory steps; every statement of a resume — as the driver's own SQL, on the driver's
cursor (:func:`~.engine.driver_sql`).

That keeps what matters of SQLAlchemy — the transaction, the translation of driver
errors, the detection of a dead connection — and skips what a statement costs it on
every execution (a Core statement's cache key and parameter processing, any statement's
execution context and result): on SQLite a one-row ``UPDATE`` takes 2.2 µs of CPU here,
against 4.2 through ``exec_driver_sql`` and 9 as a Core statement. Every value passes
through its column's own bind processor, so a row is stored exactly as a Core statement
stores it (ids as ``uuid`` on PostgreSQL, times as UTC text on SQLite); rows come back
as the driver gives them, a time read with :func:`utc`, or typed as a Core statement
gives them.
"""

from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from itertools import chain
from operator import itemgetter
from typing import Any, Final

from sqlalchemy import LargeBinary, Table
from sqlalchemy.engine import Connection, Dialect

from .engine import driver_rowids, driver_sql
from .schema import AGENT_STEPS, CONVERSATIONS, SESSIONS
from .sql import AnySelect

__all__ = ["DriverQuery", "claim_steps", "insert_messages", "insert_steps", "lock_sessions", "utc"]

_Bind = Callable[[Any], Any] | None

_MESSAGE_COLUMNS: Final = ("session_id", "phase_id", "role", "content", "interrupted", "created_at")
_STEP_COLUMNS: Final = (
    "session_id", "seq", "codec", "version", "signature", "payload", "message_id"
)  # fmt: skip
_ROWS_PER_INSERT: Final = 500
"""Rows per multi-row ``INSERT``: at most 3,500 parameters (a step's 7 columns), well
inside both drivers' limits."""
_Result = Callable[[Any], Any] | None
_Compiled = tuple[
    str, tuple[str, ...], tuple[_Bind, ...], dict[str, Any], tuple[_Result, ...] | None
]
"""A query's SQL, its parameters' names in order, their bind processors, their defaults
and, if typed, its columns' result processors."""
_processors: dict[tuple[str, str, str, tuple[str, ...]], tuple[_Bind, ...]] = {}
_Binder = Callable[[Mapping[str, Any]], list[Any]]
_binders: dict[tuple[str, str, str, tuple[str, ...]], _Binder] = {}


def _binds(dialect: Dialect, table: Table, columns: tuple[str, ...]) -> tuple[_Bind, ...]:
    """The bind processors of ``table``'s ``columns`` on ``dialect`` (made once).

    Binary columns take none on SQLite and asyncpg, and every binary value coach writes
    is bytes it made (sealed, signed, pickled): SQLite's driver stores ``bytes`` as the
    ``BLOB`` that SQLAlchemy's processor would wrap them in a ``memoryview`` for, and
    asyncpg's ``Binary``, which the processor calls, gives its value back as it is."""
    key = (dialect.name, dialect.driver, table.name, columns)
    found = _processors.get(key)
    if found is None:
        types = [table.c[name].type.dialect_impl(dialect) for name in columns]
        found = tuple(
            None
            if (dialect.name == "sqlite" or dialect.driver == "asyncpg")
            and isinstance(kind, LargeBinary)
            else kind.bind_processor(dialect)
            for kind in types
        )
        _processors[key] = found
    return found


def _bound(binds: tuple[_Bind, ...], values: Sequence[Any]) -> tuple[Any, ...]:
    return tuple([v if bind is None else bind(v) for bind, v in zip(binds, values, strict=True)])


def _binder(dialect: Dialect, table: Table, columns: tuple[str, ...]) -> _Binder:
    """A row's ``columns`` as the driver takes them, in order (:func:`_binds`), made
    once: only the columns with a processor are touched."""
    key = (dialect.name, dialect.driver, table.name, columns)
    found = _binders.get(key)
    if found is None:
        values = itemgetter(*columns)
        active = tuple((n, bind) for n, bind in enumerate(_binds(dialect, table, columns)) if bind)

        def found(row: Mapping[str, Any]) -> list[Any]:
            out = list(values(row))
            for n, bind in active:
                out[n] = bind(out[n])
            return out

        _binders[key] = found
    return found


@functools.lru_cache(maxsize=16)
def _marks(paramstyle: str, count: int) -> tuple[str, ...]:
    """``count`` parameter markers in the driver's style (``?`` or ``$1, $2, ...``)."""
    if paramstyle == "qmark":
        return ("?",) * count
    return tuple(f"${n}" for n in range(1, count + 1))


_LOCKED: Final = "SELECT 1 FROM sessions WHERE id = ANY({}::uuid[]) ORDER BY id FOR NO KEY UPDATE"
"""The rows of the sessions in an array parameter, locked in id order."""
_LOCK_SESSIONS: Final = _LOCKED.format("$1")
_SQLITE_CLAIM: Final = "UPDATE sessions SET memory_steps = ? WHERE id = ? AND memory_steps = ?"
_CLAIMS: Final = (
    "UPDATE sessions SET memory_steps = c.end_at "
    "FROM unnest($1::uuid[], $2::integer[], $3::integer[]) AS c(id, start_at, end_at) "
    "WHERE sessions.id = c.id AND sessions.memory_steps = c.start_at{} RETURNING sessions.id"
)
_LOCKED_CLAIMS: Final = _CLAIMS.format(
    # An uncorrelated condition: PostgreSQL checks it once (a "One-Time Filter"), before
    # the join below it reads a row, so its subquery locks the rows in id order before
    # the UPDATE takes any lock of its own — the lock of :func:`lock_sessions`, without
    # a round trip of its own.
    f" AND (SELECT count(*) FROM ({_LOCKED.format('$4')}) AS locked) >= 0"
)
_CLAIMS_ALONE: Final = _CLAIMS.format("")


def lock_sessions(conn: Connection, session_ids: Sequence[str]) -> None:
    """Lock the sessions' rows in id order until the transaction ends, as an ``UPDATE``
    of them would (``FOR NO KEY UPDATE``: a foreign key's check still passes): two
    writers of overlapping sessions then wait for each other instead of deadlocking.
    Nothing on SQLite, whose write lock is the whole database's (``BEGIN IMMEDIATE``)."""
    if conn.dialect.paramstyle == "qmark":
        return
    driver_sql(conn, _LOCK_SESSIONS, (_ids(conn.dialect, session_ids),))


def _ids(dialect: Dialect, session_ids: Sequence[str]) -> list[Any]:
    """Session ids as the driver takes them."""
    id_of = _binds(dialect, SESSIONS, ("id",))[0]
    return [sid if id_of is None else id_of(sid) for sid in session_ids]


def claim_steps(
    conn: Connection, claims: Sequence[tuple[str, int, int]], *, lock: Sequence[str] = ()
) -> list[str]:
    """Claim memory positions for several sessions at once: each ``(session id, start,
    end)`` sets that session's stored step count to ``end`` if it is ``start``. Returns
    the sessions whose claim did not hold (no such session, or another count), in the
    order given.

    On PostgreSQL one ``UPDATE`` over ``unnest`` of three arrays, the same SQL for any
    number of claims: a statement is a round trip there, and a recorder's batch across 33
    sessions spent most of its CPU on 33 of them. The order in which the database takes
    the rows' locks is its own: a caller that writes several sessions has them locked
    first, in id order, by the same statement (``lock``: every session the caller
    writes; as :func:`lock_sessions` would, without a round trip of its own — or by it,
    when there is no claim). On SQLite, in the process, one ``UPDATE`` per claim (its
    write lock is the whole database's).
    """
    binds = _binds(conn.dialect, SESSIONS, ("memory_steps", "id", "memory_steps"))
    if conn.dialect.paramstyle == "qmark":
        return [
            sid
            for sid, start, end in claims
            if not driver_sql(conn, _SQLITE_CLAIM, _bound(binds, (end, sid, start)))[0]
        ]
    if not claims:
        if lock:
            lock_sessions(conn, lock)
        return []
    bound = [_bound(binds, (end, sid, start)) for sid, start, end in claims]
    ends, ids, starts = (list(column) for column in zip(*bound, strict=True))
    if lock:
        found = driver_sql(conn, _LOCKED_CLAIMS, (ids, starts, ends, _ids(conn.dialect, lock)))
    else:
        found = driver_sql(conn, _CLAIMS_ALONE, (ids, starts, ends))
    held = {_hex(row[0]) for row in found[1]}
    return [sid for (sid, _, _), id_ in zip(claims, ids, strict=True) if _hex(id_) not in held]


def _hex(session_id: object) -> str:
    """An id as PostgreSQL's driver takes or returns it (a ``UUID`` or its text) as 32
    hex digits."""
    return str(session_id).replace("-", "")


def insert_steps(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert encoded (and sealed) memory-step rows in one call.

    On PostgreSQL one multi-row ``VALUES`` of up to 500 rows, as the messages: the server
    runs one statement, where a pipelined ``executemany`` runs one a row (about 12 µs of
    its CPU a row more, here). On SQLite one ``executemany`` in the process.
    """
    if not rows:
        return
    bind = _binder(conn.dialect, AGENT_STEPS, _STEP_COLUMNS)
    bound = [bind(row) for row in rows]
    if conn.dialect.paramstyle == "qmark":
        driver_sql(conn, _STEP_ROW, bound, many=True)
        return
    for chunk in range(0, len(bound), _ROWS_PER_INSERT):
        part = bound[chunk : chunk + _ROWS_PER_INSERT]
        params = tuple(chain.from_iterable(part))
        rows_sql = _rows_sql("agent_steps", _STEP_COLUMNS, conn.dialect.paramstyle, len(part))
        driver_sql(conn, rows_sql, params)


@functools.lru_cache(maxsize=256)
def _rows_sql(table: str, columns: tuple[str, ...], paramstyle: str, count: int) -> str:
    """The ``INSERT`` of ``count`` rows of ``columns`` in one multi-row ``VALUES``."""
    width = len(columns)
    marks = _marks(paramstyle, width * count)
    values = ", ".join(
        f"({', '.join(marks[width * index : width * (index + 1)])})" for index in range(count)
    )
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES {values}"


_STEP_ROW: Final = _rows_sql("agent_steps", _STEP_COLUMNS, "qmark", 1)
"""SQLite's insert of one step row (run for many)."""


def insert_messages(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """Insert (sealed) conversation rows; return their ids in order.

    500 to a statement: the database may return the new rows in any order, and each
    comes back with its time, which names it (a batch stamps its messages a microsecond
    apart). On SQLite a turn's few messages are one statement each instead, each id its
    cursor's ``lastrowid`` (:func:`~.engine.driver_rowids`, :data:`_FEW_ROWS`).
    """
    ids: list[int] = []
    for chunk in range(0, len(rows), _ROWS_PER_INSERT):
        ids += _insert_messages(conn, rows[chunk : chunk + _ROWS_PER_INSERT])
    return ids


_MESSAGE_ROW: Final = _rows_sql("session_conversations", _MESSAGE_COLUMNS, "qmark", 1)
"""SQLite's insert of one conversation row (its id is the cursor's ``lastrowid``)."""
_FEW_ROWS: Final = 4
"""Messages SQLite inserts one statement each: for a turn's few, its ``RETURNING`` costs
more than the statements it saves (2: 45 against 51 µs a message, in a transaction on
coach's connection); from about 8 on, one statement costs less (50: 12.4 against 14.8)."""


def _messages_sql(paramstyle: str, count: int) -> str:
    """The ``INSERT`` of ``count`` conversation rows, returning each one's id and time
    (its rows' part made once, by :func:`_rows_sql`)."""
    rows_sql = _rows_sql("session_conversations", _MESSAGE_COLUMNS, paramstyle, count)
    return f"{rows_sql} RETURNING id, created_at"


def _insert_messages(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> list[int]:
    bind = _binder(conn.dialect, CONVERSATIONS, _MESSAGE_COLUMNS)
    bound = [bind(row) for row in rows]
    at = {values[-1]: index for index, values in enumerate(bound)}  # its time names a row
    if len(at) != len(rows):
        raise ValueError("messages of one insert must have distinct times")
    if conn.dialect.paramstyle == "qmark" and len(rows) <= _FEW_ROWS:
        return driver_rowids(conn, _MESSAGE_ROW, bound)
    params = tuple(chain.from_iterable(bound))
    ids = [0] * len(rows)
    _, returned = driver_sql(conn, _messages_sql(conn.dialect.paramstyle, len(rows)), params)
    for message_id, created in returned:
        ids[at[created]] = int(message_id)
    return ids


def utc(value: datetime | str) -> datetime:
    """A time as the driver returns it — aware on PostgreSQL, UTC text on SQLite — as an
    aware UTC datetime."""
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


class DriverQuery:
    """A Core query compiled once per dialect and run as driver SQL with named
    parameters; its rows are named tuples of the driver's values (see :func:`utc`) or,
    ``typed``, of the values a Core statement returns (each through its column's result
    processor: ids as hex, times as aware datetimes, booleans). A fixed ``IN`` list is
    expanded once, at compilation."""

    __slots__ = ("_compiled", "_row", "_statement", "_typed")

    def __init__(self, statement: AnySelect, *, typed: bool = False) -> None:
        self._statement = statement
        self._typed = typed
        self._compiled: dict[tuple[str, str], _Compiled] = {}
        self._row: Any = namedtuple("_row", statement.selected_columns.keys())  # type: ignore[misc]

    def rows(self, conn: Connection, params: Mapping[str, Any]) -> list[Any]:
        """The query's rows for ``params`` (by bind name), by position or column name."""
        dialect = conn.dialect
        found = self._compiled.get((dialect.name, dialect.driver))
        if found is None:
            found = self._compile(dialect)
            self._compiled[(dialect.name, dialect.driver)] = found
        sql, order, processors, defaults, results = found
        values = {**defaults, **params}
        bound = _bound(processors, [values[name] for name in order])
        rows = driver_sql(conn, sql, bound)[1]
        if results is None:
            return [self._row._make(row) for row in rows]
        return [self._row._make(_bound(results, row)) for row in rows]

    def _compile(self, dialect: Dialect) -> _Compiled:
        compiled = self._statement.compile(dialect=dialect)
        if literal := sorted(bind.key for bind in compiled.literal_execute_params):
            # Rendered into the SQL once, here: a value given per run would be ignored.
            raise ValueError(f"a driver query cannot take literal parameters: {literal}")
        types = {name: bind.type for name, bind in compiled.binds.items()}
        expanded = compiled.construct_expanded_state(compiled.construct_params(_check=False))
        for name, names in expanded.parameter_expansion.items():
            types.update(dict.fromkeys(names, types[name]))
        order = tuple(expanded.positiontup or ())
        binds = tuple(types[name].dialect_impl(dialect).bind_processor(dialect) for name in order)
        results = None
        if self._typed:
            results = tuple(
                column.type.dialect_impl(dialect).result_processor(dialect, None)
                for column in self._statement.selected_columns
            )
        return expanded.statement, order, binds, dict(expanded.parameters), results
