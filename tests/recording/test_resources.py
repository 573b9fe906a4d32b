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

import pytest
from livekit.agents import llm
from sqlalchemy import event

from coach.conversation.recorder import Recorder
from coach.errors import StorageError
from coach.persistence import Repository, open_repository
from coach.store import AddMessage, AppendSteps, WriteOp
from tests.support import MEMORY_SECRET, keys_of

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
    async with await open_repository(url, **keys_of(url), secret=MEMORY_SECRET) as repo:
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
    async with await open_repository(url, **keys_of(url), secret=MEMORY_SECRET) as repo:
        conversation = await repo.get_session_conversation(session_id)
        assert [m.content.split()[0] for m in conversation] == ["0", "1", "2"]
        assert await repo.agent_step_count(session_id) == 1


class DiskFull:
    """The file may not grow (SQLite's page limit, set on every checkout) while on."""

    event = "checkout"
    message = "database or disk is full"

    def __init__(self) -> None:
        self.on = True

    def __call__(self, dbapi_connection: Any, *_: Any) -> None:
        (pages,) = dbapi_connection.execute("PRAGMA page_count").fetchone()
        limit = pages if self.on else 1_073_741_823
        dbapi_connection.execute(f"PRAGMA max_page_count = {limit}")


class ReadOnlyFile:
    """A connection opened while on stays read-only, as one opened on a read-only file
    does after the file is writable again: only new connections can tell."""

    event = "connect"
    message = "readonly database"

    def __init__(self) -> None:
        self.on = True

    def __call__(self, dbapi_connection: Any, *_: Any) -> None:
        if self.on:
            dbapi_connection.execute("PRAGMA query_only = ON")


@pytest.mark.parametrize("fault", [DiskFull, ReadOnlyFile], ids=["disk full", "read-only file"])
async def test_a_machine_fault_is_retried_and_everything_lands_once_it_passes(
    sqlite_url: str, fault: type[DiskFull | ReadOnlyFile]
) -> None:
    session_id = await new_session(sqlite_url)
    repo = await open_repository(sqlite_url, **keys_of(sqlite_url), secret=MEMORY_SECRET)
    machine = fault()
    event.listen(repo.database.sync_engine, machine.event, machine)
    store = ObservedStore(repo)
    recorder = Recorder(store, retry_initial=0.01, retry_max=0.05)
    recorder.start()
    try:
        for op in ops(session_id):
            recorder.submit(op)
        await asyncio.wait_for(store.failed.wait(), 10)
        assert machine.message in str(store.errors[0]) and store.errors[0].transient
        assert not recorder.is_fenced(session_id) and recorder.stats().dropped == 0

        machine.on = False  # space or write access is back
        await asyncio.wait_for(recorder.flush(), 10)
        assert not recorder.is_fenced(session_id) and recorder.stats().dropped == 0
    finally:
        losses = await recorder.aclose()
        await repo.aclose()
    assert losses.count == 0
    await assert_written_once(sqlite_url, session_id)
