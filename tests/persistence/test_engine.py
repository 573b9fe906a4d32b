"""Engine behaviour: write locks, bounded retries and wrapped driver errors."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sqlalchemy import bindparam, create_engine, event, select, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.types import TypeDecorator

from coach.errors import ConfigError, StorageError
from coach.persistence import Repository, open_repository
from coach.persistence.conversation import conversation_select
from coach.persistence.driver import DriverQuery, _binds, insert_messages, insert_steps
from coach.persistence.engine import Database, driver_sql, is_transient
from coach.persistence.schema import AGENT_STEPS, CONVERSATIONS, SESSIONS, HexId, UTCDateTime
from coach.persistence.sessions import session_select
from coach.state import DeltaSpec
from coach.store import AddMessage, SavePhaseOutput
from tests.recording.tcp_proxy import TcpProxy
from tests.support import keys_of


def _locked() -> OperationalError:
    return OperationalError("INSERT ...", {}, sqlite3.OperationalError("database is locked"))


async def test_writes_lock_what_orders_them(repo: Repository) -> None:
    user = await repo.get_or_create_user("locker")
    sid = (await repo.create_session(user.id)).id
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(str(args[2]).upper())

    event.listen(repo.database.sync_engine, "before_cursor_execute", record)
    try:
        await repo.update_data(
            sid, {}, DeltaSpec(trigger="system", source="system", delta_type="add", path="data")
        )
        await repo.get_state(sid)
    finally:
        event.remove(repo.database.sync_engine, "before_cursor_execute", record)
    if repo.database.dialect == "sqlite":
        assert seen.count("BEGIN IMMEDIATE") == 1  # the write
        assert seen.count("BEGIN") == 1  # the read stays deferred
    else:
        # The state row orders writers: the write moves its step with an UPDATE, which
        # holds the row lock until COMMIT.
        assert any(s.startswith("UPDATE SESSION_STATE SET STEP=") for s in seen)


async def test_driver_statements_fail_and_show_as_sqlalchemy_statements_do(
    repo: Repository,
) -> None:
    # The hot statements skip SQLAlchemy's execution machinery, not what it gives: a
    # driver error is SQLAlchemy's (a broken key is an IntegrityError, so a write names
    # its unknown session), the unit rolls back, and listeners see the statements.
    user = await repo.get_or_create_user("driver")
    sid = (await repo.create_session(user.id)).id
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(str(args[2]))

    row = {"session_id": "0" * 32, "seq": 0, "codec": "c", "version": 1,
           "signature": b"s", "payload": b"p", "message_id": None}  # fmt: skip

    def orphan_step(conn: Connection) -> None:
        driver_sql(conn, "UPDATE sessions SET memory_steps = 7")
        insert_steps(conn, [row])

    event.listen(repo.database.sync_engine, "before_cursor_execute", record)
    try:
        with pytest.raises(StorageError) as caught:
            await repo.database.run(orphan_step, write=True, what="orphan step")
    finally:
        event.remove(repo.database.sync_engine, "before_cursor_execute", record)
    assert isinstance(caught.value.__cause__, IntegrityError)
    assert not caught.value.transient
    assert [s.split()[0] for s in seen if "BEGIN" not in s] == ["UPDATE", "INSERT"]
    assert (await repo.get_session(sid)) is not None
    assert await repo.database.run(
        lambda conn: driver_sql(conn, "SELECT memory_steps FROM sessions")[1],
        write=False, what="read",
    ) == [(0,)]  # fmt: skip


async def test_a_typed_driver_query_reads_the_rows_a_core_statement_reads(
    repo: Repository,
) -> None:
    # Ids, aware times, booleans, a correlated count over a fixed IN list (expanded
    # once, at compilation), a NULL: each column through its type, as Core gives it.
    user = await repo.get_or_create_user("typed")
    sid = (await repo.create_session(user.id, "lockers")).id
    await repo.write_batch(
        [
            AddMessage(sid, "user", "hello"),
            AddMessage(sid, "assistant", "cut off", interrupted=True),
            SavePhaseOutput(sid, "challenge", "Challenge", "completed", None, "in", "out"),
        ]
    )
    sessions = session_select(repo.phase_ids).where(SESSIONS.c.id == bindparam("b_id"))
    read: dict[str, tuple[list[Any], list[Any]]] = {}
    for name, statement, params in (
        ("session", sessions, {"b_id": sid}),
        ("messages", conversation_select(sid), {}),
    ):

        def both(conn: Connection, statement: Any = statement, params: Any = params) -> Any:
            return conn.execute(statement, params).all(), DriverQuery(statement, typed=True).rows(
                conn, params
            )

        core, driver = read[name] = await repo.database.run(both, write=False, what="read")
        assert [row._asdict() for row in driver] == [row._asdict() for row in core]
    (session,), _ = read["session"]
    assert (session.id, session.completed) == (sid, 1)
    _, (said, cut) = read["messages"]
    assert (said.interrupted, cut.interrupted) == (False, True)
    assert said.created_at.tzinfo is not None and said.created_at < cut.created_at


def test_a_driver_query_refuses_a_parameter_it_would_render_into_its_sql() -> None:
    # A literal parameter is rendered into the SQL once, not bound per run.
    steps = SESSIONS.c.memory_steps == bindparam("b_steps", literal_execute=True)
    query = DriverQuery(select(SESSIONS.c.id).where(steps))
    with create_engine("sqlite://").connect() as conn:
        with pytest.raises(ValueError, match=r"cannot take literal parameters: \['b_steps'\]"):
            query.rows(conn, {"b_steps": 1})


def test_transient_errors() -> None:
    assert is_transient(_locked())
    assert is_transient(_locked(), committing=True)  # nothing was committed
    assert is_transient(ConnectionRefusedError())
    assert not is_transient(ConnectionResetError(), committing=True)  # the commit may have landed
    assert not is_transient(ValueError())


async def test_transient_failures_are_retried(sqlite_url: str) -> None:
    database = Database(sqlite_url)
    calls = 0

    def op(conn: Connection) -> int:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise _locked()
        return int(conn.execute(text("SELECT 7")).scalar_one())

    try:
        assert await database.run(op, write=True, what="test") == 7
        assert calls == 3
        calls = -10
        with pytest.raises(StorageError, match="database is locked") as caught:
            await database.run(op, write=True, what="test", attempts=2)
        assert isinstance(caught.value.__cause__, OperationalError)
        assert caught.value.transient  # a locked database passes by itself
        assert calls == -8
    finally:
        await database.dispose()


async def test_sqlite_units_keep_their_connection_and_a_failed_unit_gives_it_back(
    sqlite_url: str,
) -> None:
    # Checking a connection out of the pool and in again cost more than a turn's
    # statements: units in a row keep theirs. A unit that fails rolls back and gives it
    # back to the pool; one of a pool replaced since (a lost connection disposes the
    # engine's) is closed, not used; closing the database closes what units kept.
    database = Database(sqlite_url)
    checkouts: list[Any] = []
    event.listen(database.sync_engine, "checkout", lambda dbapi, *_: checkouts.append(dbapi))

    def read(conn: Connection) -> int:
        return int(conn.execute(text("SELECT 7")).scalar_one())

    def fail(conn: Connection) -> None:
        conn.execute(text("CREATE TABLE IF NOT EXISTS probe (n INTEGER)"))
        conn.execute(text("INSERT INTO probe VALUES (1)"))
        raise ConfigError("the unit's own error")

    try:
        for _ in range(50):
            assert await database.run(read, write=True, what="read") == 7
        assert len(checkouts) == 1
        with pytest.raises(ConfigError):
            await database.run(fail, write=True, what="fail")
        assert await database.run(read, write=False, what="read") == 7
        assert len(checkouts) == 2  # the failed unit's went back; the next took one again
        probe = "SELECT count(*) FROM sqlite_master WHERE name = 'probe'"
        assert (
            await database.run(lambda c: c.execute(text(probe)).scalar(), write=False, what="r")
            == 0
        )
        database.sync_engine.dispose()  # as a lost connection does
        assert await database.run(read, write=False, what="read") == 7
        assert len(checkouts) == 3
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            checkouts[1].execute("SELECT 1")
    finally:
        await database.dispose()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        checkouts[-1].execute("SELECT 1")
    with pytest.raises(StorageError, match="the database is closed"):
        await database.run(read, write=False, what="read")


async def test_closing_the_database_refuses_a_unit_still_waiting_for_its_thread(
    sqlite_url: str,
) -> None:
    # Closing takes the kept connections under the lock a unit takes its own with: the
    # unit running when it closes commits and closes its connection; the unit queued
    # behind it is refused whole, never run on a connection being closed; and no
    # connection is left open.
    database = Database(sqlite_url, pool_size=1)
    opened: list[Any] = []
    event.listen(database.sync_engine, "connect", lambda dbapi, *_: opened.append(dbapi))
    await database.run(
        lambda c: c.execute(text("CREATE TABLE t (n INTEGER)")), write=True, what="t"
    )
    started, release = threading.Event(), threading.Event()

    def first(conn: Connection) -> int:
        conn.execute(text("INSERT INTO t VALUES (1)"))
        started.set()
        release.wait(30)  # a hang guard only: the test releases it
        return 1

    def second(conn: Connection) -> int:
        conn.execute(text("INSERT INTO t VALUES (2)"))
        return 2

    workers = database._threads
    assert workers is not None
    running = asyncio.ensure_future(database.run(first, write=True, what="first"))
    assert await asyncio.to_thread(started.wait, 30)
    # Both start in order at the next turn of the loop: the unit is queued behind the
    # busy thread, then the close marks the database closed and queues its own work.
    queued = asyncio.ensure_future(database.run(second, write=True, what="second"))
    closing = asyncio.ensure_future(database.dispose())
    await asyncio.sleep(0)
    assert len(workers._shared.waiting) == 2
    release.set()

    assert await running == 1
    with pytest.raises(StorageError, match="the database is closed"):
        await queued
    await closing
    for dbapi in opened:
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            dbapi.execute("SELECT 1")
    reader = Database(sqlite_url)
    try:
        rows = await reader.run(
            lambda c: c.execute(text("SELECT n FROM t")).all(), write=False, what="r"
        )
    finally:
        await reader.dispose()
    assert [n for (n,) in rows] == [1]


async def test_unreachable_database_is_a_storage_error(memory_secret: bytes) -> None:
    url = "postgresql+asyncpg://postgres@127.0.0.1:1/none"
    repo = await open_repository(url, **keys_of(url), secret=memory_secret)
    try:
        with pytest.raises(StorageError) as caught:
            await repo.get_session("any")
        assert caught.value.__cause__ is not None
    finally:
        await repo.aclose()


@pytest.mark.postgres
async def test_a_stalled_postgresql_fails_a_call_in_bounded_time(
    postgres_url: str, memory_secret: bytes
) -> None:
    # The server (behind a relay) stops answering without resetting anything: every call
    # gives up within the timeout as a transient StorageError, and works once it answers.
    target = make_url(postgres_url)
    proxy = TcpProxy(target.host or "127.0.0.1", target.port or 5432)
    await proxy.start()
    url = target.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
    repo = await open_repository(url, **keys_of(url), secret=memory_secret, call_timeout=0.5)
    try:
        assert await repo.find_user("ada") is None
        proxy.stall()
        with pytest.raises(StorageError, match=r"no answer within 0.5 s") as caught:
            await asyncio.wait_for(repo.find_user("ada"), 30)  # 30: the test's own bound
        assert caught.value.transient
        proxy.resume()
        await repo.get_or_create_user("ada")
        assert await repo.find_user("ada") is not None
    finally:
        proxy.resume()
        await asyncio.wait_for(repo.aclose(), 30)
        await proxy.aclose()


async def test_a_str_secret_is_refused_where_it_is_passed(sqlite_url: str) -> None:
    with pytest.raises(ConfigError, match="secret must be bytes"):
        await open_repository(sqlite_url, **keys_of(sqlite_url), secret="not-bytes")  # type: ignore[arg-type]


async def _terminate_coach_connections(url: str) -> int:
    """Close, on the server, every connection of coach's pool to ``url``'s database."""
    target = make_url(url)
    admin = await asyncpg.connect(target.set(drivername="postgresql").render_as_string(False))
    try:
        return len(
            await admin.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = 'coach'"
            )
        )
    finally:
        await admin.close()


@pytest.mark.postgres
async def test_connections_the_server_closed_are_replaced_by_the_next_call(
    postgres_url: str, memory_secret: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    # No pre-ping: a pooled connection's death shows at its first statement — a Core
    # statement for a read, one on the driver's cursor for a turn's write — and the call
    # is retried once on a new connection (the others, as old, are not tried one by one):
    # it succeeds, and writes once.
    repo = await open_repository(
        postgres_url, **keys_of(postgres_url), secret=memory_secret, pool_size=3, max_overflow=0
    )

    async def kill_the_pool() -> None:
        await asyncio.gather(*(repo.get_session(sid) for _ in range(3)))  # three pooled
        assert await _terminate_coach_connections(postgres_url) >= 2

    try:
        user = await repo.get_or_create_user("ada")
        sid = (await repo.create_session(user.id)).id
        with caplog.at_level(logging.DEBUG, logger="coach.persistence"):
            await kill_the_pool()
            assert (await repo.get_session(sid)) is not None  # a read
            await kill_the_pool()
            await repo.write_batch([AddMessage(sid, "user", "still here?")])  # a write
        retried = [getattr(r, "operation", None) for r in caplog.records if "retrying" in r.msg]
        assert retried == ["get_session", "write_batch"]  # each once
        conversation = await repo.get_session_conversation(sid)
        assert [m.content for m in conversation] == ["still here?"]
    finally:
        await repo.aclose()


async def test_a_sqlite_unit_its_caller_gave_up_on_never_commits_later(sqlite_url: str) -> None:
    """The thread cannot be stopped, so an abandoned unit runs on; it must roll back, or
    a write reported as not saved (a shutdown's deadline) would land afterwards."""
    database = Database(sqlite_url, pool_size=1)  # one thread: units run in order
    started, proceed = threading.Event(), threading.Event()

    def op(conn: Connection) -> None:
        conn.execute(text("CREATE TABLE IF NOT EXISTS probe (n INTEGER)"))
        conn.execute(text("INSERT INTO probe VALUES (1)"))
        started.set()
        proceed.wait(30)  # hang guard only

    try:
        call = asyncio.create_task(database.run(op, write=True, what="probe"))
        assert await asyncio.to_thread(started.wait, 30)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        proceed.set()
        count = await database.run(
            lambda conn: conn.execute(
                text("SELECT count(*) FROM sqlite_master WHERE name = 'probe'")
            ).scalar(),
            write=False,
            what="read",
        )  # runs after the abandoned unit, on the same one thread
        assert count == 0  # rolled back: not even its table
    finally:
        proceed.set()
        await database.dispose()


async def test_a_message_insert_fails_and_shows_as_sqlalchemy_statements_do(
    repo: Repository,
) -> None:
    # SQLite inserts a turn's few messages one statement each, PostgreSQL in one: either
    # way the listeners see them, a broken key is SQLAlchemy's IntegrityError, and the
    # unit's earlier rows roll back with it.
    user = await repo.get_or_create_user("orphan")
    sid = (await repo.create_session(user.id)).id
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(str(args[2]).split()[0])

    at = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        {
            "session_id": session,
            "phase_id": None,
            "role": "user",
            "content": b"\x01",
            "interrupted": False,
            "created_at": at + timedelta(microseconds=n),
        }  # fmt: skip
        for n, session in enumerate((sid, "0" * 32))
    ]
    event.listen(repo.database.sync_engine, "before_cursor_execute", record)
    try:
        with pytest.raises(StorageError) as caught:
            await repo.database.run(
                lambda conn: insert_messages(conn, rows), write=True, what="orphan message"
            )
    finally:
        event.remove(repo.database.sync_engine, "before_cursor_execute", record)
    assert isinstance(caught.value.__cause__, IntegrityError)
    sqlite = repo.database.dialect == "sqlite"
    assert [s for s in seen if s != "BEGIN"] == (["INSERT", "INSERT"] if sqlite else ["INSERT"])
    assert await repo.get_session_conversation(sid) == []


