"""The writer process: the recorder's store, run by a child process.

Against a real SQLite file and a real PostgreSQL database: what the child writes reads
back in the parent, errors come back as the same coach errors and change nothing, a
child that dies is replaced, and — with the recorder on top — a child killed in the
middle of a transaction costs a retry, not a write.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import types
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from livekit.agents import llm
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from coach.errors import InvalidRole, InvalidWrite, SessionNotFound, StaleWrite, StorageError
from coach.persistence import DEFAULT_PHASE_IDS, Repository
from coach.recording import AddMessage, AppendSteps, Recorder, UpdateSession, WriteZone
from coach.recording.writer import is_transient
from coach.recording.writer_process import WriterConfig, WriterProcess, main
from coach.runtime import Runtime
from coach.settings import Settings
from coach.state.zones import DeltaSpec
from tests.conftest import MEMORY_SECRET

from .processes import wait_until_dead


def config(url: str) -> WriterConfig:
    return WriterConfig(database_url=url, secret=MEMORY_SECRET, phase_ids=DEFAULT_PHASE_IDS)


@pytest.fixture
async def writer(database_url: str) -> AsyncIterator[WriterProcess]:
    process = WriterProcess(config(database_url))
    yield process
    await process.aclose()


async def new_session(repo: Repository) -> str:
    user = await repo.get_or_create_user("ada")
    return (await repo.create_session(user.id, "Redesign onboarding")).id


def message(role: str, text: str) -> llm.ChatMessage:
    return llm.ChatMessage(role=role, content=[text])  # type: ignore[arg-type]


async def test_what_the_child_writes_reads_back_in_the_parent(
    writer: WriterProcess, repo: Repository
) -> None:
    sid = await new_session(repo)
    steps = (message("user", "Hi, I'm Ada"), message("assistant", "Hi Ada!"))
    spec = DeltaSpec(trigger="user_query", source="llm", delta_type="add", path="data.ideas")
    await writer.write_batch(
        [
            AddMessage(sid, "user", "Hi, I'm Ada", "challenge"),
            AddMessage(sid, "assistant", "Hi Ada!", "challenge", interrupted=True),
            AppendSteps(sid, 0, steps),
            UpdateSession(sid, {"current_agent": "coach", "current_phase_id": "challenge"}),
            WriteZone(sid, "data", {"ideas": ["a shorter setup"]}, spec, expected_step=0),
        ]
    )
    assert writer.pid not in (None, os.getpid())

    stored = await repo.get_session_conversation(sid)
    assert [(m.role, m.content, m.phase_id, m.interrupted) for m in stored] == [
        ("user", "Hi, I'm Ada", "challenge", False),
        ("assistant", "Hi Ada!", "challenge", True),
    ]
    loaded = await repo.load_agent_state(sid)
    assert [(s.id, s.text_content) for s in loaded] == [(s.id, s.text_content) for s in steps]  # type: ignore[attr-defined]
    session = await repo.get_session(sid)
    assert session is not None
    assert (session.current_agent, session.current_phase_id) == ("coach", "challenge")
    # The two reads the recorder makes through the child agree with the parent's.
    assert await writer.agent_step_count(sid) == 2
    state = await writer.get_state(sid)
    assert state == await repo.get_state(sid)
    assert (state.step, state.data) == (1, {"ideas": ["a shorter setup"]})


async def test_errors_come_back_as_coach_errors_and_change_nothing(
    writer: WriterProcess, repo: Repository
) -> None:
    sid = await new_session(repo)
    await writer.write_batch([AppendSteps(sid, 0, (message("user", "first"),))])
    pid = writer.pid

    with pytest.raises(SessionNotFound, match="Session no-such-session not found") as missing:
        await writer.write_batch([AddMessage("no-such-session", "user", "hello")])
    assert missing.value.session_id == "no-such-session"
    with pytest.raises(StaleWrite) as stale:
        await writer.write_batch([AddMessage(sid, "user", "x"), AppendSteps(sid, 5, ())])
    assert not is_transient(stale.value)
    with pytest.raises(InvalidRole) as role:
        await writer.write_batch([AddMessage(sid, "robot", "beep")])
    assert role.value.role == "robot"
    with pytest.raises(InvalidWrite, match="could not be sent"):  # cannot be pickled
        await writer.write_batch([AddMessage(sid, "user", "x"), AppendSteps(sid, 1, (lambda: 0,))])

    assert await repo.get_session_conversation(sid) == []
    assert await repo.agent_step_count(sid) == 1
    await writer.write_batch([AddMessage(sid, "user", "still here")])
    assert [m.content for m in await repo.get_session_conversation(sid)] == ["still here"]
    assert writer.pid == pid  # one child served all of it


async def test_a_write_only_this_process_can_read_is_refused_and_the_child_goes_on(
    writer: WriterProcess, repo: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = await new_session(repo)
    await writer.write_batch([AddMessage(sid, "user", "one")])
    pid = writer.pid
    local = types.ModuleType("coach_parent_only")  # importable here, not in the child

    class Note:
        pass

    Note.__module__, Note.__qualname__ = local.__name__, "Note"
    local.Note = Note  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, local.__name__, local)

    with pytest.raises(InvalidWrite, match="cannot read a write"):
        await writer.write_batch([AppendSteps(sid, 0, (Note(),))])
    await writer.write_batch([AddMessage(sid, "user", "two")])
    assert writer.pid == pid
    assert [m.content for m in await repo.get_session_conversation(sid)] == ["one", "two"]
    assert await repo.agent_step_count(sid) == 0


async def test_a_dead_child_is_replaced_by_the_next_call(
    writer: WriterProcess, repo: Repository
) -> None:
    sid = await new_session(repo)
    await writer.write_batch([AddMessage(sid, "user", "one")])
    first = writer.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    await wait_until_dead(first)

    await writer.write_batch([AddMessage(sid, "user", "two")])
    assert writer.pid not in (None, first)
    assert [m.content for m in await repo.get_session_conversation(sid)] == ["one", "two"]


async def test_close_lets_the_child_exit(database_url: str, repo: Repository) -> None:
    sid = await new_session(repo)
    writer = WriterProcess(config(database_url))
    await writer.write_batch([AddMessage(sid, "user", "hi")])
    pid = writer.pid
    assert pid is not None
    await writer.aclose()
    await wait_until_dead(pid)
    assert writer.pid is None
    with pytest.raises(StorageError, match="closed"):
        await writer.write_batch([AddMessage(sid, "user", "too late")])
    assert [m.content for m in await repo.get_session_conversation(sid)] == ["hi"]


async def test_an_unreachable_database_is_a_transient_error() -> None:
    writer = WriterProcess(config("postgresql+asyncpg://coach@127.0.0.1:9/nowhere"))
    try:
        with pytest.raises(StorageError) as failed:
            await writer.write_batch([AddMessage("s1", "user", "hi")])
        assert is_transient(failed.value)
        assert failed.value.transient is True
    finally:
        await writer.aclose()


async def test_an_in_memory_database_is_written_in_process() -> None:
    settings = Settings(
        database_url="sqlite+aiosqlite:///:memory:",
        secret_key=MEMORY_SECRET.decode(),  # type: ignore[arg-type]
        llm_base_url="http://127.0.0.1:9/v1",
    )
    assert settings.recorder_process  # the default: a child process ...
    runtime = await Runtime.open(settings)
    try:
        assert runtime.writer is None  # ... which could not see this database
    finally:
        await runtime.aclose()


def test_the_child_refuses_to_run_without_its_socket(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage" in capsys.readouterr().err


@pytest.mark.postgres
async def test_a_child_killed_mid_transaction_costs_a_retry_not_a_write(
    postgres_url: str, open_repo: Callable[..., Awaitable[Repository]]
) -> None:
    repo = await open_repo(postgres_url)
    sid = await new_session(repo)
    writer = WriterProcess(config(postgres_url))
    recorder = Recorder(writer, commit_interval=0, retry_initial=0.01)
    recorder.start()
    admin = create_async_engine(postgres_url)
    try:
        recorder.message(sid, "user", "before")
        await asyncio.wait_for(recorder.flush(), 30)
        killed = writer.pid
        assert killed is not None

        async with admin.connect() as conn, conn.begin():
            # Hold the session row: the child's next transaction waits for it.
            await conn.execute(text("SELECT id FROM sessions WHERE id = :s FOR UPDATE"), {"s": sid})
            recorder.message(sid, "user", "during")
            recorder.steps(sid, 0, [message("user", "during")])
            async with asyncio.timeout(30):
                while not await waiting_on_a_lock(conn):  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            os.kill(killed, signal.SIGKILL)
            await wait_until_dead(killed)
        await asyncio.wait_for(recorder.flush(), 30)

        assert [m.content for m in await repo.get_session_conversation(sid)] == [
            "before",
            "during",
        ]
        assert await repo.agent_step_count(sid) == 1
        stats = recorder.stats()
        assert stats.errors >= 1 and stats.dropped == 0
        assert writer.pid not in (None, killed)
    finally:
        await recorder.aclose()
        await writer.aclose()
        await admin.dispose()


async def waiting_on_a_lock(conn: AsyncConnection) -> bool:
    """Whether another backend of this database is waiting for a lock (the child)."""
    result = await conn.execute(
        text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
    )
    return bool(result.scalar_one())
