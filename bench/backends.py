"""The stores compared: coach's persistence core and the anchors, behind one small interface.

Every backend stores *turns* (a user message and the assistant's reply) for a
conversation and commits each turn before :meth:`Backend.write_turn` returns:

* ``coach seed API`` — ``add_session_message`` twice and ``save_agent_state`` with all
  memory steps so far: three transactions per turn, as the seed API is called.
* ``coach write_batch`` — one ``Repository.write_batch`` per turn: both messages and an
  ``AppendSteps`` of their two ``ChatMessage`` memory steps, one transaction.
* ``agents SQLAlchemySession`` / ``agents SQLiteSession`` — openai-agents' sessions, one
  ``add_items`` of the user item and the assistant output item per turn.
* ``LangGraph AsyncSqliteSaver`` — a one-node ``MessagesState`` graph compiled with the
  checkpointer, one ``ainvoke`` per turn (``durability="sync"``).
* ``raw aiosqlite`` — an ``executemany`` of the two messages and a ``commit``: the floor
  for "durable per turn" on SQLite.

Every SQLite connection runs with ``journal_mode=WAL`` and ``synchronous=NORMAL``, as
coach's do. openai-agents' ``SQLiteSession`` has no setting for it, so
:class:`_NormalSyncSQLiteSession` overrides its (private) connection hook; the others
take it through public means (an engine ``connect`` event, a PRAGMA on the connection).
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import aiosqlite
from livekit.agents import llm
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from coach.conversation.recorder import Recorder
from coach.persistence import open_repository
from coach.store import AddMessage, AppendSteps, WriteOp

from .measure import coach_keys
from .text import Turn

SECRET = b"x" * 32
WINDOW_PAIRS = 25
"""The resume window: coach reads the newest 25 pairs; anchors read as much."""


class Backend(Protocol):
    """One store under test. ``open`` before use, ``aclose`` after."""

    label: str

    async def open(self) -> None:
        """Create the schema and connect."""
        ...

    async def new_session(self, key: str) -> Any:
        """A new conversation; returns the handle the other methods take."""
        ...

    def items(self, handle: Any, turn: Turn) -> Any:
        """The backend's own representation of a turn (built outside the timed call)."""
        ...

    async def write_turn(self, handle: Any, items: Any) -> None:
        """Store one turn and commit it."""
        ...

    async def bulk_load(self, handle: Any, turns: Sequence[Turn]) -> None:
        """Store many turns quickly (building a long session for the read benchmark)."""
        ...

    async def read_window(self, handle: Any) -> int:
        """Read what a resume needs (the newest 25 pairs); returns the items read."""
        ...

    async def aclose(self) -> None:
        """Close every connection."""
        ...


def chat_items(turn: Turn) -> tuple[llm.ChatMessage, llm.ChatMessage]:
    """The two LiveKit chat items a conversation turn produces (coach's memory steps)."""
    return (
        llm.ChatMessage(role="user", content=[turn.user]),
        llm.ChatMessage(role="assistant", content=[turn.assistant]),
    )


def turn_ops(
    session_id: str, start: int, turn: Turn, steps: Sequence[object] | None = None
) -> list[WriteOp]:
    """A turn's writes, as the recorder queues them: its two messages, then its memory
    steps (default :func:`chat_items`) at position ``start``."""
    return [
        AddMessage(session_id, "user", turn.user),
        AddMessage(session_id, "assistant", turn.assistant),
        AppendSteps(session_id, start, tuple(chat_items(turn) if steps is None else steps)),
    ]


# --- coach -------------------------------------------------------------------------------


@dataclass
class CoachSession:
    """A coach session and the memory steps written to it so far."""

    id: str
    steps: list[object] = field(default_factory=list)


