"""Raw writers of coach's own rows: the floor the recorder is compared with.

A stream of coach write ops (``AddMessage`` and ``AppendSteps``, as the recorder queues
them) is cut into batches of ``batch`` ops — the recorder's ``max_batch``, which is what
it commits under sustained load — and each batch becomes the rows coach's
``write_batch`` stores for it: the sessions' claims of their memory positions, the
conversation rows, the memory-step rows (signed, the text of a step left out when its
message is in the same batch, as coach does), the texts and payloads sealed with a
person's key as coach seals them (same cipher, same size). Everything is encoded, signed
and sealed **before** the timer: what :class:`RawSQLite` and :class:`RawAsyncpg` time is the
database work a hand-written writer cannot avoid — one transaction per batch, through
stdlib ``sqlite3`` in one worker thread (one hand-off per batch) or ``asyncpg`` on the
event loop.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import asyncpg
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from coach.persistence.codec import StepCodec
from coach.persistence.crypto import Sealer, new_data_key
from coach.persistence.engine import Database, create_engine, driver_sql
from coach.persistence.memory import encode_rows, message_text
from coach.persistence.threads import Workers
from coach.store import AddMessage, AppendSteps

__all__ = [
    "KeptConnection",
    "OneThread",
    "RawAsyncpg",
    "RawBatch",
    "RawOverSQLAlchemy",
    "RawSQLite",
    "RawStore",
    "pg_statements",
    "raw_batches",
]


@dataclass
class RawBatch:
    """The rows of one batch of ops, ready to write."""

    claims: list[tuple[str, int, int]] = field(default_factory=list)
    """(session, stored count before, count after), in session order."""
    messages: list[tuple[str, str, bytes]] = field(default_factory=list)
    """(session, role, sealed content)."""
    steps: list[tuple[str, int, str, int, bytes, bytes]] = field(default_factory=list)
    """(session, seq, codec, version, signature, payload)."""
    links: list[int | None] = field(default_factory=list)
    """Per step row: the index of its message in :attr:`messages`, or ``None``."""
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    """The messages' time (their seal binds it)."""


def sqlite_time(at: datetime) -> str:
    """An aware time as SQLite holds coach's times: UTC text, ``YYYY-MM-DD HH:MM:SS.ffffff``."""
    return at.astimezone(UTC).replace(tzinfo=None).isoformat(" ")


def raw_batches(
    ops: Sequence[object], codec: StepCodec, batch: int = 100, sealer: Sealer | None = None
) -> list[RawBatch]:
    """``ops`` cut into batches of ``batch`` and turned into coach's rows, sealed with
    ``sealer`` (the sessions' owner's, for rows coach reads back; default: a random key,
    the same work)."""
    out = []
    sealer = sealer or Sealer("raw", new_data_key())

    def sealed(table: str, column: str, row: tuple[object, ...], value: object) -> bytes:
        blob = sealer.seal(table, column, row, value)
        assert blob is not None
        return blob

    for first in range(0, len(ops), batch):
        rows = RawBatch()
        now = rows.now
        appends: dict[str, tuple[int, list[object]]] = {}
        waiting: dict[tuple[str, str, str], deque[int]] = {}
        for op in ops[first : first + batch]:
            if isinstance(op, AddMessage):
                waiting.setdefault((op.session_id, op.role, op.content), deque()).append(
                    len(rows.messages)
                )
                content = sealed(
                    "session_conversations", "content", (op.session_id, now, op.role), op.content
                )
                rows.messages.append((op.session_id, op.role, content))
            elif isinstance(op, AppendSteps):
                start, steps = appends.setdefault(op.session_id, (op.start, []))
                steps.extend(op.steps)
            else:
                raise TypeError(f"raw rows know messages and steps, not {type(op).__name__}")
        for sid in sorted(appends):
            start, steps = appends[sid]
            rows.claims.append((sid, start, start + len(steps)))
            shared: list[str | None] = []
            for step in steps:
                said = message_text(step)
                queue = waiting.get((sid, *said)) if said is not None else None
                link = queue.popleft() if queue else None
                rows.links.append(link)
                shared.append(said[1] if link is not None and said is not None else None)
            for row in encode_rows(codec, sid, start, steps, shared=shared):
                rows.steps.append(
                    (
                        sid,
                        row["seq"],
                        row["codec"],
                        row["version"],
                        row["signature"],
                        sealed("agent_steps", "payload", (sid, row["seq"]), row["payload"]),
                    )
                )
        out.append(rows)
    return out


