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
import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar

from sqlalchemy import Engine, func, select
from sqlalchemy.engine import URL, Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from ..errors import (
    BranchRefused,
    ConfigError,
    InvalidWrite,
    PersonErased,
    SessionNotFound,
    StorageError,
)
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
    check_identity,
    clean_text,
    identity_keys,
)
from ..store.text import MAX_IDENTITY
from .batch import Applied, Plan
from .branches import branch, branch_after_message
from .codec import StepCodec
from .conversation import conversation_select, message_record
from .crypto import MasterKeys, Sealer
from .engine import DEFAULT_TIMEOUT, Database, create_engine
from .keystore import Vault
from .lifecycle import delete_user, erase_sessions
from .memory import StepLinks, decode_or_empty, fetch_steps, read_steps, step_links, stored_count
from .migrate import require_current, upgrade
from .owners import Owners
from .person import fetch_person, person_deltas, write_person
from .phases import output_record, outputs_select
from .resume import DEFAULT_MAX_STEPS, read_resume
from .schema import SESSION_STATUSES, SessionRow, SessionState, User, new_id, utcnow
from .sessions import (
    expired_select,
    insert_session,
    insert_user,
    recent_sessions_select,
    room_session_select,
    session_record,
    session_select,
    user_record,
    user_select,
    user_sessions_select,
)
from .sql import SESSIONS, USERS, check_status
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

    Every personal field is sealed with its person's data key (:mod:`.crypto`) before it
    reaches a statement, and opened after it is read; the keys come from ``vault``.

    Args:
        database: Where the units of work run; closed by :meth:`aclose`.
        secret: The HMAC key of memory steps (``Settings.memory_secret``).
        vault: The people's data keys; closed by :meth:`aclose`.
        phase_ids: The manifest's phase ids, in order; used for progress and resume.
        clock: Returns the current UTC time; tests pass a fixed clock.
    """

    def __init__(
        self,
        database: Database,
        *,
        secret: bytes,
        vault: Vault,
        phase_ids: Sequence[str] = DEFAULT_PHASE_IDS,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        if not phase_ids:
            raise ValueError("phase_ids must name at least one phase")
        self._db = database
        self.vault = vault
        """The people's data keys."""
        self._owners = Owners(database, vault)
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
        await self.vault.aclose()
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

    async def _sessions(
        self, stmt: Any, what: str, *, skip_erased: bool = False
    ) -> list[SessionRecord]:
        """The sessions ``stmt`` selects, opened; a session of an erased person raises
        :class:`PersonErased` (or, with ``skip_erased``, is left out)."""
        rows = await self._rows(stmt, what)
        sealers = await self.vault.sealers({row.user_id for row in rows})
        records = []
        for row in rows:
            sealer = sealers.get(row.user_id)
            if sealer is None:
                if skip_erased:
                    continue
                raise PersonErased(row.user_id)
            self._owners.remember(row.id, row.user_id)
            records.append(session_record(row, sealer))
        return records

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
        sealers = await self._owners.of_sessions(plan.session_ids)
        if missing := sorted(plan.session_ids - sealers.keys()):
            raise SessionNotFound(missing[0])

        def unit(conn: Connection) -> Applied:
            if before is not None:
                before(conn)
            return plan.apply(conn, sealers)

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

    async def _decode(
        self, sealer: Sealer, session_id: str, rows: list[Any], first: int, end: int
    ) -> list[object]:
        args = (self._codec, sealer, session_id, rows, first, end)
        if len(rows) <= _STEPS_ON_LOOP:
            return decode_or_empty(*args)
        return await asyncio.to_thread(decode_or_empty, *args)

    # -- users and sessions -----------------------------------------------------------

    async def get_or_create_user(
        self, identity: str, display_name: str | None = None
    ) -> UserRecord:
        """The user with ``identity``, created if needed with a new data key (race-safe:
        two workers creating the same person agree on the first).

        Raises:
            InvalidWrite: ``identity`` fails :func:`~coach.store.check_identity`, or the
                display name is longer than an identity may be; nothing is written.
        """
        identity = check_identity(identity)
        display_name = clean_text(display_name)
        if display_name is not None and len(display_name) > MAX_IDENTITY:
            raise InvalidWrite(f"A display name can have at most {MAX_IDENTITY} characters.")
        identity_hash = await self.vault.identity_hash(identity)
        for _ in range(3):
            found = await self._find_user([identity])
            if found is not None:
                if display_name is not None and display_name != found.display_name:
                    return await self._rename(found, display_name)
                return found
            user_id = new_id()
            sealer = await self.vault.create(user_id)
            now = self._clock()
            add = functools.partial(
                insert_user,
                user_id=user_id,
                identity_hash=identity_hash,
                identity=identity,
                display_name=display_name,
                sealer=sealer,
                now=now,
            )
            created = await self._db.run(add, write=True, what="get_or_create_user")
            if created is not None:
                return created
            await self.vault.destroy([user_id])  # another worker created them first
        raise StorageError(f"get_or_create_user failed: {identity_hash[:12]} keeps changing")

    async def _rename(self, user: UserRecord, display_name: str) -> UserRecord:
        sealer = await self.vault.sealer(user.id)
        sealed = sealer.seal("users", "display_name", (user.id,), display_name)
        stmt = (
            USERS.update()
            .where(USERS.c.id == user.id)
            .values(display_name=sealed, updated_at=self._clock())
        )
        await self._db.run(lambda conn: conn.execute(stmt), write=True, what="get_or_create_user")
        return dataclasses.replace(user, display_name=display_name)

    async def _user_row(self, spellings: Sequence[str]) -> Any:
        """The stored row of the first of ``spellings`` of an identity there is, found by
        its keyed hash; ``None``."""
        hashes = [await self.vault.identity_hash(key) for key in spellings]
        stmt = user_select().add_columns(User.identity_hash).where(User.identity_hash.in_(hashes))
        rows = {row.identity_hash: row for row in await self._rows(stmt, "find_user")}
        return next((rows[h] for h in hashes if h in rows), None)

    async def _find_user(self, spellings: Sequence[str]) -> UserRecord | None:
        row = await self._user_row(spellings)
        return user_record(row, await self.vault.sealer(row.id)) if row is not None else None

    async def find_user(self, identity: str) -> UserRecord | None:
        """The user with ``identity``, or ``None`` (never creates one). A user stored
        before identities were normalised is found by the spelling they were stored with.

        Raises:
            PersonErased: The user is stored, but their data key is destroyed.
        """
        return await self._find_user(identity_keys(identity))

    async def get_user(self, user_id: str) -> UserRecord | None:
        """The user with id ``user_id``, or ``None``."""
        rows = await self._rows(user_select().where(User.id == user_id), "get_user")
        return user_record(rows[0], await self.vault.sealer(user_id)) if rows else None

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
        sealer = await self._owners.of_person(user_id)
        if sealer is None:
            raise StorageError(f"create_session failed: there is no user {user_id[:40]}")
        self._owners.remember(session.id, user_id)
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
        await self._apply(
            ops, "create_session", before=lambda conn: insert_session(conn, session, sealer)
        )
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

        sealer = await self._owners.of_session(session_id)
        if sealer is None:
            raise SessionNotFound(session_id)
        ids = self._phase_ids

        def unit(conn: Connection) -> str:
            if after_message is not None:
                return branch_after_message(
                    conn,
                    self._codec,
                    session_id,
                    after_message,
                    phase_ids=ids,
                    now=now,
                    sealer=sealer,
                )
            assert phase_id is not None
            return branch(
                conn, self._codec, session_id, phase_id, phase_ids=ids, now=now, sealer=sealer
            )

        branch_id = await self._db.run(unit, write=True, what="branch_session")
        self._owners.remember(branch_id, sealer.owner_id)
        found = await self.get_session(branch_id)
        assert found is not None
        return found

    async def delete_session(self, session_id: str) -> bool:
        """Erase a session and every row of it, and what the person's other sessions
        hold of it (:func:`~.lifecycle.erase_sessions`; one transaction); False if
        unknown."""
        now = self._clock()
        owners = await self._owners.of_sessions([session_id], skip_erased=True)
        people = {sealer.owner_id: sealer for sealer in owners.values()}
        deleted = await self._db.run(
            lambda conn: erase_sessions(conn, self._codec, [session_id], now, people),
            write=True,
            what="delete_session",
        )
        return deleted > 0

    async def delete_user(self, identity: str) -> int | None:
        """Erase a person: their data key first — what any copy of the database holds of
        them can then be read by no one —, then the user and all their sessions with every
        row of them (one transaction). Returns how many sessions were erased; ``None`` if
        unknown."""
        row = await self._user_row(identity_keys(identity))
        if row is None:
            return None
        user_id = row.id
        await self.vault.destroy([user_id])
        return await self._db.run(
            lambda conn: delete_user(conn, user_id), write=True, what="delete_user"
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
        users = {row.user_id for row in await self._rows(stmt, "prune_sessions")}
        people = await self.vault.sealers(users)
        now = self._clock()

        def unit(conn: Connection) -> list[SessionRecord]:
            rows = conn.execute(stmt).all()
            if not dry_run:
                erase_sessions(conn, self._codec, [row.id for row in rows], now, people)
            return [
                session_record(row, people[row.user_id])
                if row.user_id in people
                else SessionRecord(row.id, row.user_id, None, *row[3:12])
                for row in rows
            ]

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
        its completed-phase count.

        Raises:
            PersonErased: The user's data key is destroyed.
        """
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
        sealer = await self._owners.of_person(user_id) if rows else None
        if sealer is None:
            return []
        return [
            (str(sid), dict(sealer.open("session_state", "data", (sid,), data) or {}))
            for sid, data in rows
        ]

    async def list_sessions(self, *, limit: int = 50) -> list[SessionRecord]:
        """The most recently updated sessions of every user (the operator's view); those of
        erased people (in a copy of the database) are left out."""
        stmt = recent_sessions_select(self._phase_ids, limit)
        return await self._sessions(stmt, "list_sessions", skip_erased=True)

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
        rows = await self._rows(stmt, "get_phase_outputs")
        sealer = await self._owners.of_session(session_id) if rows else None
        return [output_record(row, sealer) for row in rows] if sealer is not None else []

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
        sealer = await self._owners.of_session(session_id) if rows else None
        return [message_record(row, sealer) for row in rows] if sealer is not None else []

    # -- agent memory steps -------------------------------------------------------------

    async def agent_step_count(self, session_id: str) -> int:
        """How many memory steps are stored for the session (0 for none)."""
        count = await self._read(lambda conn: stored_count(conn, session_id), "agent_step_count")
        return count or 0

    async def save_agent_state(self, session_id: str, steps: Sequence[object]) -> int:
        """Store the steps of the full list not stored yet, reading the stored count in
        the same transaction, under the session's lock; return the count afterwards."""
        steps = list(steps)
        sealers = await self._owners.of_sessions([session_id])

        def unit(conn: Connection) -> int:
            stored = stored_count(conn, session_id, lock=True)
            if stored is None or session_id not in sealers:
                raise SessionNotFound(session_id)
            if len(steps) > stored:
                new = AppendSteps(session_id, stored, tuple(steps[stored:]))
                Plan.of([new], self._codec, self._clock).apply(conn, sealers)
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
        sealer = await self._owners.of_session(session_id) if rows else None
        return await self._decode(sealer, session_id, rows, first, end) if sealer else []

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
        sealer = await self._owners.of_session(session_id) if rows else None
        steps = await self._decode(sealer, session_id, rows, first, end) if sealer else []
        if not steps:
            return StepPage(first, [], [], [])
        return StepPage(first, steps, message_ids, phase_ids)

    # -- zoned state ----------------------------------------------------------------------

    async def get_person(self, user_id: str) -> PersonRecord:
        """What the user agreed coach may remember (step 0 and no facts before any write)."""
        sealer = await self._owners.of_person(user_id)
        if sealer is None:
            return PersonRecord(user_id, 0)
        return await self._read(lambda conn: fetch_person(conn, user_id, sealer), "get_person")

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
        sealer = await self._owners.of_person(user_id)
        if sealer is None:
            raise InvalidWrite(f"No user {user_id[:40]}: nothing was remembered.")
        return await self._db.run(
            lambda conn: write_person(conn, user_id, value, delta, expected_step, now, sealer),
            write=True,
            what="update_person",
        )

    async def get_person_deltas(self, user_id: str) -> list[Delta]:
        """The person record's deltas in step order."""
        sealer = await self._owners.of_person(user_id)
        if sealer is None:
            return []
        return await self._read(
            lambda conn: person_deltas(conn, user_id, sealer), "get_person_deltas"
        )

    async def get_state(self, session_id: str) -> StateRecord:
        """The session's zoned state (step 0 and empty zones before any write)."""
        sealer = await self._owners.of_session(session_id)
        if sealer is None:
            return StateRecord(session_id, 0)
        return await self._read(lambda conn: fetch_state(conn, session_id, sealer), "get_state")

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
        rows = await self._rows(stmt, "get_deltas")
        sealer = await self._owners.of_session(session_id) if rows else None
        if sealer is None:
            return []
        return [delta_record(row, sealer, ("state_deltas", session_id)) for row in rows]

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
        # The caller's key, and the owner in the query: a foreign id reads no row, as a
        # missing one does.
        sealer = await self._owners.of_person(user_id)
        if sealer is None:
            raise SessionNotFound(session_id)
        loaded = await self._read(
            lambda conn: read_resume(
                conn,
                session_id,
                user_id=user_id,
                sealer=sealer,
                phase_ids=self._phase_ids,
                max_pairs=max_pairs,
                max_steps=max_steps,
            ),
            "resume_session",
        )
        memory = await self._decode(
            sealer, session_id, list(loaded.step_rows), loaded.steps_from, loaded.stored_steps
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
    master_keys: MasterKeys,
    keys_url: str | URL | None = None,
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
        master_keys: The master keys that wrap the people's data keys
            (``Settings.master_keys``).
        keys_url: The key store (``COACH_KEYS_URL``; default: a SQLite file beside a
            SQLite database, see :func:`~.keystore.default_keys_url`).
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
        ConfigError: ``secret`` is not bytes (a str is a mistake: say where it happens),
            or the key store is not named, or is the data database.
    """
    if not isinstance(secret, bytes):
        raise ConfigError(
            f"open_repository: secret must be bytes (Settings.memory_secret), "
            f"not {type(secret).__name__}"
        )
    vault = Vault.open(url, master_keys=master_keys, keys_url=keys_url)
    try:
        if create_schema:
            await upgrade(url, secret=secret, vault=vault)
        elif check_schema:
            await require_current(url)
    except BaseException:
        await vault.aclose()
        raise
    database = Database(url, pool_size=pool_size, max_overflow=max_overflow, timeout=call_timeout)
    return Repository(database, secret=secret, vault=vault, phase_ids=phase_ids, clock=clock)