class CoachBackend:
    """coach's ``Repository`` on ``url``; ``mode`` picks the write path."""

    MODES: ClassVar[dict[str, str]] = {"seed": "coach seed API", "batch": "coach write_batch"}

    def __init__(self, url: str, mode: str = "batch") -> None:
        self.url = url
        self.mode = mode
        self.label = self.MODES[mode]
        self.repo: Any = None
        self.user_id = ""
        self._live: Recorder | None = None

    async def open(self) -> None:
        """Open the repository (migrating a fresh database) and create the user."""
        self.repo = await open_repository(
            self.url, **coach_keys(self.url), secret=SECRET, create_schema=True
        )
        self.user_id = (await self.repo.get_or_create_user("bench")).id

    async def new_session(self, key: str) -> CoachSession:
        """A new ``challenge`` session of the bench user."""
        return CoachSession((await self.repo.create_session(self.user_id, "challenge")).id)

    def items(self, handle: CoachSession, turn: Turn) -> tuple[Turn, tuple[object, ...]]:
        """The turn's text and its two ``ChatMessage`` memory steps."""
        return turn, chat_items(turn)

    async def write_turn(
        self, handle: CoachSession, items: tuple[Turn, tuple[object, ...]]
    ) -> None:
        """Seed API: three calls, three commits; batch: one ``write_batch``, one commit."""
        turn, steps = items
        start = len(handle.steps)
        handle.steps.extend(steps)
        if self.mode == "seed":
            await self.repo.add_session_message(handle.id, "user", turn.user)
            await self.repo.add_session_message(handle.id, "assistant", turn.assistant)
            await self.repo.save_agent_state(handle.id, handle.steps)
            return
        await self.repo.write_batch(turn_ops(handle.id, start, turn, steps))

    async def bulk_load(
        self, handle: CoachSession, turns: Sequence[Turn], chunk: int = 100
    ) -> None:
        """``write_batch`` of ``chunk`` turns at a time, then a completed phase output."""
        for first in range(0, len(turns), chunk):
            ops: list[Any] = []
            steps: list[object] = []
            for turn in turns[first : first + chunk]:
                ops += [
                    AddMessage(handle.id, "user", turn.user),
                    AddMessage(handle.id, "assistant", turn.assistant),
                ]
                steps += chat_items(turn)
            ops.append(AppendSteps(handle.id, len(handle.steps), tuple(steps)))
            await self.repo.write_batch(ops)
            handle.steps.extend(steps)
        await self.complete_phase(handle)

    async def complete_phase(self, handle: CoachSession) -> None:
        """A completed phase output: ``resume_session`` needs one."""
        await self.repo.save_phase_output(
            handle.id,
            "challenge",
            "Challenge",
            "completed",
            system_prompt="p",
            user_input="u",
            output="o",
        )

    async def read_window(self, handle: CoachSession) -> int:
        """``resume_session``: the 25-pair window and the newest memory steps."""
        result = await self.repo.resume_session(handle.id, user_id=self.user_id)
        return len(result.context.history) + len(result.memory)

    async def live_resume(self, handle: CoachSession) -> int:
        """A resume as a live process runs it (``Userdata.load_session``): this process's
        recorder flushed first (idle here, as at a reconnect with nothing queued), then
        ``resume_session``."""
        if self._live is None:
            self._live = self.recorder()
        async with asyncio.timeout(5):
            await self._live.flush()
        return await self.read_window(handle)

    def recorder(self, **options: Any) -> Recorder:
        """A started ``Recorder`` writing through this repository."""
        recorder = Recorder(self.repo, **options)
        recorder.start()
        return recorder

    async def aclose(self) -> None:
        """Close the repository (and the live resume's recorder)."""
        if self._live is not None:
            await self._live.aclose()
            self._live = None
        if self.repo is not None:
            await self.repo.aclose()
            self.repo = None


# --- openai-agents -----------------------------------------------------------------------