_CLAIM = "UPDATE sessions SET memory_steps = {0} WHERE id = {1} AND memory_steps = {2}"
_MESSAGE = (
    "INSERT INTO session_conversations (session_id, phase_id, role, content, interrupted, "
    "created_at) VALUES ({0}, NULL, {1}, {2}, false, {3})"
)
_STEP = (
    "INSERT INTO agent_steps (session_id, seq, codec, version, signature, payload, message_id) "
    "VALUES ({0}, {1}, {2}, {3}, {4}, {5}, {6})"
)


def sqlite_statements(conn: sqlite3.Connection, rows: RawBatch) -> None:
    """Raw sqlite3's statements of a batch, in the caller's transaction: every claim,
    every message (its id kept for the steps that carry it), every step."""
    now = sqlite_time(rows.now)
    for sid, before, after in rows.claims:
        claimed = conn.execute(_CLAIM.format("?", "?", "?"), (after, sid, before))
        if claimed.rowcount != 1:
            raise RuntimeError(f"stale claim of {sid} at {before}")
    insert = _MESSAGE.format("?", "?", "?", "?")
    ids = [conn.execute(insert, (*m, now)).lastrowid for m in rows.messages]
    conn.executemany(
        _STEP.format(*"???????"),
        [
            (*step, None if link is None else ids[link])
            for step, link in zip(rows.steps, rows.links, strict=True)
        ],
    )


def sqlite_of(conn: Connection) -> sqlite3.Connection:
    """The sqlite3 connection under a SQLAlchemy one (raw's statements run on it)."""
    return cast(sqlite3.Connection, conn.connection.dbapi_connection)


def sqlite_connect(path: Path) -> sqlite3.Connection:
    """A raw ``sqlite3`` connection with coach's PRAGMAs (WAL, ``synchronous=NORMAL``,
    foreign keys, the busy timeout), in autocommit: the caller says ``BEGIN``."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for pragma in ("busy_timeout = 15000", "foreign_keys = ON", "synchronous = NORMAL"):
        conn.execute(f"PRAGMA {pragma}")
    conn.execute("PRAGMA journal_mode = WAL")
    return conn


class OneThread:
    """A reference's worker thread of its own: every database call is handed to it,
    one hand-off a call — coach's own (:class:`~coach.persistence.threads.Workers`, the
    result straight to the loop's future), so that no reference pays more for its
    hand-off than coach does."""

    def __init__(self, name: str) -> None:
        self.pool = Workers(1, name)

    async def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the worker thread."""
        return await self.pool.run(fn)

    def close(self) -> None:
        """End the worker thread (a unit still running finishes first)."""
        self.pool.shutdown()


class RawSQLite(OneThread):
    """stdlib ``sqlite3`` in one worker thread, with coach's PRAGMAs: one hand-off and
    one transaction per batch."""

    def __init__(self, path: Path) -> None:
        super().__init__("raw-sqlite")
        self.path = path
        self.conn: sqlite3.Connection | None = None

    async def open(self) -> None:
        """Connect in the worker thread (:func:`sqlite_connect`)."""
        self.conn = await self.call(lambda: sqlite_connect(self.path))

    async def write(self, rows: RawBatch) -> None:
        """The batch in one transaction."""

        def unit() -> None:
            conn = self.conn
            assert conn is not None
            conn.execute("BEGIN IMMEDIATE")
            try:
                sqlite_statements(conn, rows)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        await self.call(unit)

    async def aclose(self) -> None:
        """Close the connection and the thread."""
        if self.conn is not None:
            await self.call(self.conn.close)
            self.conn = None
        self.close()


