"""The database goes away mid-conversation for a few seconds.

The conversation goes on (turns complete, replies arrive) while the recorder queues and
retries; once the database is back it holds every message, phase output and memory
step of the visit — in order, nothing lost, nothing written twice.

* SQLite: another connection holds the write lock (``BEGIN EXCLUSIVE``).
* PostgreSQL: the runtime reaches the server through a local TCP proxy that is cut right
  after the server executed a ``COMMIT`` whose acknowledgement the client never gets
  (the worst moment: the batch landed, the writer cannot know), then refuses every
  connection until it is restored.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import pytest
from livekit.agents import llm
from sqlalchemy.engine import make_url

from coach.conversation.losses import RecorderStats
from coach.conversation.recorder import Recorder
from coach.conversation.runtime import Runtime
from coach.persistence import Database, Repository, open_repository
from coach.persistence.keystore import Vault
from coach.prompts import load_prompts
from coach.settings import Settings
from tests.support import MEMORY_SECRET, keys_of, keys_url

from .tcp_proxy import TcpProxy
from .visit import STRATEGIST_FROM, TURNS, Watcher, reply_of, run_turn, start_visit

OUTAGE_TURNS = range(STRATEGIST_FROM, STRATEGIST_FROM + 4)
"""Empathize and define, each discussed and completed, while the database is down."""
MIN_FAILED_WRITES = 2
"""The outage lasts until the recorder has failed this many times (after the turns) ..."""
MIN_OUTAGE = 3.0
"""... and at least this many seconds."""


class Outage(Protocol):
    url: str
    """What the runtime connects to."""
    direct_url: str
    """The database itself, for reading it back."""

    async def begin(self) -> None: ...
    async def wait_down(self) -> None: ...
    async def restore(self) -> None: ...


class SqliteWriteLock:
    """Another connection takes SQLite's write lock and keeps it."""

    def __init__(self, url: str) -> None:
        self.url = self.direct_url = url
        self._path = make_url(url).database
        self._conn: sqlite3.Connection | None = None

    def _lock(self) -> sqlite3.Connection:
        assert self._path
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        conn.execute("BEGIN EXCLUSIVE")
        return conn

    async def begin(self) -> None:
        # In a thread: waiting for the lock must not stall the loop the writer runs on.
        self._conn = await asyncio.wait_for(asyncio.to_thread(self._lock), 10)

    async def wait_down(self) -> None:
        assert self._conn is not None

    async def restore(self) -> None:
        conn, self._conn = self._conn, None
        assert conn is not None
        conn.execute("ROLLBACK")
        conn.close()


class PostgresCut:
    """The server behind a proxy that is cut right after the next COMMIT executed."""

    def __init__(self, url: str, proxy: TcpProxy) -> None:
        self.direct_url = url
        self.url = make_url(url).set(host="127.0.0.1", port=proxy.port).render_as_string(False)
        self.proxy = proxy

    async def begin(self) -> None:
        self.proxy.cut_after_next_commit()

    async def wait_down(self) -> None:
        await asyncio.wait_for(self.proxy.cut_done.wait(), 10)
        assert not self.proxy.up

    async def restore(self) -> None:
        await self.proxy.restore()


@pytest.fixture
async def outage(database_url: str) -> AsyncIterator[Outage]:
    if make_url(database_url).get_backend_name() == "sqlite":
        yield SqliteWriteLock(database_url)
        return
    target = make_url(database_url)
    proxy = TcpProxy(target.host or "127.0.0.1", target.port or 5432)
    await proxy.start()
    yield PostgresCut(database_url, proxy)
    await proxy.aclose()


async def open_runtime(url: str) -> Runtime:
    """``Runtime.open``, except that a SQLite writer waits 0.25 s (not 15 s) for the lock.

    With the production busy timeout a locked file shows as a stalled writer for a
    minute before the first error; the short one makes the outage visible in seconds.
    """
    settings = Settings(
        database_url=url,
        keys_url=keys_url(url),
        secret_key=MEMORY_SECRET.decode(),
        llm_base_url="http://127.0.0.1:9/v1",
        recorder_shutdown_timeout=10,
    )
    prompts = load_prompts(settings.prompts_dir)
    store = Repository(
        Database(url, busy_timeout_ms=250),
        secret=settings.memory_secret,
        vault=Vault.open(url, **keys_of(url)),
        phase_ids=prompts.manifest.ids,
    )
    recorder = Recorder(store, shutdown_timeout=settings.recorder_shutdown_timeout)
    recorder.start()
    return Runtime(settings, prompts, store, recorder)


async def until(condition: Callable[[], bool]) -> None:
    """Wait until ``condition()`` holds; callers bound it with ``asyncio.timeout``."""
    # The recorder publishes its error count through stats() only: poll it.
    while not condition():  # noqa: ASYNC110
        await asyncio.sleep(0.02)