def agents_items(turn: Turn) -> list[dict[str, Any]]:
    """A turn as openai-agents stores it: the user input item and the model's output item."""
    return [
        {"role": "user", "content": turn.user},
        {
            "id": f"msg_{uuid.uuid4().hex}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": turn.assistant, "annotations": []}],
        },
    ]


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    """``synchronous=NORMAL`` on every new connection (WAL is set by the library)."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA synchronous = NORMAL")
    finally:
        cursor.close()


class _AgentsSessionOps:
    """What both openai-agents sessions do alike: their items, writes and window read."""

    def items(self, handle: Any, turn: Turn) -> list[dict[str, Any]]:
        """User item and assistant output item."""
        return agents_items(turn)

    async def write_turn(self, handle: Any, items: list[dict[str, Any]]) -> None:
        """One ``add_items``: one transaction."""
        await handle.add_items(items)

    async def bulk_load(self, handle: Any, turns: Sequence[Turn]) -> None:
        """``add_items`` of many turns at once."""
        for first in range(0, len(turns), 500):
            await handle.add_items([i for t in turns[first : first + 500] for i in agents_items(t)])

    async def read_window(self, handle: Any) -> int:
        """``get_items(limit=50)``: the newest 25 pairs."""
        return len(await handle.get_items(limit=2 * WINDOW_PAIRS))


class AgentsSQLAlchemyBackend(_AgentsSessionOps):
    """openai-agents ``SQLAlchemySession`` on an engine this bench creates."""

    label = "agents SQLAlchemySession"

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: AsyncEngine | None = None
        self._first = True

    async def open(self) -> None:
        """Create the engine; SQLite connections get ``synchronous=NORMAL``."""
        self.engine = create_async_engine(self.url)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)

    async def new_session(self, key: str) -> Any:
        """One ``SQLAlchemySession`` per conversation (the first creates the tables)."""
        from agents.extensions.memory import SQLAlchemySession

        assert self.engine is not None
        session = SQLAlchemySession(key, engine=self.engine, create_tables=self._first)
        if self._first:
            await session.get_items(limit=1)  # create the tables outside the timed writes
            self._first = False
        return session

    async def aclose(self) -> None:
        """Dispose of the engine."""
        if self.engine is not None:
            await self.engine.dispose()
            self.engine = None


def _normal_sync_sqlite_session() -> type[Any]:
    from agents import SQLiteSession

    class _NormalSyncSQLiteSession(SQLiteSession):
        """``SQLiteSession`` whose connections also get ``synchronous=NORMAL``.

        The library sets WAL in ``_configure_connection`` and offers no option for the
        sync level; this override of that private hook is the only way to match coach.
        """

        @staticmethod
        def _configure_connection(conn: sqlite3.Connection) -> None:
            SQLiteSession._configure_connection(conn)
            conn.execute("PRAGMA synchronous = NORMAL")

    return _NormalSyncSQLiteSession


class AgentsSQLiteBackend(_AgentsSessionOps):
    """openai-agents ``SQLiteSession`` (stdlib ``sqlite3`` in worker threads) on one file."""

    label = "agents SQLiteSession"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sessions: list[Any] = []
        self._cls: type[Any] | None = None

    async def open(self) -> None:
        """Nothing to connect: each session opens its own connections."""
        self._cls = _normal_sync_sqlite_session()

    async def new_session(self, key: str) -> Any:
        """One ``SQLiteSession`` per conversation."""
        assert self._cls is not None
        session = self._cls(key, self.path)
        self._sessions.append(session)
        return session

    async def aclose(self) -> None:
        """Close every session's connections."""
        for session in self._sessions:
            session.close()
        self._sessions.clear()


# --- LangGraph ---------------------------------------------------------------------------


@dataclass
class GraphThread:
    """A LangGraph thread and the reply its node will add next."""

    config: dict[str, Any]
    reply: Any = None


