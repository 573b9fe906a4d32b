"""The bench's raw writers store coach's own rows: coach reads them back as its own.

``bench.recorder_cpu`` and section 5 of ``bench.core`` compare the recorder with raw
``sqlite3``/``asyncpg`` writing "the same rows, the same batching"; this holds them to
it, with no timing: what a raw writer stored, coach's repository reads back as the
conversation and as memory steps whose signatures verify — including a step whose
message fell into the previous batch (its text then stays in the step, as coach does).
The floor (coach's ``Recorder`` over a raw writer, :class:`RawStore`) stores them too,
and so does the floor through SQLAlchemy (raw's statements in SQLAlchemy's connection
and transaction, :class:`RawOverSQLAlchemy`), and section 5's writer by hand (the rows
made by ``bench.handwritten``, written through SQLAlchemy with no recorder), and so do
``bench.recorder_cpu``'s rows by hand in SQLAlchemy on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import threading

import pytest
from bench.pgload import _by_hand
from bench.rawrows import (
    RawAsyncpg,
    RawOverSQLAlchemy,
    RawSQLite,
    RawSQLiteOverSQLAlchemy,
    RawStore,
    raw_batches,
)
from bench.recorder_cpu import write_by_hand
from livekit.agents import llm
from sqlalchemy import event
from sqlalchemy.engine import make_url

from coach.conversation.recorder import Recorder
from coach.persistence import Repository
from coach.persistence.codec import StepCodec
from coach.persistence.crypto import Sealer
from coach.store import AddMessage, AppendSteps
from tests.support import MEMORY_SECRET


def _ops(sessions: list[str], turns: int) -> list[object]:
    ops: list[object] = []
    for t in range(turns):
        for sid in sessions:
            user, reply = f"question {t} of {sid[:4]}", f"answer {t} of {sid[:4]}"
            ops += [
                AddMessage(sid, "user", user),
                AddMessage(sid, "assistant", reply),
                AppendSteps(
                    sid,
                    2 * t,
                    (
                        llm.ChatMessage(role="user", content=[user]),
                        llm.ChatMessage(role="assistant", content=[reply]),
                    ),
                ),
            ]
    return ops


async def _two_sessions(repo: Repository) -> tuple[list[str], Sealer]:
    """Two new sessions of one person, and that person's sealer."""
    user = await repo.get_or_create_user("raw")
    sessions = [(await repo.create_session(user.id, "c")).id for _ in range(2)]
    sealer = await repo.vault.sealer(user.id)
    assert sealer is not None
    return sessions, sealer


async def _check(repo: Repository, sessions: list[str], turns: int) -> None:
    for sid in sessions:
        said = [(m.role, m.content) for m in await repo.get_session_conversation(sid)]
        steps = await repo.load_agent_state(sid)
        assert [(s.role, s.content[0]) for s in steps] == said  # type: ignore[attr-defined]
        assert len(said) == 2 * turns


async def test_raw_sqlite_rows_read_back_as_coach_s(sqlite_url: str, open_repo: object) -> None:
    repo: Repository = await open_repo(sqlite_url)  # type: ignore[operator]
    sessions, sealer = await _two_sessions(repo)
    batches = raw_batches(_ops(sessions, 3), StepCodec(MEMORY_SECRET), batch=4, sealer=sealer)
    assert any(link is None for b in batches for link in b.links)  # a turn split in two
    raw = RawSQLite(make_url(sqlite_url).database)  # type: ignore[arg-type]
    await raw.open()
    try:
        for rows in batches:
            await raw.write(rows)
    finally:
        await raw.aclose()
    await _check(repo, sessions, 3)


@pytest.mark.postgres
async def test_raw_asyncpg_rows_read_back_as_coach_s(postgres_url: str, open_repo: object) -> None:
    repo: Repository = await open_repo(postgres_url)  # type: ignore[operator]
    sessions, sealer = await _two_sessions(repo)
    raw = RawAsyncpg(make_url(postgres_url).set(drivername="postgresql").render_as_string(False))
    await raw.open()
    try:
        for rows in raw_batches(_ops(sessions, 3), StepCodec(MEMORY_SECRET), 4, sealer):
            await raw.write(rows)
    finally:
        await raw.aclose()
    await _check(repo, sessions, 3)