PG_CLAIMS = (
    "UPDATE sessions SET memory_steps = c.after FROM unnest($1::uuid[], $2::int[], $3::int[]) "
    "AS c(id, before, after) WHERE sessions.id = c.id AND sessions.memory_steps = c.before"
)
PG_MESSAGES = (
    "INSERT INTO session_conversations (session_id, phase_id, role, content, interrupted, "
    "created_at) SELECT s, NULL, r, c, false, $4 "
    "FROM unnest($1::uuid[], $2::varchar[], $3::bytea[]) AS t(s, r, c) RETURNING id"
)
PG_STEPS = (
    "INSERT INTO agent_steps (session_id, seq, codec, version, signature, payload, "
    "message_id) SELECT * FROM unnest($1::uuid[], $2::int[], $3::varchar[], $4::int[], "
    "$5::bytea[], $6::bytea[], $7::bigint[])"
)
"""Raw asyncpg's statements of a batch: every claim, every message (their ids returned,
in order), every step, one statement each (:func:`claim_args`, :func:`message_args`,
:func:`step_args` give their arguments)."""


def claim_args(rows: RawBatch) -> tuple[list[Any], ...]:
    """:data:`PG_CLAIMS`'s arguments: the sessions, their counts before and after."""
    sids, befores, afters = zip(*rows.claims, strict=True)
    return [uuid.UUID(sid) for sid in sids], list(befores), list(afters)


def check_claims(rows: RawBatch, updated: int) -> None:
    """Raise when :data:`PG_CLAIMS` did not update every session (``updated`` rows)."""
    if updated != len(rows.claims):
        raise RuntimeError(f"stale claims: {updated} of {len(rows.claims)} updated")


def message_args(rows: RawBatch) -> tuple[object, ...]:
    """:data:`PG_MESSAGES`'s arguments: sessions, roles, sealed contents, the time."""
    return (
        [uuid.UUID(m[0]) for m in rows.messages],
        [m[1] for m in rows.messages],
        [m[2] for m in rows.messages],
        rows.now,
    )


def step_args(rows: RawBatch, ids: Sequence[int]) -> tuple[list[Any], ...]:
    """:data:`PG_STEPS`'s arguments, by column; ``ids``: the messages' ids, in order."""
    columns = list(zip(*rows.steps, strict=True))
    links = [None if link is None else ids[link] for link in rows.links]
    return [uuid.UUID(s) for s in columns[0]], *(list(c) for c in columns[1:]), links


def pg_statements(rows: RawBatch) -> Callable[[Connection], None]:
    """Raw asyncpg's statements of ``rows``, on a SQLAlchemy connection's driver cursor
    (``driver_sql``): the same SQL and arguments, through SQLAlchemy's asyncpg adapter."""

    def write(conn: Connection) -> None:
        if rows.claims:
            check_claims(rows, driver_sql(conn, PG_CLAIMS, claim_args(rows))[0])
        ids: list[int] = []
        if rows.messages:
            ids = [row[0] for row in driver_sql(conn, PG_MESSAGES, message_args(rows))[1]]
        if rows.steps:
            driver_sql(conn, PG_STEPS, step_args(rows, ids))

    return write


