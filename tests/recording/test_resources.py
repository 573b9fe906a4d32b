"""The machine fails, not the data: a full disk, a read-only file (SQLite).

Such failures pass once space or write access is back, so the recorder retries them
with back-off like an outage: it neither drops the writes nor fences the session (which
would tell the user another device changed it), and once the fault is gone everything
is written exactly once. A connection opened while the file was read-only is replaced,
not reused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from livekit.agents import llm
from sqlalchemy import event

from coach.errors import StorageError
from coach.persistence import Repository, open_repository
from coach.recording import Recorder
from coach.store import AddMessage, AppendSteps, WriteOp
from tests.conftest import MEMORY_SECRET

BIG = "x" * 10_000  # larger than a page: every message needs new pages of the file


class ObservedStore:
    """Forwards to a repository; ``failed`` is set once a batch fails."""

    def __init__(self, store: Repository) -> None:
        self._store = store
        self.failed = asyncio.Event()
        self.errors: list[StorageError] = []

    async def write_batch(self, ops: Sequence[WriteOp]) -> None:
        try:
            await self._store.write_batch(ops)
        except StorageError as exc:
            self.errors.append(exc)
            self.failed.set()
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def new_session(url: str) -> str:
    async with await open_repository(url, secret=MEMORY_SECRET) as repo:
        user = await repo.get_or_create_user("ada")
        session = await repo.create_session(user.id, "Onboarding for a budgeting app.")
        return session.id


def ops(session_id: str) -> list[WriteOp]:
    step = llm.ChatMessage(role="user", content=["They quit at bank linking"])
    return [
        *(AddMessage(session_id, "user", f"{i} {BIG}") for i in range(3)),
        AppendSteps(session_id, 0, (step,)),  # a numbered write: refusing it would fence
    ]


async def assert_written_once(url: str, session_id: str) -> None:
    async with await open_repository(url, secret=MEMORY_SECRET) as repo:
        conversation = await repo.get_session_conversation(session_id)
        assert [m.content.split()[0] for m in conversation] == ["0", "1", "2"]
        assert await repo.agent_step_count(session_id) == 1


async def test_a_full_disk_is_retried_and_everything_lands_once_space_is_back(
    sqlite_url: str,
) -> None:
    session_id = await new_session(sqlite_url)
    repo = await open_repository(sqlite_url, secret=MEMORY_SECRET)
    full = True

    @event.listens_for(repo.sync_engine, "checkout")
    def _cap(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        # The file may not grow while "the disk is full".
        (pages,) = dbapi_connection.execute("PRAGMA page_count").fetchone()
        limit = pages if full else 1_073_741_823
        dbapi_connection.execute(f"PRAGMA max_page_count = {limit}")

    store = ObservedStore(repo)
    recorder = Recorder(store, retry_initial=0.01, retry_max=0.05)
    recorder.start()
    try:
        for op in ops(session_id):
            recorder.submit(op)
        await asyncio.wait_for(store.failed.wait(), 10)
        assert "database or disk is full" in str(store.errors[0])
        assert store.errors[0].transient
        assert not recorder.is_fenced(session_id) and recorder.stats().dropped == 0

        full = False  # space is back
        await asyncio.wait_for(recorder.flush(), 10)
        assert not recorder.is_fenced(session_id) and recorder.stats().dropped == 0
    finally:
        losses = await recorder.aclose()
        await repo.aclose()
    assert losses.count == 0
    await assert_written_once(sqlite_url, session_id)


async def test_a_read_only_file_is_retried_on_fresh_connections_once_writable(
    sqlite_url: str,
) -> None:
    session_id = await new_session(sqlite_url)
    repo = await open_repository(sqlite_url, secret=MEMORY_SECRET)
    read_only = True

    @event.listens_for(repo.sync_engine, "connect")
    def _open(dbapi_connection: Any, _record: Any) -> None:
        # Opened while the file is read-only: the connection stays so (like a real one).
        if read_only:
            dbapi_connection.execute("PRAGMA query_only = ON")

    store = ObservedStore(repo)
    recorder = Recorder(store, retry_initial=0.01, retry_max=0.05)
    recorder.start()
    try:
        for op in ops(session_id):
            recorder.submit(op)
        await asyncio.wait_for(store.failed.wait(), 10)
        assert "readonly database" in str(store.errors[0]) and store.errors[0].transient
        assert not recorder.is_fenced(session_id)

        read_only = False  # writable again: only new connections can tell
        await asyncio.wait_for(recorder.flush(), 10)
        assert not recorder.is_fenced(session_id) and recorder.stats().dropped == 0
    finally:
        losses = await recorder.aclose()
        await repo.aclose()
    assert losses.count == 0
    await assert_written_once(sqlite_url, session_id)
