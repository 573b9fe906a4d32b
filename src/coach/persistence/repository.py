"""The repository: the seed-named API over SQLite or PostgreSQL, implementing
:class:`~coach.store.Store` (whose docstrings give each method's contract).

A small façade. Every public method is one unit of work — one transaction on one
connection, run by :class:`~coach.persistence.engine.Database` — and returns frozen
records. Every write, the recorder's group commit and each seed-named single write
alike (a batch of one), is checked and applied by :class:`~.batch.Plan`; the statements
live in one module per aggregate (:mod:`.sessions`, :mod:`.phases`,
:mod:`.conversation`, :mod:`.memory`, :mod:`.zones`, :mod:`.resume`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar

from sqlalchemy import Engine, func, select
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from ..errors import BranchRefused, ConfigError, SessionNotFound, StorageError
from ..state.resume import DEFAULT_MAX_PAIRS
from ..state.zones import Delta, DeltaSpec, Zone
from ..store import (
    AddMessage,
    AppendSteps,
    MessageRecord,
    PersonRecord,
    PhaseDone,
    PhaseOutputRecord,
    ResumeResult,
    SavePhaseOutput,
    SessionRecord,
    StateRecord,
    StepPage,
    UpdateSession,
    UserRecord,
    WriteOp,
    WriteZone,
    identity_keys,
)
from .batch import Applied, Plan
from .branches import branch, branch_after_message
from .codec import StepCodec
from .conversation import conversation_select
from .engine import DEFAULT_TIMEOUT, Database, create_engine
from .lifecycle import delete_user, erase_sessions
from .memory import StepLinks, decode_or_empty, fetch_steps, read_steps, step_links, stored_count
from .migrate import require_current, upgrade
from .person import fetch_person, person_deltas, write_person
from .phases import outputs_select
from .resume import DEFAULT_MAX_STEPS, read_resume
from .schema import SESSION_STATUSES, SessionRow, SessionState, User, new_id, utcnow
from .sessions import (
    expired_select,
    insert_session,
    recent_sessions_select,
    room_session_select,
    session_record,
    session_select,
    upsert_user,
    user_select,
    user_sessions_select,
)
from .sql import SESSIONS, check_status
from .zones import delta_record, deltas_select, fetch_state

__all__ = ["DEFAULT_PHASE_IDS", "Repository", "open_repository"]

T = TypeVar("T")

DEFAULT_PHASE_IDS: Final[tuple[str, ...]] = (
    "challenge",
    "empathize",
    "define",
    "ideate",
    "strategy",
    "evaluation",
)
"""The suggested phase order of SPEC §3; the worker passes its manifest's order."""

_STEPS_ON_LOOP: Final = 64
"""Memory steps encoded or decoded on the event loop at most (~20 µs each for a turn's
items); a larger batch or load — a flush after an outage, a long history — goes to a
worker thread, where a thread hand-off is cheap next to the work."""