class RawAsyncpg:
    """One ``asyncpg`` connection on the event loop: per batch one transaction of one
    ``UPDATE`` of every session's claim, one multi-row ``INSERT ... RETURNING id`` of the
    messages, one of the steps."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn: asyncpg.Connection | None = None

    async def open(self) -> None:
        """Connect (``dsn`` is a plain ``postgresql://`` URL)."""
        self.conn = await asyncpg.connect(self.dsn)

    async def write(self, rows: RawBatch) -> None:
        """The batch in one transaction."""
        conn = self.conn
        assert conn is not None
        async with conn.transaction():
            if rows.claims:
                status = await conn.execute(PG_CLAIMS, *claim_args(rows))  # "UPDATE n"
                check_claims(rows, int(status.rsplit(" ", 1)[1]))
            ids: list[int] = []
            if rows.messages:
                ids = [r[0] for r in await conn.fetch(PG_MESSAGES, *message_args(rows))]
            if rows.steps:
                await conn.execute(PG_STEPS, *step_args(rows, ids))

    async def aclose(self) -> None:
        """Close the connection."""
        if self.conn is not None:
            await self.conn.close()
            self.conn = None


class RawOverSQLAlchemy:
    """Raw asyncpg's statements through SQLAlchemy: an engine made as coach makes its
    own (``create_engine``), one connection and transaction per batch, the statements on
    the driver's cursor (:func:`pg_statements`) — SQLAlchemy's share of a write, with
    nothing of coach's storage layer."""

    def __init__(self, url: str | URL) -> None:
        self.url = url
        self.engine: AsyncEngine | None = None

    async def open(self) -> None:
        """Make the engine (``url``: a ``postgresql+asyncpg://`` URL)."""
        self.engine = create_engine(self.url, pool_size=1, max_overflow=0, timeout=30)

    async def write(self, rows: RawBatch) -> None:
        """The batch in one transaction."""
        assert self.engine is not None
        write = pg_statements(rows)

        def transaction(conn: Connection) -> None:
            with conn.begin():
                write(conn)

        async with self.engine.connect() as conn:
            await conn.run_sync(transaction)

    async def aclose(self) -> None:
        """Close the engine's connections."""
        if self.engine is not None:
            await self.engine.dispose()
            self.engine = None


class KeptConnection:
    """One connection of a SQLite ``engine``, kept open from one transaction to the next
    as coach's SQLite units keep theirs (``Database._take``): a reference built on
    SQLAlchemy then pays its transaction, not a pool checkout and check-in per unit
    (~40 µs, more than a turn's statements) that coach no longer pays. For one thread."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._conn: Connection | None = None

    @contextmanager
    def transaction(self, begin: str) -> Iterator[Connection]:
        """A transaction on the kept connection (connected at the first), started with
        ``begin`` (``BEGIN IMMEDIATE`` to write, as coach's units)."""
        if self._conn is None:
            self._conn = self._engine.connect()
        with self._conn.begin():
            driver_sql(self._conn, begin)
            yield self._conn

    def close(self) -> None:
        """Give the connection back to the engine's pool (on the thread that used it)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class RawSQLiteOverSQLAlchemy(OneThread):
    """Raw sqlite3's statements through SQLAlchemy: coach's own SQLite engine (a
    :class:`~coach.persistence.engine.Database`'s), one transaction per batch
    (``begin()``, ``BEGIN IMMEDIATE``) on a connection kept between batches
    (:class:`KeptConnection`, as coach's units keep theirs) on a thread of its own, the
    statements (:func:`sqlite_statements`) on the sqlite3 connection under it —
    SQLAlchemy's share of a write on SQLite, with nothing of coach's storage layer."""

    def __init__(self, url: str | URL) -> None:
        super().__init__("raw-sqlalchemy")
        self.url = url
        self.database: Database | None = None
        self.kept: KeptConnection | None = None

    async def open(self) -> None:
        """Make the engine (``url``: a ``sqlite`` URL of a database coach migrated), and
        its connection and thread, as :class:`RawSQLite` makes its own: before any timing."""
        self.database = Database(self.url, pool_size=1)
        kept = self.kept = KeptConnection(self.database.sync_engine)

        def connect() -> None:
            with kept.transaction("BEGIN"):
                pass

        await self.call(connect)

    async def write(self, rows: RawBatch) -> None:
        """The batch in one transaction."""
        assert self.kept is not None
        kept = self.kept

        def unit() -> None:
            with kept.transaction("BEGIN IMMEDIATE") as conn:
                sqlite_statements(sqlite_of(conn), rows)

        await self.call(unit)

    async def aclose(self) -> None:
        """Close the connection, the engine and the thread."""
        if self.kept is not None:
            await self.call(self.kept.close)
            self.kept = None
        if self.database is not None:
            await self.database.dispose()
            self.database = None
        self.close()


class RawStore:
    """Raw's writer behind coach's ``Recorder``: each batch the recorder commits is
    turned into coach's rows (:func:`raw_batches`: grouped, encoded, signed, sealed, as
    ``write_batch`` does) and written by ``raw``. Nothing of coach's storage layer runs:
    what it costs is the floor under coach's recorder — its queue, the encoding and a
    hand-written writer's statements, which any recorder of coach's rows pays."""

    def __init__(
        self,
        raw: RawSQLite | RawAsyncpg | RawOverSQLAlchemy,
        codec: StepCodec,
        sealer: Sealer | None = None,
    ) -> None:
        self._raw = raw
        self._codec = codec
        self._sealer = sealer or Sealer("raw", new_data_key())
        """The sessions' owner's (for rows coach reads back); default: a random key."""

    async def write_batch(self, ops: Sequence[object]) -> None:
        """Encode ``ops`` as one batch and write it."""
        for rows in raw_batches(ops, self._codec, len(ops), self._sealer):
            await self._raw.write(rows)