async def _floor(raw: RawSQLite | RawAsyncpg | RawOverSQLAlchemy, repo: Repository) -> None:
    """Four turns of two sessions through a recorder over ``raw`` (its batches of four
    ops cut turns in two), read back by coach."""
    sessions, sealer = await _two_sessions(repo)
    ops = _ops(sessions, 4)
    store = RawStore(raw, StepCodec(MEMORY_SECRET), sealer)
    recorder = Recorder(store, max_batch=4)  # type: ignore[arg-type]
    await raw.open()
    try:
        recorder.start()
        for op in ops:
            recorder.submit(op)  # type: ignore[arg-type]
        await recorder.flush()
        stats = recorder.stats()
        await recorder.aclose()
    finally:
        await raw.aclose()
    assert (stats.written, stats.errors, stats.batches) == (len(ops), 0, len(ops) // 4)
    await _check(repo, sessions, 4)


async def test_the_floor_s_rows_read_back_as_coach_s(sqlite_url: str, open_repo: object) -> None:
    repo: Repository = await open_repo(sqlite_url)  # type: ignore[operator]
    await _floor(RawSQLite(make_url(sqlite_url).database), repo)  # type: ignore[arg-type]


@pytest.mark.postgres
async def test_the_floor_s_rows_read_back_as_coach_s_on_postgres(
    postgres_url: str, open_repo: object
) -> None:
    repo: Repository = await open_repo(postgres_url)  # type: ignore[operator]
    dsn = make_url(postgres_url).set(drivername="postgresql").render_as_string(False)
    await _floor(RawAsyncpg(dsn), repo)


@pytest.mark.postgres
async def test_the_floor_through_sqlalchemy_s_rows_read_back_as_coach_s(
    postgres_url: str, open_repo: object
) -> None:
    repo: Repository = await open_repo(postgres_url)  # type: ignore[operator]
    await _floor(RawOverSQLAlchemy(postgres_url), repo)


@pytest.mark.postgres
async def test_the_writer_by_hand_through_sqlalchemy_s_rows_read_back_as_coach_s(
    postgres_url: str, open_repo: object
) -> None:
    repo: Repository = await open_repo(postgres_url)  # type: ignore[operator]
    sessions, sealer = await _two_sessions(repo)
    ops = _ops(sessions, 4)
    done = await _by_hand(
        postgres_url, ops, threading.Barrier(1), aead=sealer._aead, secret=MEMORY_SECRET, batch=4
    )
    assert done.batches == len(ops) // 4 - 1  # the first batch warms up, outside the timing
    await _check(repo, sessions, 4)


async def test_the_rows_by_hand_in_sqlalchemy_read_back_as_coach_s(
    database_url: str, open_repo: object
) -> None:
    """Four turns of two sessions, their rows made by hand in batches of four ops and
    written with raw's statements in SQLAlchemy (coach's own SQLite engine, or its
    asyncpg adapter), read back by coach."""
    repo: Repository = await open_repo(database_url)  # type: ignore[operator]
    writer: RawSQLiteOverSQLAlchemy | RawOverSQLAlchemy = (
        RawSQLiteOverSQLAlchemy(database_url)
        if repo.database.dialect == "sqlite"
        else RawOverSQLAlchemy(database_url)
    )
    sessions, sealer = await _two_sessions(repo)
    await writer.open()
    checkouts: list[object] = []
    if isinstance(writer, RawSQLiteOverSQLAlchemy):
        assert writer.database is not None
        event.listen(writer.database.sync_engine, "checkout", lambda *a: checkouts.append(a))
    try:
        await write_by_hand(
            writer, _ops(sessions, 4), aead=sealer._aead, secret=MEMORY_SECRET, batch=4
        )
    finally:
        await writer.aclose()
    await _check(repo, sessions, 4)
    # On SQLite the batches run on the connection kept since ``open``, as coach's units
    # keep theirs: the reference pays no pool checkout per batch that coach does not.
    assert checkouts == []