class LangGraphBackend:
    """A one-node ``MessagesState`` graph checkpointed by ``AsyncSqliteSaver``."""

    label = "LangGraph AsyncSqliteSaver"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn: aiosqlite.Connection | None = None
        self.graph: Any = None
        self.saver: Any = None

    async def open(self) -> None:
        """Connect with WAL and ``synchronous=NORMAL``, set up the saver, compile the graph."""
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
        from langgraph.config import get_config
        from langgraph.graph import END, START, MessagesState, StateGraph

        self.conn = await aiosqlite.connect(self.path)
        await self.conn.execute("PRAGMA journal_mode = WAL")
        await self.conn.execute("PRAGMA synchronous = NORMAL")
        self.saver = AsyncSqliteSaver(self.conn)
        await self.saver.setup()

        async def respond(state: MessagesState) -> dict[str, Any]:
            thread: GraphThread = get_config()["configurable"]["bench_thread"]
            return {"messages": [thread.reply]}

        builder = StateGraph(MessagesState)
        builder.add_node("respond", respond)
        builder.add_edge(START, "respond")
        builder.add_edge("respond", END)
        self.graph = builder.compile(checkpointer=self.saver)

    async def new_session(self, key: str) -> GraphThread:
        """A thread id; the config carries the thread's pending reply to the node."""
        thread = GraphThread({"configurable": {"thread_id": key}})
        thread.config["configurable"]["bench_thread"] = thread
        return thread

    def items(self, handle: GraphThread, turn: Turn) -> tuple[Any, Any]:
        """A ``HumanMessage`` and an ``AIMessage``."""
        from langchain_core.messages import AIMessage, HumanMessage

        return HumanMessage(turn.user), AIMessage(turn.assistant)

    async def write_turn(self, handle: GraphThread, items: tuple[Any, Any]) -> None:
        """One graph run: the user message in, the reply out, checkpoints committed."""
        human, handle.reply = items
        await self.graph.ainvoke({"messages": [human]}, handle.config, durability="sync")

    async def bulk_load(self, handle: GraphThread, turns: Sequence[Turn]) -> None:
        """One state update with all messages: the latest checkpoint a resume reads."""
        messages = [m for t in turns for m in self.items(handle, t)]
        await self.graph.aupdate_state(handle.config, {"messages": messages})

    async def read_window(self, handle: GraphThread) -> int:
        """The latest checkpoint (``aget_tuple``), keeping its newest 25 pairs."""
        found = await self.saver.aget_tuple(handle.config)
        return len(found.checkpoint["channel_values"]["messages"][-2 * WINDOW_PAIRS :])

    async def aclose(self) -> None:
        """Close the connection."""
        if self.conn is not None:
            await self.conn.close()
            self.conn = None


# --- raw aiosqlite -----------------------------------------------------------------------


class RawAiosqliteBackend:
    """The floor: one table of messages, ``executemany`` + ``commit`` per turn."""

    label = "raw aiosqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn: aiosqlite.Connection | None = None

    async def open(self) -> None:
        """Connect with WAL and ``synchronous=NORMAL`` and create the table."""
        self.conn = await aiosqlite.connect(self.path)
        await self.conn.execute("PRAGMA journal_mode = WAL")
        await self.conn.execute("PRAGMA synchronous = NORMAL")
        await self.conn.execute(
            "CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, session_id TEXT NOT "
            "NULL, role TEXT NOT NULL, content TEXT NOT NULL, created_at REAL NOT NULL)"
        )
        await self.conn.execute("CREATE INDEX IF NOT EXISTS by_session ON messages(session_id, id)")
        await self.conn.commit()

    async def new_session(self, key: str) -> str:
        """The session key itself."""
        return key

    def items(self, handle: str, turn: Turn) -> list[tuple[str, str, str]]:
        """Two rows."""
        return [(handle, "user", turn.user), (handle, "assistant", turn.assistant)]

    async def write_turn(self, handle: str, items: list[tuple[str, str, str]]) -> None:
        """``executemany`` and ``commit``: two hand-offs to the connection's thread."""
        assert self.conn is not None
        await self.conn.executemany(
            "INSERT INTO messages (session_id, role, content, created_at) "
            "VALUES (?, ?, ?, julianday('now'))",
            items,
        )
        await self.conn.commit()

    async def bulk_load(self, handle: str, turns: Sequence[Turn]) -> None:
        """All rows in one transaction."""
        await self.write_turn(handle, [r for t in turns for r in self.items(handle, t)])

    async def read_window(self, handle: str) -> int:
        """The newest 50 rows."""
        assert self.conn is not None
        rows = await self.conn.execute_fetchall(
            "SELECT role, content FROM messages WHERE session_id = ? ORDER BY id DESC LIMIT ?",
            (handle, 2 * WINDOW_PAIRS),
        )
        return len(list(rows))

    async def aclose(self) -> None:
        """Close the connection."""
        if self.conn is not None:
            await self.conn.close()
            self.conn = None