async def assert_visit_stored(store: Repository, runtime: Runtime, watcher: Watcher) -> None:
    session_id = watcher.userdata.session_id
    assert session_id is not None
    session = await store.get_session(session_id)
    assert session is not None
    assert (session.status, session.current_agent, session.current_phase_id) == (
        "completed",
        "evaluator",
        "evaluation",
    )

    # Every user and assistant message, in order, with its phase — once.
    conversation = await store.get_session_conversation(session_id)
    assert [(m.role, m.content, m.phase_id) for m in conversation] == watcher.messages
    assert [text for role, text, _ in watcher.messages if role == "user"] == [t for t, _ in TURNS]

    # Memory steps: one per item the session emitted, same items, same order.
    steps = await store.load_agent_state(session_id)
    assert await store.agent_step_count(session_id) == len(watcher.items)
    assert [(type(s), getattr(s, "id", None)) for s in steps] == [
        (type(i), i.id) for i in watcher.items
    ]
    restored = llm.ChatContext(steps)  # type: ignore[arg-type]
    assert [(m.role, m.text_content) for m in restored.messages()] == [
        (m.role, m.text_content) for m in watcher.items if isinstance(m, llm.ChatMessage)
    ]

    # Every phase output completed, prompts kept through the completing update.
    outputs = await store.get_phase_outputs(session_id)
    assert [o.phase_id for o in outputs] == list(runtime.prompts.manifest.ids)
    for o in outputs:
        assert (o.status, o.error) == ("completed", None), o
        assert o.output and o.system_prompt and o.user_input, o
    by_phase = {o.phase_id: o for o in outputs}
    assert by_phase["define"].output == "define decided"
    assert "Current phase: Define" in (by_phase["define"].system_prompt or "")


@pytest.mark.slow
async def test_conversation_goes_on_while_the_database_is_down_and_nothing_is_lost(
    outage: Outage,
) -> None:
    runtime = await open_runtime(outage.url)
    reader = await open_repository(
        outage.direct_url, **keys_of(outage.direct_url), secret=MEMORY_SECRET
    )
    try:
        recorder = runtime.recorder
        session, model, watcher = await start_visit(runtime)
        for turn in range(STRATEGIST_FROM):
            await run_turn(session, model, turn)
        await asyncio.wait_for(recorder.flush(), 10)
        session_id = session.userdata.session_id
        assert session_id is not None
        healthy = recorder.stats()
        assert healthy.errors == 0 and healthy.queue_depth == 0

        # --- the database goes away; the conversation does not wait for it -----------
        await outage.begin()
        went_down = time.monotonic()
        for turn in OUTAGE_TURNS:
            await asyncio.wait_for(run_turn(session, model, turn), 10)
            assert watcher.last_reply == reply_of(turn)  # the reply arrived
            if turn == OUTAGE_TURNS.start:
                await outage.wait_down()
        assert session.userdata.completed_phases == ["challenge", "empathize", "define"]
        assert session.userdata.current_phase_id == "ideate"

        async with asyncio.timeout(30):
            await until(lambda: recorder.stats().errors >= MIN_FAILED_WRITES)
        # The outage's length (what is asserted does not depend on it).
        await asyncio.sleep(max(0.0, MIN_OUTAGE - (time.monotonic() - went_down)))
        during: RecorderStats = recorder.stats()
        assert during.queue_depth > 0 and during.write_lag > 0
        assert during.written == healthy.written  # nothing acknowledged while down
        # Really not written yet: the last outage turn is nowhere in the database.
        stored = [m.content for m in await reader.get_session_conversation(session_id)]
        last_text = TURNS[OUTAGE_TURNS[-1]][0]
        assert last_text not in stored and reply_of(OUTAGE_TURNS[-1]) not in stored
        outputs = {o.phase_id: o.status for o in await reader.get_phase_outputs(session_id)}
        assert outputs.get("define") != "completed"

        # --- the database is back: everything queued is written -------------------------
        await outage.restore()
        came_back = time.monotonic()
        await asyncio.wait_for(recorder.flush(), 30)
        drained = time.monotonic()
        assert recorder.stats().queue_depth == 0

        for turn in range(OUTAGE_TURNS.stop, len(TURNS)):
            await asyncio.wait_for(run_turn(session, model, turn), 10)
            assert watcher.last_reply == reply_of(turn)
        assert session.userdata.status == "completed"
        await session.aclose()
        await asyncio.wait_for(recorder.flush(), 10)

        await assert_visit_stored(reader, runtime, watcher)
        final = recorder.stats()
        assert final.dropped == 0 and final.queue_depth == 0
        print(
            f"\n[{make_url(outage.direct_url).get_backend_name()}] outage "
            f"{came_back - went_down:.2f}s, queue depth {during.queue_depth}, "
            f"write lag {during.write_lag:.2f}s, errors {final.errors}, "
            f"drained in {drained - came_back:.2f}s, {final.written} writes "
            f"in {final.batches} commits"
        )
    finally:
        await runtime.aclose()
        await reader.aclose()