def test_listeners_added_at_any_time_see_the_driver_statements() -> None:
    """``driver_sql`` looks for listeners only once one was added (SQLAlchemy's flag):
    one added to a connection later, or to the engine while a connection is open."""
    engine = create_engine("sqlite://")
    seen: list[str] = []

    def record(*args: Any) -> None:
        seen.append(str(args[2]))

    with engine.connect() as conn:
        driver_sql(conn, "SELECT 1")  # nobody listens yet
        event.listen(conn, "before_cursor_execute", record)
        driver_sql(conn, "SELECT 2")
        with engine.connect() as other:
            driver_sql(other, "SELECT 3")  # another connection: not this listener's
            event.listen(engine, "after_cursor_execute", record)
            driver_sql(other, "SELECT 4")
    assert seen == ["SELECT 2", "SELECT 4"]


_SQLITE = create_engine("sqlite://").dialect


@given(
    st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.timezones()
    )
)
@example(datetime(2026, 3, 1, 2, 3, 4, tzinfo=UTC))  # no microseconds: still six digits
@example(datetime(5, 1, 2, 3, 4, 5, 6, tzinfo=UTC))  # a year of one digit: four
@settings(deadline=None)
def test_a_time_is_stored_on_sqlite_as_sqlalchemy_stores_it(at: datetime) -> None:
    """The time's bind is coach's own on SQLite: the text must be what SQLAlchemy's own
    processing of the type makes (its ``process_bind_param``, then ``DATETIME``'s), or a
    query comparing times would miss rows that a Core statement wrote."""
    kind = UTCDateTime().dialect_impl(_SQLITE)
    assert isinstance(kind, UTCDateTime)
    ours = kind.bind_processor(_SQLITE)
    theirs: Any = TypeDecorator.bind_processor(kind, _SQLITE)
    assert ours is not None and theirs is not None
    assert ours(at) == theirs(at)