class Repository:
    """Async access to everything coach stores; safe to share between tasks.

    Args:
        database: Where the units of work run; closed by :meth:`aclose`.
        secret: The HMAC key of memory steps (``Settings.memory_secret``).
        phase_ids: The manifest's phase ids, in order; used for progress and resume.
        clock: Returns the current UTC time; tests pass a fixed clock.
    """

    def __init__(
        self,
        database: Database,
        *,
        secret: bytes,
        phase_ids: Sequence[str] = DEFAULT_PHASE_IDS,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        if not phase_ids:
            raise ValueError("phase_ids must name at least one phase")
        self._db = database
        self._engine: AsyncEngine | None = None
        self._codec = StepCodec(secret)
        self._phase_ids = tuple(phase_ids)
        self._clock = clock

    @property
    def phase_ids(self) -> tuple[str, ...]:
        """The manifest's phase ids, in order."""
        return self._phase_ids

    @property
    def dialect(self) -> str:
        """The database's dialect: ``sqlite`` or ``postgresql``."""
        return self._db.dialect

    @property
    def sync_engine(self) -> Engine:
        """The engine the units of work run on (for event hooks: what is executed)."""
        return self._db.sync_engine

    @property
    def engine(self) -> AsyncEngine:
        """An async engine on the same database for raw SQL and tooling (made on first
        use, closed with the repository)."""
        if self._engine is None:
            self._engine = create_engine(self._db.url, pool_size=1, max_overflow=2)
        return self._engine

    async def aclose(self) -> None:
        """Close the repository and its connections."""
        await self._db.dispose()
        if self._engine is not None:
            await self._engine.dispose()

    async def __aenter__(self) -> Repository:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- plumbing -------------------------------------------------------------------

    async def _read(self, op: Callable[[Connection], T], what: str) -> T:
        return await self._db.run(op, write=False, what=what)

    async def _rows(self, stmt: Any, what: str) -> list[Any]:
        return await self._read(lambda conn: list(conn.execute(stmt).all()), what)

    async def _sessions(self, stmt: Any, what: str) -> list[SessionRecord]:
        return [session_record(row) for row in await self._rows(stmt, what)]

    async def _apply(
        self,
        ops: Sequence[WriteOp],
        what: str,
        *,
        before: Callable[[Connection], object] | None = None,
    ) -> Applied:
        """The one write path: check ``ops``, then write them in one transaction."""
        steps = sum(len(op.steps) for op in ops if isinstance(op, AppendSteps))
        if steps <= _STEPS_ON_LOOP:
            plan = Plan.of(ops, self._codec, self._clock)
        else:
            plan = await asyncio.to_thread(Plan.of, ops, self._codec, self._clock)

        def unit(conn: Connection) -> Applied:
            if before is not None:
                before(conn)
            return plan.apply(conn)

        try:
            return await self._db.run(unit, write=True, what=what)
        except StorageError as exc:
            # A message or phase output of an unknown session breaks its foreign key;
            # name the session (only on this failure path does it cost a read).
            if isinstance(exc.__cause__, IntegrityError):
                stmt = select(SESSIONS.c.id).where(SESSIONS.c.id.in_(plan.session_ids))
                found = {sid for (sid,) in await self._rows(stmt, what)}
                if missing := sorted(plan.session_ids - found):
                    raise SessionNotFound(missing[0]) from exc
            raise

    async def _decode(self, session_id: str, rows: list[Any], first: int, end: int) -> list[object]:
        if len(rows) <= _STEPS_ON_LOOP:
            return decode_or_empty(self._codec, session_id, rows, first, end)
        return await asyncio.to_thread(decode_or_empty, self._codec, session_id, rows, first, end)

    # -- users and sessions -----------------------------------------------------------

    async def get_or_create_user(
        self, identity: str, display_name: str | None = None
    ) -> UserRecord:
        """The user with ``identity``, created if needed (race-safe)."""
        now = self._clock()
        return await self._db.run(
            lambda conn: upsert_user(conn, identity, display_name, now),
            write=True,
            what="get_or_create_user",
        )

    async def find_user(self, identity: str) -> UserRecord | None:
        """The user with ``identity``, or ``None`` (never creates one). A user stored
        before identities were normalised is found by the spelling they were stored with."""
        keys = identity_keys(identity)
        rows = await self._rows(user_select().where(User.identity.in_(keys)), "find_user")
        found = {row[1]: UserRecord(*row) for row in rows}
        return next((found[key] for key in keys if key in found), None)

    async def get_user(self, user_id: str) -> UserRecord | None:
        """The user with id ``user_id``, or ``None``."""
        rows = await self._rows(user_select().where(User.id == user_id), "get_user")
        return UserRecord(*rows[0]) if rows else None

    async def create_session(
        self,
        user_id: str,
        design_challenge: str | None = None,
        *,
        room: str | None = None,
        first_phase: PhaseDone | None = None,
    ) -> SessionRecord:
        """A new ``in_progress`` session, its empty state and ``first_phase`` completed,
        in one transaction."""
        now = self._clock()
        session = SessionRecord(
            *(new_id(), user_id, design_challenge, "in_progress", None, None, now, now),
            room=room,
        )
        ops = []
        if first_phase is not None:
            done = first_phase
            ops.append(
                SavePhaseOutput(
                    *(session.id, done.phase_id, done.phase_name, "completed"),
                    *(done.system_prompt, done.user_input, done.output),
                )
            )
            if done.phase_id in self._phase_ids:
                session = dataclasses.replace(session, completed_phases=1)
        await self._apply(ops, "create_session", before=lambda conn: insert_session(conn, session))
        return session

    async def branch_session(
        self, session_id: str, phase_id: str | None = None, *, after_message: int | None = None
    ) -> SessionRecord:
        """A new session of the same user holding ``session_id`` as it was when
        ``phase_id`` ended, or after the turn of message ``after_message``
        (:mod:`.branches`); the original is only read."""
        now = self._clock()
        if (phase_id is None) == (after_message is None):
            raise BranchRefused(
                session_id, phase_id or "", "Branch from a phase or from a message, not both."
            )

        def unit(conn: Connection) -> str:
            if after_message is not None:
                return branch_after_message(
                    conn, self._codec, session_id, after_message, phase_ids=self._phase_ids, now=now
                )
            assert phase_id is not None
            return branch(
                conn, self._codec, session_id, phase_id, phase_ids=self._phase_ids, now=now
            )

        branch_id = await self._db.run(unit, write=True, what="branch_session")
        found = await self.get_session(branch_id)
        assert found is not None
        return found

    async def delete_session(self, session_id: str) -> bool:
        """Erase a session and every row of it, and what the person's other sessions
        hold of it (:func:`~.lifecycle.erase_sessions`; one transaction); False if
        unknown."""
        now = self._clock()
        deleted = await self._db.run(
            lambda conn: erase_sessions(conn, self._codec, [session_id], now),
            write=True,
            what="delete_session",
        )
        return deleted > 0

    async def delete_user(self, identity: str) -> int | None:
        """Erase a person: the user and all their sessions with every row of them (one
        transaction). Returns how many sessions were erased; ``None`` if unknown."""
        return await self._db.run(
            lambda conn: delete_user(conn, identity), write=True, what="delete_user"
        )

    async def prune_sessions(
        self, *, older_than: datetime, status: str | None = None, dry_run: bool = False
    ) -> list[SessionRecord]:
        """Erase the sessions last updated before ``older_than`` (only those with
        ``status``, if given), and what the same people's other sessions hold of them,
        in one transaction; return them as they were. With ``dry_run`` nothing is
        erased."""
        if status is not None:
            check_status(status, SESSION_STATUSES, "session")

        stmt = expired_select(self._phase_ids, older_than, status)
        now = self._clock()

        def unit(conn: Connection) -> list[SessionRecord]:
            found = [session_record(row) for row in conn.execute(stmt)]
            if not dry_run:
                erase_sessions(conn, self._codec, [s.id for s in found], now)
            return found

        return await self._db.run(unit, write=not dry_run, what="prune_sessions")

    async def get_session(
        self, session_id: str, *, user_id: str | None = None
    ) -> SessionRecord | None:
        """The session, or ``None``; with ``user_id``, only that user's (the owner is in
        the query, so a foreign id costs what a missing one does)."""
        stmt = session_select(self._phase_ids).where(SessionRow.id == session_id)
        if user_id is not None:
            stmt = stmt.where(SessionRow.user_id == user_id)
        found = await self._sessions(stmt, "get_session")
        return found[0] if found else None

    async def get_user_sessions(
        self, user_id: str, *, limit: int | None = None
    ) -> list[SessionRecord]:
        """The user's sessions, newest first (``limit`` at most, in the query), each with
        its completed-phase count."""
        stmt = user_sessions_select(self._phase_ids, user_id)
        if limit is not None:
            stmt = stmt.limit(limit)
        return await self._sessions(stmt, "get_user_sessions")

    async def count_user_sessions(self, user_id: str) -> int:
        """How many sessions the user has."""
        stmt = select(func.count()).select_from(SessionRow).where(SessionRow.user_id == user_id)
        return int(await self._read(lambda conn: conn.scalar(stmt) or 0, "count_user_sessions"))

    async def get_past_work(self, user_id: str) -> list[tuple[str, dict[str, Any]]]:
        """The data zone of each of the user's sessions, newest first, in one query:
        ``(session_id, data)`` (what ``search_past_work`` searches)."""
        stmt = (
            select(SessionRow.id, SessionState.data)
            .join(SessionState, SessionState.session_id == SessionRow.id)
            .where(SessionRow.user_id == user_id)
            .order_by(SessionRow.created_at.desc(), SessionRow.id.desc())
        )
        rows = await self._rows(stmt, "get_past_work")
        return [(str(row[0]), dict(row[1] or {})) for row in rows]

    async def list_sessions(self, *, limit: int = 50) -> list[SessionRecord]:
        """The most recently updated sessions of every user (the operator's view)."""
        return await self._sessions(recent_sessions_select(self._phase_ids, limit), "list_sessions")

    async def find_room_session(self, user_id: str, room: str) -> SessionRecord | None:
        """The user's most recent in-progress session in ``room``."""
        stmt = room_session_select(self._phase_ids, user_id, room)
        found = await self._sessions(stmt, "find_room_session")
        return found[0] if found else None

    async def update_session(self, session_id: str, **fields: Any) -> SessionRecord:
        """Change the given session fields (``None`` leaves one) and bump ``updated_at``."""
        changed = {name: value for name, value in fields.items() if value is not None}
        await self._apply([UpdateSession(session_id, changed)], "update_session")
        session = await self.get_session(session_id)
        assert session is not None
        return session

    async def set_session_status(self, session_id: str, status: str) -> SessionRecord:
        """Set a session's status (``in_progress``, ``completed`` or ``failed``)."""
        return await self.update_session(session_id, status=status)

    # -- phase outputs ----------------------------------------------------------------

    async def save_phase_output(
        self,
        session_id: str,
        phase_id: str,
        phase_name: str,
        status: str,
        *,
        system_prompt: str | None = None,
        user_input: str | None = None,
        output: str | None = None,
        error: str | None = None,
    ) -> PhaseOutputRecord:
        """Upsert the output of one phase (SPEC §4.2; COALESCE on the texts)."""
        op = SavePhaseOutput(
            session_id, phase_id, phase_name, status, system_prompt, user_input, output, error
        )
        return (await self._apply([op], "save_phase_output")).phase_outputs[0]

    async def get_phase_outputs(
        self, session_id: str, *, include_prompts: bool = True
    ) -> list[PhaseOutputRecord]:
        """The session's phase outputs in creation order (prompts only when asked)."""
        stmt = outputs_select(session_id, include_prompts=include_prompts)
        return [PhaseOutputRecord(*row) for row in await self._rows(stmt, "get_phase_outputs")]

    # -- conversation (the conversation zone) -------------------------------------------

    async def add_session_message(
        self,
        session_id: str,
        role: str,
        content: str,
        *,
        phase_id: str | None = None,
        interrupted: bool = False,
    ) -> int:
        """Append one message to the conversation; return its id."""
        op = AddMessage(session_id, role, content, phase_id, interrupted)
        return (await self._apply([op], "add_session_message")).message_ids[0]

    async def append_conversation(
        self, session_id: str, role: str, content: str, *, phase_id: str | None = None
    ) -> int:
        """The conversation zone's append: :meth:`add_session_message` (no delta, no step)."""
        return await self.add_session_message(session_id, role, content, phase_id=phase_id)

    async def get_session_conversation(
        self,
        session_id: str,
        *,
        phase_id: str | None = None,
        after_id: int | None = None,
        before_id: int | None = None,
        from_end: bool = False,
        limit: int | None = None,
    ) -> list[MessageRecord]:
        """The conversation in order, optionally of one phase, a page at a time (forward
        after ``after_id``, or backward before ``before_id`` / from the end)."""
        stmt = conversation_select(
            session_id,
            phase_id=phase_id,
            after_id=after_id,
            before_id=before_id,
            from_end=from_end,
            limit=limit,
        )
        rows = await self._rows(stmt, "get_session_conversation")
        if before_id is not None or from_end:
            rows.reverse()
        return [MessageRecord(*row) for row in rows]

    # -- agent memory steps -------------------------------------------------------------

    async def agent_step_count(self, session_id: str) -> int:
        """How many memory steps are stored for the session (0 for none)."""
        count = await self._read(lambda conn: stored_count(conn, session_id), "agent_step_count")
        return count or 0

    async def save_agent_state(self, session_id: str, steps: Sequence[object]) -> int:
        """Store the steps of the full list not stored yet, reading the stored count in
        the same transaction, under the session's lock; return the count afterwards."""
        steps = list(steps)

        def unit(conn: Connection) -> int:
            stored = stored_count(conn, session_id, lock=True)
            if stored is None:
                raise SessionNotFound(session_id)
            if len(steps) > stored:
                new = AppendSteps(session_id, stored, tuple(steps[stored:]))
                Plan.of([new], self._codec, self._clock).apply(conn)
            return max(stored, len(steps))

        return await self._db.run(unit, write=True, what="save_agent_state")

    async def append_agent_steps(
        self, session_id: str, steps: Sequence[object], *, start: int
    ) -> int:
        """Store ``steps`` at ``start, start + 1, ...`` (``StaleWrite`` if not the count)."""
        await self._apply([AppendSteps(session_id, start, tuple(steps))], "append_agent_steps")
        return start + len(steps)

    async def load_agent_state(
        self,
        session_id: str,
        *,
        newest: int | None = None,
        since: int | None = None,
        limit: int | None = None,
    ) -> list[object]:
        """The memory steps in order (all, newest N, or from ``since``; ``limit`` at most);
        ``[]`` (logged) when any asked for is missing, corrupt, tampered with or foreign."""
        first, end, rows = await self._read(
            lambda conn: read_steps(conn, session_id, newest=newest, since=since, limit=limit),
            "load_agent_state",
        )
        return await self._decode(session_id, rows, first, end)

    async def get_step_page(
        self, session_id: str, *, before: int | None = None, limit: int
    ) -> StepPage:
        """The ``limit`` newest memory steps before position ``before`` (or overall), with
        the message and phase each belongs to, in one read transaction."""

        def unit(conn: Connection) -> tuple[int, int, list[Any], StepLinks]:
            count = stored_count(conn, session_id) or 0
            end = count if before is None else min(max(before, 0), count)
            first = max(0, end - max(limit, 0))
            rows = fetch_steps(conn, session_id, first, end)
            return first, end, rows, step_links(conn, session_id, first, end)

        first, end, rows, (message_ids, phase_ids) = await self._read(unit, "get_step_page")
        steps = await self._decode(session_id, rows, first, end)
        if not steps:
            return StepPage(first, [], [], [])
        return StepPage(first, steps, message_ids, phase_ids)

    # -- zoned state ----------------------------------------------------------------------

    async def get_person(self, user_id: str) -> PersonRecord:
        """What the user agreed coach may remember (step 0 and no facts before any write)."""
        return await self._read(lambda conn: fetch_person(conn, user_id), "get_person")

    async def update_person(
        self,
        user_id: str,
        value: dict[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[PersonRecord, Delta]:
        """Replace the person record and record its delta, atomically (see the protocol)."""
        now = utcnow()
        return await self._db.run(
            lambda conn: write_person(conn, user_id, value, delta, expected_step, now),
            write=True,
            what="update_person",
        )

    async def get_person_deltas(self, user_id: str) -> list[Delta]:
        """The person record's deltas in step order."""
        return await self._read(lambda conn: person_deltas(conn, user_id), "get_person_deltas")

    async def get_state(self, session_id: str) -> StateRecord:
        """The session's zoned state (step 0 and empty zones before any write)."""
        return await self._read(lambda conn: fetch_state(conn, session_id), "get_state")

    async def _zoned_write(
        self,
        session_id: str,
        zone: Zone | None,
        value: dict[str, Any] | None,
        delta: DeltaSpec,
        expected_step: int | None,
    ) -> tuple[StateRecord, Delta]:
        name = zone.value if zone is not None else None
        op = WriteZone(session_id, name, value, delta, expected_step)
        applied = await self._apply([op], f"update_{name}" if name else "add_delta")
        state, deltas = applied.states[session_id]
        return state, deltas[-1]

    async def update_data(
        self,
        session_id: str,
        data: dict[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[StateRecord, Delta]:
        """Replace the data zone and record its delta, atomically; the step goes up by one."""
        return await self._zoned_write(session_id, Zone.DATA, data, delta, expected_step)

    async def update_template(
        self,
        session_id: str,
        template: dict[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[StateRecord, Delta]:
        """Replace the template zone and record its delta, atomically."""
        return await self._zoned_write(session_id, Zone.TEMPLATE, template, delta, expected_step)

    async def update_view(
        self,
        session_id: str,
        view: dict[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[StateRecord, Delta]:
        """Replace the view zone and record its delta, atomically."""
        return await self._zoned_write(session_id, Zone.VIEW, view, delta, expected_step)

    async def add_delta(
        self, session_id: str, delta: DeltaSpec, *, expected_step: int | None = None
    ) -> tuple[StateRecord, Delta]:
        """Record a delta that changes no zone (e.g. a search with 0 results)."""
        return await self._zoned_write(session_id, None, None, delta, expected_step)

    async def get_deltas(
        self, session_id: str, since_step: int = 0, *, limit: int | None = None
    ) -> list[Delta]:
        """The deltas with ``step > since_step`` in step order, ``limit`` at most."""
        stmt = deltas_select(session_id, since_step, limit)
        return [delta_record(row) for row in await self._rows(stmt, "get_deltas")]

    # -- resume and the group commit -----------------------------------------------------

    async def resume_session(
        self,
        session_id: str,
        *,
        user_id: str,
        max_pairs: int = DEFAULT_MAX_PAIRS,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> ResumeResult:
        """Load a session for continuation (SPEC §5) in one bounded read: the phase
        outputs, the newest ``2 * max_pairs`` messages, the newest ``max_steps`` memory
        steps and the zoned state."""
        if max_pairs < 0:
            raise ValueError("max_pairs must not be negative")
        loaded = await self._read(
            lambda conn: read_resume(
                conn,
                session_id,
                user_id=user_id,
                phase_ids=self._phase_ids,
                max_pairs=max_pairs,
                max_steps=max_steps,
            ),
            "resume_session",
        )
        memory = await self._decode(
            session_id, list(loaded.step_rows), loaded.steps_from, loaded.stored_steps
        )
        return ResumeResult(
            session=loaded.session,
            next_phase_id=loaded.next_phase_id,
            context=loaded.context,
            memory=memory,
            outputs=loaded.outputs,
            state=loaded.state,
            stored_steps=loaded.stored_steps,
        )

    async def write_batch(self, ops: Sequence[WriteOp]) -> None:
        """Apply a batch in ONE transaction (the recorder's group commit): one update per
        session (claiming memory positions, taking its lock), one per session's zone
        writes, one insert of all messages and one of all steps. All or nothing."""
        if ops:
            await self._apply(ops, "write_batch")


async def open_repository(
    url: str | URL,
    *,
    secret: bytes,
    create_schema: bool = False,
    check_schema: bool = False,
    phase_ids: Sequence[str] = DEFAULT_PHASE_IDS,
    pool_size: int = 5,
    max_overflow: int = 10,
    call_timeout: float = DEFAULT_TIMEOUT,
    clock: Callable[[], datetime] = utcnow,
) -> Repository:
    """Open the repository on ``url``.

    Args:
        url: A SQLAlchemy URL (``sqlite:///...`` or ``postgresql://...``, any driver).
        secret: The HMAC key of memory steps (``Settings.memory_secret``).
        create_schema: Run the Alembic migrations first (SQLite; PostgreSQL fleets run
            ``python -m coach db upgrade`` instead).
        check_schema: Check first that the database is reachable and migrated
            (:func:`~.migrate.require_current`): a surface fails at start, not mid-turn.
        phase_ids: The manifest's phase ids, in order.
        pool_size: Connections (PostgreSQL pool; SQLite worker threads).
        max_overflow: PostgreSQL pool overflow.
        call_timeout: Seconds one PostgreSQL call may take, retries included
            (``COACH_DB_TIMEOUT``); then it fails as a transient StorageError.
        clock: Returns the current UTC time (tests pass a fixed clock).

    Raises:
        ConfigError: ``secret`` is not bytes (a str is a mistake: say where it happens).
    """
    if not isinstance(secret, bytes):
        raise ConfigError(
            f"open_repository: secret must be bytes (Settings.memory_secret), "
            f"not {type(secret).__name__}"
        )
    if create_schema:
        await upgrade(url, secret=secret)
    elif check_schema:
        await require_current(url)
    database = Database(url, pool_size=pool_size, max_overflow=max_overflow, timeout=call_timeout)
    return Repository(database, secret=secret, phase_ids=phase_ids, clock=clock)