def test_a_naive_time_is_refused_on_every_dialect() -> None:
    for dialect in (_SQLITE, create_engine("postgresql+asyncpg://x@localhost/x").dialect):
        bind = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
        assert bind is not None
        with pytest.raises(ValueError, match="naive datetimes are not stored"):
            bind(datetime(2026, 1, 1))
        assert bind(None) is None


_POSTGRES = create_engine("postgresql+asyncpg://x@localhost/x").dialect


@given(
    st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.timezones()
    ),
    st.one_of(st.none(), st.text(max_size=40), st.uuids().map(lambda u: u.hex)),
)
@settings(deadline=None)
def test_ids_and_times_are_bound_as_sqlalchemy_binds_them(at: datetime, ident: str | None) -> None:
    """Where coach binds an id or a time with its own function (skipping the type
    decorator's wrapper), the value must be the one SQLAlchemy's own processing makes:
    an id as itself or the nil id, a time in UTC, on every dialect coach runs on."""
    for dialect in (_SQLITE, _POSTGRES):
        for kind, value in ((HexId(), ident), (UTCDateTime(), at)):
            impl = kind.dialect_impl(dialect)
            assert isinstance(impl, TypeDecorator)
            ours = impl.bind_processor(dialect)
            theirs: Any = TypeDecorator.bind_processor(impl, dialect)
            assert ours is not None and theirs is not None
            assert ours(value) == theirs(value)


def test_a_binary_column_is_bound_bare_only_where_sqlalchemy_binds_bytes_as_they_are() -> None:
    """Coach binds its binary columns (every value bytes it made) with no processor on
    asyncpg and SQLite. On asyncpg SQLAlchemy's own processor gives the bytes back as
    they are; on SQLite it wraps them in a ``memoryview`` that the driver stores as the
    same ``BLOB``. Both must hold for the skipped processor to change nothing."""
    blob = b"\x00sealed\xff"
    for table, column in ((CONVERSATIONS, "content"), (AGENT_STEPS, "payload")):
        for dialect in (_SQLITE, _POSTGRES):
            assert _binds(dialect, table, (column,)) == (None,)
        theirs = table.c[column].type.dialect_impl(_POSTGRES).bind_processor(_POSTGRES)
        assert theirs is not None and theirs(blob) is blob
        wrapped = table.c[column].type.dialect_impl(_SQLITE).bind_processor(_SQLITE)
        assert wrapped is not None and bytes(wrapped(blob)) == blob
