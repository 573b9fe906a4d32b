"""The one repository of coach: users, sessions, phase outputs, conversation, memory, state.

Every public method is a coroutine that runs in its own ``AsyncSession`` and its own
transaction (:func:`~coach.persistence.engine.run_transaction`) and returns frozen
records, never ORM objects. Anything that must be atomic — a zone and its delta — is one
method. Writers that need an order lock the row that orders them inside the write
transaction: ``session_state`` for state steps, ``sessions`` for memory steps
(``SELECT ... FOR NO KEY UPDATE`` on PostgreSQL; ``BEGIN IMMEDIATE`` on SQLite), and
UNIQUE constraints back it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, TypeAlias, TypeVar, cast, overload

from sqlalchemy import ColumnElement, Select, Table, func, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from ..errors import (
    CorruptBlob,
    InvalidRole,
    InvalidWrite,
    NothingToResume,
    SessionCompleted,
    SessionFailed,
    SessionNotFound,
    StaleWrite,
)
from ..state.resume import (
    DEFAULT_MAX_PAIRS,
    ResumeContext,
    completed_phase_ids,
    next_phase_id,
    reconstruct_history,
)
from ..state.zones import Action, Delta, DeltaSpec, ResultMeta, Zone
from .batch import (
    AppendStepsOp,
    MessageOp,
    PhaseOutputOp,
    SessionUpdateOp,
    WriteOpLike,
    ZoneWriteOp,
)
from .codec import EncodedStep, StepCodec
from .engine import create_engine, run_transaction, sessionmakers
from .migrate import upgrade
from .records import (
    MessageRecord,
    PhaseOutputRecord,
    ResumeResult,
    SessionRecord,
    StateRecord,
    UserRecord,
)
from .schema import (
    MESSAGE_ROLES,
    PHASE_STATUSES,
    SESSION_STATUSES,
    AgentStep,
    PhaseOutput,
    SessionConversation,
    SessionRow,
    SessionState,
    StateDelta,
    User,
    new_id,
    utcnow,
)

__all__ = ["DEFAULT_PHASE_IDS", "Repository", "open_repository"]

log = logging.getLogger("coach.persistence")

T = TypeVar("T")
_Row: TypeAlias = Row[*tuple[Any, ...]]
_Select: TypeAlias = Select[*tuple[Any, ...]]

DEFAULT_PHASE_IDS: Final[tuple[str, ...]] = (
    "challenge",
    "empathize",
    "define",
    "ideate",
    "strategy",
    "evaluation",
)
"""The suggested phase order of SPEC §3; the worker passes its manifest's order."""

_COMPLETED: Final = "completed"


@dataclass(frozen=True, slots=True)
class _WindowOutput:
    phase_id: str
    status: str
    system_prompt: str | None
    user_input: str | None
    output: str | None


@dataclass(frozen=True, slots=True)
class _WindowMessage:
    role: str
    content: str
    phase_id: str | None
    interrupted: bool


_AGENT_STEPS: Final = cast(Table, AgentStep.__table__)
_CONVERSATIONS: Final = cast(Table, SessionConversation.__table__)
_SESSION_COLUMNS = (
    SessionRow.id,
    SessionRow.user_id,
    SessionRow.design_challenge,
    SessionRow.status,
    SessionRow.current_agent,
    SessionRow.current_phase_id,
    SessionRow.created_at,
    SessionRow.updated_at,
    SessionRow.room,
)
_OUTPUT_COLUMNS = (
    PhaseOutput.id,
    PhaseOutput.session_id,
    PhaseOutput.phase_id,
    PhaseOutput.phase_name,
    PhaseOutput.status,
    PhaseOutput.system_prompt,
    PhaseOutput.user_input,
    PhaseOutput.output,
    PhaseOutput.error,
    PhaseOutput.created_at,
    PhaseOutput.updated_at,
)
_MESSAGE_COLUMNS = (
    SessionConversation.id,
    SessionConversation.session_id,
    SessionConversation.phase_id,
    SessionConversation.role,
    SessionConversation.content,
    SessionConversation.interrupted,
    SessionConversation.created_at,
)
_STATE_COLUMNS = (
    SessionState.session_id,
    SessionState.step,
    SessionState.data,
    SessionState.template,
    SessionState.view,
)
_DELTA_COLUMNS = (
    StateDelta.step,
    StateDelta.turn_id,
    StateDelta.trigger,
    StateDelta.source,
    StateDelta.actor_id,
    StateDelta.delta_type,
    StateDelta.path,
    StateDelta.action,
    StateDelta.result,
)
_STEP_COLUMNS = (
    AgentStep.seq,
    AgentStep.codec,
    AgentStep.version,
    AgentStep.signature,
    AgentStep.payload,
)


DEFAULT_MAX_STEPS: Final = 500
"""Memory steps a resume loads at most (the newest ones)."""

_SESSION_FIELDS: Final = frozenset(
    {"status", "design_challenge", "current_agent", "current_phase_id", "room"}
)


def _check_status(status: str, allowed: tuple[str, ...], what: str) -> None:
    if status not in allowed:
        raise InvalidWrite(f"Invalid {what} status: {status}. Must be one of {', '.join(allowed)}")


@overload
def clean_text(text: str) -> str: ...
@overload
def clean_text(text: None) -> None: ...
def clean_text(text: str | None) -> str | None:
    """Text as every database stores it: no NUL bytes, no lone surrogates (U+FFFD instead).

    A local model's stream can split an emoji into halves; such text must still be kept.
    """
    if text is None:
        return None
    cleaned = text.replace("\x00", "\ufffd")
    return cleaned.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _json_object(value: dict[str, Any], zone: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidWrite(f"the {zone} zone must be a JSON object (a dict)")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidWrite(f"the {zone} zone is not JSON-serializable: {exc}") from exc
    return value


def _pickle_all(codec: StepCodec, steps: Sequence[object], first: int) -> list[bytes]:
    payloads = []
    for index, step in enumerate(steps):
        try:
            payloads.append(codec.dumps(step))
        except Exception as exc:  # pickle raises PicklingError, TypeError, AttributeError
            raise InvalidWrite(f"memory step {first + index} cannot be pickled: {exc}") from exc
    return payloads


def _session_record(row: _Row) -> SessionRecord:
    return SessionRecord(**row._asdict())


def _delta_record(row: _Row) -> Delta:
    return Delta(
        step=row.step,
        turn_id=row.turn_id,
        trigger=row.trigger,
        source=row.source,
        actor_id=row.actor_id,
        delta_type=row.delta_type,
        path=row.path,
        action=Action.model_validate(row.action or {}),
        result=ResultMeta.model_validate(row.result or {}),
    )


@dataclass
class _Batch:
    """A write batch grouped by kind, validated before any database work."""

    session_ids: list[str] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    appends: dict[str, tuple[int, list[object]]] = field(default_factory=dict)
    phase_outputs: list[Any] = field(default_factory=list)
    session_updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    zone_writes: list[Callable[[AsyncSession], Awaitable[object]]] = field(default_factory=list)

    @classmethod
    def plan(cls, ops: Sequence[WriteOpLike], repo: Repository) -> _Batch:
        batch = cls()
        for op in ops:
            sid = getattr(op, "session_id", None)
            if not isinstance(sid, str):
                raise InvalidWrite(f"unknown write op: {type(op).__name__}")
            if sid not in batch.session_ids:
                batch.session_ids.append(sid)
            batch._add(op, sid, repo)
        return batch

    def _add(self, op: WriteOpLike, sid: str, repo: Repository) -> None:
        if isinstance(op, MessageOp):
            if op.role not in MESSAGE_ROLES:
                raise InvalidRole(op.role)
            if not isinstance(op.content, str):
                raise InvalidWrite("message content must be a string")
            self.messages.append(
                {
                    "session_id": sid,
                    "phase_id": op.phase_id,
                    "role": op.role,
                    "content": clean_text(op.content),
                    "interrupted": bool(op.interrupted),
                }
            )
        elif isinstance(op, AppendStepsOp):
            if op.start < 0:
                raise InvalidWrite("start must not be negative")
            if sid not in self.appends:
                self.appends[sid] = (op.start, list(op.steps))
                return
            start, steps = self.appends[sid]
            if op.start != start + len(steps):
                raise InvalidWrite(f"memory steps of session {sid} are not contiguous in a batch")
            steps.extend(op.steps)
        elif isinstance(op, PhaseOutputOp):
            _check_status(op.status, PHASE_STATUSES, "phase")
            self.phase_outputs.append(
                repo._phase_output_upsert(
                    sid,
                    op.phase_id,
                    op.phase_name,
                    op.status,
                    op.system_prompt,
                    op.user_input,
                    op.output,
                    op.error,
                )
            )
        elif isinstance(op, ZoneWriteOp):
            zone = Zone(op.zone) if op.zone is not None else None
            value = None if zone is None or op.value is None else _json_object(op.value, zone.value)
            self.zone_writes.append(repo._zoned_op(sid, zone, value, op.delta, op.expected_step))
        elif isinstance(op, SessionUpdateOp):
            values = repo._session_values(op.fields)
            values.pop("updated_at", None)
            self.session_updates[sid] = {**self.session_updates.get(sid, {}), **values}
        else:
            raise InvalidWrite(f"unknown write op: {type(op).__name__}")


class Repository:
    """Async access to everything coach stores; safe to share between tasks.

    Args:
        engine: The engine (see :func:`~coach.persistence.engine.create_engine`).
        secret: The HMAC key of memory steps (``Settings.memory_secret``).
        phase_ids: The manifest's phase ids, in order; used for progress and resume.
        clock: Returns the current UTC time; tests pass a fixed clock.
        owns_engine: Dispose of the engine in :meth:`aclose`.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        secret: bytes,
        phase_ids: Sequence[str] = DEFAULT_PHASE_IDS,
        clock: Callable[[], datetime] = utcnow,
        owns_engine: bool = True,
    ) -> None:
        if not phase_ids:
            raise ValueError("phase_ids must name at least one phase")
        self._engine = engine
        self._dialect = engine.dialect.name
        self._read_maker, self._write_maker = sessionmakers(engine)
        self._codec = StepCodec(secret)
        self._phase_ids = tuple(phase_ids)
        self._clock = clock
        self._owns_engine = owns_engine

    @property
    def phase_ids(self) -> tuple[str, ...]:
        """The manifest's phase ids, in order."""
        return self._phase_ids

    @property
    def engine(self) -> AsyncEngine:
        """The engine this repository runs on."""
        return self._engine

    async def aclose(self) -> None:
        """Close the repository (disposes of the engine's connections if it owns them)."""
        if self._owns_engine:
            await self._engine.dispose()

    async def __aenter__(self) -> Repository:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- plumbing -------------------------------------------------------------------

    async def _read(self, op: Callable[[AsyncSession], Awaitable[T]], what: str) -> T:
        return await run_transaction(self._read_maker, op, what=what)

    async def _write(self, op: Callable[[AsyncSession], Awaitable[T]], what: str) -> T:
        return await run_transaction(self._write_maker, op, what=what)

    def _insert(self, entity: Any) -> Any:
        return pg_insert(entity) if self._dialect == "postgresql" else sqlite_insert(entity)

    def _completed_count(self) -> ColumnElement[int]:
        return (
            select(func.count())
            .where(
                PhaseOutput.session_id == SessionRow.id,
                PhaseOutput.status == _COMPLETED,
                PhaseOutput.phase_id.in_(self._phase_ids),
            )
            .correlate(SessionRow)
            .scalar_subquery()
        )

    def _session_select(self) -> _Select:
        return select(*_SESSION_COLUMNS, self._completed_count().label("completed_phases"))

    @staticmethod
    async def _require_session(s: AsyncSession, session_id: str) -> None:
        found = await s.scalar(select(SessionRow.id).where(SessionRow.id == session_id))
        if found is None:
            raise SessionNotFound(session_id)

    @staticmethod
    async def _lock_session(s: AsyncSession, session_id: str) -> None:
        stmt = select(SessionRow.id).where(SessionRow.id == session_id)
        if await s.scalar(stmt.with_for_update(key_share=True)) is None:
            raise SessionNotFound(session_id)

    async def _lock_state(self, s: AsyncSession, session_id: str) -> int:
        """Lock the session's state row (creating it at step 0 if needed); return its step."""
        stmt = (
            select(SessionState.step)
            .where(SessionState.session_id == session_id)
            .with_for_update(key_share=True)
        )
        step = await s.scalar(stmt)
        if step is not None:
            return step
        await self._require_session(s, session_id)
        now = self._clock()
        await s.execute(
            self._insert(SessionState)
            .values(
                session_id=session_id,
                step=0,
                data={},
                template={},
                view={},
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_nothing(index_elements=["session_id"])
        )
        step = await s.scalar(stmt)
        assert step is not None
        return step

    # -- users and sessions -----------------------------------------------------------

    async def get_or_create_user(
        self, identity: str, display_name: str | None = None
    ) -> UserRecord:
        """Return the user with ``identity``, creating it if needed (race-safe).

        Args:
            identity: The user's key: the LiveKit participant identity, or the
                ``--user`` name in ``chat``/``console``.
            display_name: The spoken name; replaces the stored one when given.
        """
        if not identity:
            raise InvalidWrite("identity must not be empty")
        now = self._clock()
        stmt = self._insert(User).values(
            id=new_id(),
            identity=identity,
            display_name=display_name,
            created_at=now,
            updated_at=now,
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=["identity"],
            set_={"display_name": func.coalesce(stmt.excluded.display_name, User.display_name)},
        ).returning(User.id, User.identity, User.display_name, User.created_at)

        async def op(s: AsyncSession) -> UserRecord:
            return UserRecord(*(await s.execute(stmt)).one())

        return await self._write(op, "get_or_create_user")

    async def create_session(
        self, user_id: str, design_challenge: str | None = None, *, room: str | None = None
    ) -> SessionRecord:
        """Create an ``in_progress`` session (and its empty state) for ``user_id``.

        ``room`` is the LiveKit room it runs in (see :meth:`find_room_session`).
        """
        now = self._clock()
        session_id = new_id()

        async def op(s: AsyncSession) -> SessionRecord:
            await s.execute(
                insert(SessionRow).values(
                    id=session_id,
                    user_id=user_id,
                    design_challenge=design_challenge,
                    status="in_progress",
                    room=room,
                    created_at=now,
                    updated_at=now,
                )
            )
            await s.execute(
                insert(SessionState).values(
                    session_id=session_id,
                    step=0,
                    data={},
                    template={},
                    view={},
                    created_at=now,
                    updated_at=now,
                )
            )
            return SessionRecord(
                session_id, user_id, design_challenge, "in_progress", None, None, now, now, 0, room
            )

        return await self._write(op, "create_session")

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """Return the session, or ``None`` if there is none with that id."""

        async def op(s: AsyncSession) -> SessionRecord | None:
            row = (
                await s.execute(self._session_select().where(SessionRow.id == session_id))
            ).one_or_none()
            return None if row is None else _session_record(row)

        return await self._read(op, "get_session")

    async def get_user_sessions(self, user_id: str) -> list[SessionRecord]:
        """Return the user's sessions, newest first, each with its completed-phase count."""
        stmt = (
            self._session_select()
            .where(SessionRow.user_id == user_id)
            .order_by(SessionRow.created_at.desc(), SessionRow.id.desc())
        )

        async def op(s: AsyncSession) -> list[SessionRecord]:
            return [_session_record(row) for row in await s.execute(stmt)]

        return await self._read(op, "get_user_sessions")

    async def list_sessions(self, *, limit: int = 50) -> list[SessionRecord]:
        """Return the most recently updated sessions of every user (the operator's view)."""
        stmt = (
            self._session_select()
            .order_by(SessionRow.updated_at.desc(), SessionRow.id.desc())
            .limit(limit)
        )

        async def op(s: AsyncSession) -> list[SessionRecord]:
            return [_session_record(row) for row in await s.execute(stmt)]

        return await self._read(op, "list_sessions")

    async def find_room_session(self, user_id: str, room: str) -> SessionRecord | None:
        """The user's most recent in-progress session in ``room`` (a reconnect continues it)."""
        stmt = (
            self._session_select()
            .where(
                SessionRow.user_id == user_id,
                SessionRow.room == room,
                SessionRow.status == "in_progress",
            )
            .order_by(SessionRow.updated_at.desc(), SessionRow.id.desc())
            .limit(1)
        )

        async def op(s: AsyncSession) -> SessionRecord | None:
            row = (await s.execute(stmt)).one_or_none()
            return _session_record(row) if row is not None else None

        return await self._read(op, "find_room_session")

    async def find_user(self, identity: str) -> UserRecord | None:
        """Return the user with this identity, or ``None`` (never creates one)."""
        stmt = select(User.id, User.identity, User.display_name, User.created_at).where(
            User.identity == identity
        )

        async def op(s: AsyncSession) -> UserRecord | None:
            row = (await s.execute(stmt)).one_or_none()
            return UserRecord(*row) if row is not None else None

        return await self._read(op, "find_user")

    async def update_session(
        self,
        session_id: str,
        *,
        status: str | None = None,
        design_challenge: str | None = None,
        current_agent: str | None = None,
        current_phase_id: str | None = None,
        room: str | None = None,
    ) -> SessionRecord:
        """Change the given fields of a session (``None`` leaves a field) and bump ``updated_at``.

        Raises:
            InvalidWrite: If ``status`` is not in_progress, completed or failed.
            SessionNotFound: If there is no such session.
        """
        fields = {
            name: value
            for name, value in (
                ("status", status),
                ("design_challenge", design_challenge),
                ("current_agent", current_agent),
                ("current_phase_id", current_phase_id),
                ("room", room),
            )
            if value is not None
        }
        values = self._session_values(fields)

        async def op(s: AsyncSession) -> SessionRecord:
            await self._apply_session_update(s, session_id, values)
            row = (await s.execute(self._session_select().where(SessionRow.id == session_id))).one()
            return _session_record(row)

        return await self._write(op, "update_session")

    def _session_values(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(fields) - _SESSION_FIELDS
        if unknown:
            raise InvalidWrite(f"unknown session fields: {', '.join(sorted(unknown))}")
        if fields.get("status") is not None:
            _check_status(fields["status"], SESSION_STATUSES, "session")
        return {**fields, "updated_at": self._clock()}

    @staticmethod
    async def _apply_session_update(
        s: AsyncSession, session_id: str, values: dict[str, Any]
    ) -> None:
        result = await s.execute(
            update(SessionRow)
            .where(SessionRow.id == session_id)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if getattr(result, "rowcount", 0) == 0:
            raise SessionNotFound(session_id)

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
        """Insert or update the output of one phase (SPEC §4.2).

        ``system_prompt``, ``user_input`` and ``output`` keep their stored value when
        given as ``None``; ``status`` and ``error`` always take the new value.

        Raises:
            InvalidWrite: If ``status`` is not running, completed or failed.
            SessionNotFound: If there is no such session.
        """
        _check_status(status, PHASE_STATUSES, "phase")
        stmt = self._phase_output_upsert(
            session_id, phase_id, phase_name, status, system_prompt, user_input, output, error
        )

        async def op(s: AsyncSession) -> PhaseOutputRecord:
            await self._require_session(s, session_id)
            return PhaseOutputRecord(*(await s.execute(stmt)).one())

        return await self._write(op, "save_phase_output")

    def _phase_output_upsert(
        self,
        session_id: str,
        phase_id: str,
        phase_name: str,
        status: str,
        system_prompt: str | None,
        user_input: str | None,
        output: str | None,
        error: str | None,
    ) -> Any:
        now = self._clock()
        stmt = self._insert(PhaseOutput).values(
            id=new_id(),
            session_id=session_id,
            phase_id=phase_id,
            phase_name=phase_name,
            status=status,
            system_prompt=clean_text(system_prompt),
            user_input=clean_text(user_input),
            output=clean_text(output),
            error=clean_text(error),
            created_at=now,
            updated_at=now,
        )
        new = stmt.excluded
        return stmt.on_conflict_do_update(
            index_elements=["session_id", "phase_id"],
            set_={
                "phase_name": new.phase_name,
                "status": new.status,
                "system_prompt": func.coalesce(new.system_prompt, PhaseOutput.system_prompt),
                "user_input": func.coalesce(new.user_input, PhaseOutput.user_input),
                "output": func.coalesce(new.output, PhaseOutput.output),
                "error": new.error,
                "updated_at": new.updated_at,
            },
        ).returning(*_OUTPUT_COLUMNS)

    async def get_phase_outputs(
        self, session_id: str, *, include_prompts: bool = True
    ) -> list[PhaseOutputRecord]:
        """Return the session's phase outputs ordered by ``created_at`` (then id).

        Args:
            session_id: The session.
            include_prompts: Read ``system_prompt`` and ``user_input`` (they can be
                large); when False they are ``None`` in the records.
        """
        columns = (
            _OUTPUT_COLUMNS
            if include_prompts
            else tuple(
                c
                for c in _OUTPUT_COLUMNS
                if c not in (PhaseOutput.system_prompt, PhaseOutput.user_input)
            )
        )
        stmt = (
            select(*columns)
            .where(PhaseOutput.session_id == session_id)
            .order_by(PhaseOutput.created_at, PhaseOutput.id)
        )

        async def op(s: AsyncSession) -> list[PhaseOutputRecord]:
            rows = (await s.execute(stmt)).mappings().all()
            return [
                PhaseOutputRecord(**{"system_prompt": None, "user_input": None, **row})
                for row in rows
            ]

        return await self._read(op, "get_phase_outputs")

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
        """Append one message to the session's conversation and return its id.

        Raises:
            InvalidRole: If ``role`` is not user, assistant or system (nothing is written).
            SessionNotFound: If there is no such session.
        """
        stmt = self._message_insert(session_id, role, content, phase_id, interrupted)

        async def op(s: AsyncSession) -> int:
            await self._require_session(s, session_id)
            return int((await s.execute(stmt)).scalar_one())

        return await self._write(op, "add_session_message")

    def _message_insert(
        self, session_id: str, role: str, content: str, phase_id: str | None, interrupted: bool
    ) -> Any:
        if role not in MESSAGE_ROLES:
            raise InvalidRole(role)
        if not isinstance(content, str):
            raise InvalidWrite("message content must be a string")
        return (
            insert(SessionConversation)
            .values(
                session_id=session_id,
                phase_id=phase_id,
                role=role,
                content=clean_text(content),
                interrupted=bool(interrupted),
                created_at=self._clock(),
            )
            .returning(SessionConversation.id)
        )

    async def append_conversation(
        self, session_id: str, role: str, content: str, *, phase_id: str | None = None
    ) -> int:
        """The conversation zone's append: :meth:`add_session_message` (no delta, no step)."""
        return await self.add_session_message(session_id, role, content, phase_id=phase_id)

    async def get_session_conversation(
        self, session_id: str, *, phase_id: str | None = None
    ) -> list[MessageRecord]:
        """Return the conversation in time order (ties by insertion), optionally of one phase."""
        stmt = select(*_MESSAGE_COLUMNS).where(SessionConversation.session_id == session_id)
        if phase_id is not None:
            stmt = stmt.where(SessionConversation.phase_id == phase_id)
        stmt = stmt.order_by(SessionConversation.created_at, SessionConversation.id)

        async def op(s: AsyncSession) -> list[MessageRecord]:
            return [MessageRecord(*row) for row in await s.execute(stmt)]

        return await self._read(op, "get_session_conversation")

    # -- agent memory steps -------------------------------------------------------------

    @staticmethod
    async def _stored_steps(s: AsyncSession, session_id: str) -> int:
        top = await s.scalar(
            select(func.max(AgentStep.seq)).where(AgentStep.session_id == session_id)
        )
        return 0 if top is None else int(top) + 1

    def _step_rows(
        self, session_id: str, payloads: Sequence[bytes], start: int
    ) -> list[dict[str, Any]]:
        now = self._clock()
        rows = []
        for offset, payload in enumerate(payloads):
            encoded = self._codec.sign(session_id, start + offset, payload)
            rows.append(
                {
                    "session_id": session_id,
                    "seq": encoded.seq,
                    "codec": encoded.codec,
                    "version": encoded.version,
                    "signature": encoded.signature,
                    "payload": encoded.payload,
                    "created_at": now,
                }
            )
        return rows

    async def agent_step_count(self, session_id: str) -> int:
        """Return how many memory steps are stored for the session."""

        async def op(s: AsyncSession) -> int:
            return await self._stored_steps(s, session_id)

        return await self._read(op, "agent_step_count")

    async def save_agent_state(self, session_id: str, steps: Sequence[object]) -> int:
        """Store the session's memory steps, given as the full list so far.

        Only ``steps[stored:]`` are pickled and written (append-only, one row per step);
        pickling runs in a worker thread.

        Returns:
            The number of steps stored afterwards.

        Raises:
            SessionNotFound: If there is no such session.
            InvalidWrite: If a new step cannot be pickled (nothing is written).
        """
        steps = list(steps)
        known = await self.agent_step_count(session_id)
        payloads = await asyncio.to_thread(_pickle_all, self._codec, steps[known:], known)

        async def op(s: AsyncSession) -> int:
            await self._lock_session(s, session_id)
            stored = await self._stored_steps(s, session_id)
            if len(steps) <= stored:
                return stored
            if stored < known:  # rows vanished meanwhile: pickle the gap here
                fresh = _pickle_all(self._codec, steps[stored:known], stored) + payloads
            else:
                fresh = payloads[stored - known :]
            await s.execute(insert(AgentStep), self._step_rows(session_id, fresh, stored))
            return len(steps)

        return await self._write(op, "save_agent_state")

    async def append_agent_steps(
        self, session_id: str, steps: Sequence[object], *, start: int
    ) -> int:
        """Store ``steps`` as memory steps ``start, start + 1, ...``.

        Returns:
            The number of steps stored afterwards (``start + len(steps)``).

        Raises:
            StaleWrite: If the stored count is not ``start`` (another writer got there).
            SessionNotFound: If there is no such session.
            InvalidWrite: If a step cannot be pickled (nothing is written).
        """
        if start < 0:
            raise InvalidWrite("start must not be negative")
        payloads = await asyncio.to_thread(_pickle_all, self._codec, list(steps), start)

        async def op(s: AsyncSession) -> int:
            return await self._append_steps(s, session_id, start, payloads)

        return await self._write(op, "append_agent_steps")

    async def _append_steps(
        self, s: AsyncSession, session_id: str, start: int, payloads: Sequence[bytes]
    ) -> int:
        await self._lock_session(s, session_id)
        stored = await self._stored_steps(s, session_id)
        if stored != start:
            raise StaleWrite(f"Session {session_id} has {stored} memory steps stored, not {start}")
        if payloads:
            await s.execute(insert(AgentStep), self._step_rows(session_id, payloads, start))
        return start + len(payloads)

    async def write_batch(self, ops: Sequence[WriteOpLike]) -> None:
        """Apply a batch of writes in ONE transaction (the recorder's group commit).

        Each op is a message (:class:`~.batch.MessageOp`), a phase output
        (:class:`~.batch.PhaseOutputOp`), a session update
        (:class:`~.batch.SessionUpdateOp`), memory steps (:class:`~.batch.AppendStepsOp`)
        or a zoned state write (:class:`~.batch.ZoneWriteOp`), with the semantics of the
        single-write method of the same name. Ops of one kind keep their order; the batch
        costs a few statements, not a few per op: one existence check (and lock) of the
        sessions, one insert of all messages, one of all steps, one update per session.
        Steps are pickled in a worker thread before the transaction starts. Either every
        op is written or none is.

        Raises:
            InvalidRole: A message with a bad role (nothing is written).
            InvalidWrite: Bad input in any op (nothing is written).
            SessionNotFound: An op names an unknown session (nothing is written).
            StaleWrite: Memory steps whose ``start`` is not the stored count, or a zone
                write whose ``expected_step`` is not the stored step.
            StorageError: The database failed.
        """
        if not ops:
            return
        batch = _Batch.plan(ops, self)
        step_rows = await asyncio.to_thread(self._encode_appends, batch.appends)
        now = self._clock()
        messages = [{**row, "created_at": now} for row in batch.messages]

        async def run(s: AsyncSession) -> None:
            # Core statements on the session's connection: the ORM's bulk machinery costs
            # more CPU than the database does for these plain inserts.
            conn = await s.connection()
            await self._lock_sessions(conn, batch.session_ids, lock=bool(batch.appends))
            if batch.appends:
                stored = await self._stored_steps_of(conn, list(batch.appends))
                for sid, (start, _) in batch.appends.items():
                    if stored.get(sid, 0) != start:
                        raise StaleWrite(
                            f"Session {sid} has {stored.get(sid, 0)} memory steps stored, "
                            f"not {start}"
                        )
                await conn.execute(insert(_AGENT_STEPS), step_rows)
            if messages:
                await conn.execute(insert(_CONVERSATIONS), messages)
            for stmt in batch.phase_outputs:
                await s.execute(stmt)
            for sid, values in batch.session_updates.items():
                await self._apply_session_update(s, sid, {**values, "updated_at": now})
            for zoned in batch.zone_writes:
                await zoned(s)

        await self._write(run, "write_batch")

    def _encode_appends(
        self, appends: Mapping[str, tuple[int, list[object]]]
    ) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for sid, (start, steps) in appends.items():
            rows += self._step_rows(sid, _pickle_all(self._codec, steps, start), start)
        return rows

    async def _lock_sessions(
        self, conn: AsyncConnection, session_ids: Sequence[str], *, lock: bool
    ) -> None:
        """Check that every session exists (locking them, in id order, when ``lock``)."""
        stmt = select(SessionRow.id).where(SessionRow.id.in_(sorted(session_ids)))
        if lock:
            stmt = stmt.order_by(SessionRow.id).with_for_update(key_share=True)
        found = set(await conn.scalars(stmt))
        for sid in session_ids:
            if sid not in found:
                raise SessionNotFound(sid)

    @staticmethod
    async def _stored_steps_of(conn: AsyncConnection, session_ids: Sequence[str]) -> dict[str, int]:
        rows = await conn.execute(
            select(AgentStep.session_id, func.max(AgentStep.seq))
            .where(AgentStep.session_id.in_(session_ids))
            .group_by(AgentStep.session_id)
        )
        return {sid: int(top) + 1 for sid, top in rows}

    def _decode_all(self, session_id: str, rows: Sequence[_Row]) -> list[object]:
        steps = []
        first = rows[0].seq if rows else 0
        for index, row in enumerate(rows, start=first):
            if row.seq != index:
                raise CorruptBlob(f"session {session_id}: memory step {index} is missing")
            steps.append(self._codec.decode(session_id, EncodedStep(**row._asdict())))
        return steps

    async def _decode_or_empty(self, session_id: str, rows: Sequence[_Row]) -> list[object]:
        if not rows:
            return []
        try:
            return await asyncio.to_thread(self._decode_all, session_id, rows)
        except CorruptBlob as exc:
            log.error(
                "stored memory steps cannot be loaded; falling back to reconstruction: %s",
                exc,
                extra={"session_id": session_id},
            )
            return []

    @staticmethod
    def _steps_select(session_id: str) -> _Select:
        return (
            select(*_STEP_COLUMNS).where(AgentStep.session_id == session_id).order_by(AgentStep.seq)
        )

    async def load_agent_state(self, session_id: str) -> list[object]:
        """Return the session's memory steps in order.

        Returns:
            The steps; ``[]`` when there are none, and ``[]`` (with an error logged on
            ``coach.persistence``) when any step is corrupt, tampered with or foreign.
            Nothing of a rejected blob is ever executed.
        """

        async def op(s: AsyncSession) -> Sequence[_Row]:
            return list((await s.execute(self._steps_select(session_id))).all())

        rows = await self._read(op, "load_agent_state")
        return await self._decode_or_empty(session_id, rows)

    # -- zoned state ----------------------------------------------------------------------

    async def get_state(self, session_id: str) -> StateRecord:
        """Return the session's zoned state (step 0 and empty zones before any write)."""

        async def op(s: AsyncSession) -> StateRecord:
            row = (
                await s.execute(
                    select(*_STATE_COLUMNS).where(SessionState.session_id == session_id)
                )
            ).one_or_none()
            return StateRecord(session_id, 0) if row is None else StateRecord(*row)

        return await self._read(op, "get_state")

    async def _zoned_write(
        self,
        session_id: str,
        zone: Zone | None,
        value: dict[str, Any] | None,
        delta: DeltaSpec,
        expected_step: int | None,
    ) -> tuple[StateRecord, Delta]:
        op = self._zoned_op(session_id, zone, value, delta, expected_step)
        what = f"update_{zone.value}" if zone is not None else "add_delta"
        return await self._write(op, what)

    def _zoned_op(
        self,
        session_id: str,
        zone: Zone | None,
        value: dict[str, Any] | None,
        delta: DeltaSpec,
        expected_step: int | None,
    ) -> Callable[[AsyncSession], Awaitable[tuple[StateRecord, Delta]]]:
        """The transaction body of a zoned write: lock the state row, write zone + delta."""
        if not isinstance(delta, DeltaSpec):
            raise TypeError("delta must be a DeltaSpec")
        action = delta.action.model_dump(mode="json")
        result = delta.result.model_dump(mode="json")

        async def op(s: AsyncSession) -> tuple[StateRecord, Delta]:
            step = await self._lock_state(s, session_id)
            if expected_step is not None and expected_step != step:
                raise StaleWrite(
                    f"Session {session_id} state is at step {step}, not {expected_step}"
                )
            new_step = step + 1
            now = self._clock()
            values: dict[str, Any] = {"step": new_step, "updated_at": now}
            if zone is not None:
                values[zone.value] = value
            row = (
                await s.execute(
                    update(SessionState)
                    .where(SessionState.session_id == session_id, SessionState.step == step)
                    .values(**values)
                    .returning(*_STATE_COLUMNS)
                    .execution_options(synchronize_session=False)
                )
            ).one()
            recorded = delta.at_step(new_step)
            try:
                await s.execute(
                    insert(StateDelta).values(
                        session_id=session_id,
                        step=new_step,
                        turn_id=recorded.turn_id,
                        trigger=recorded.trigger,
                        source=recorded.source,
                        actor_id=recorded.actor_id,
                        delta_type=recorded.delta_type,
                        path=recorded.path,
                        action=action,
                        result=result,
                        created_at=now,
                    )
                )
            except IntegrityError as exc:
                raise StaleWrite(
                    f"Session {session_id} already has a delta at step {new_step}"
                ) from exc
            return StateRecord(*row), recorded

        return op

    async def update_data(
        self,
        session_id: str,
        data: dict[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[StateRecord, Delta]:
        """Replace the data zone and record its delta, atomically; bumps the step.

        Args:
            session_id: The session.
            data: The new data zone (a JSON object).
            delta: Why it changed; its step is assigned here.
            expected_step: The step the writer last saw; a different stored step
                raises :class:`~coach.errors.StaleWrite` and writes nothing.

        Returns:
            The state after the write and the recorded delta (``delta.step == state.step``).
        """
        return await self._zoned_write(
            session_id, Zone.DATA, _json_object(data, "data"), delta, expected_step
        )

    async def update_template(
        self,
        session_id: str,
        template: dict[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[StateRecord, Delta]:
        """Replace the template zone and record its delta, atomically (see :meth:`update_data`)."""
        return await self._zoned_write(
            session_id, Zone.TEMPLATE, _json_object(template, "template"), delta, expected_step
        )

    async def update_view(
        self,
        session_id: str,
        view: dict[str, Any],
        delta: DeltaSpec,
        *,
        expected_step: int | None = None,
    ) -> tuple[StateRecord, Delta]:
        """Replace the view zone and record its delta, atomically (see :meth:`update_data`)."""
        return await self._zoned_write(
            session_id, Zone.VIEW, _json_object(view, "view"), delta, expected_step
        )

    async def add_delta(
        self, session_id: str, delta: DeltaSpec, *, expected_step: int | None = None
    ) -> tuple[StateRecord, Delta]:
        """Record a delta that changes no zone (e.g. a search with 0 results); bumps the step."""
        return await self._zoned_write(session_id, None, None, delta, expected_step)

    async def get_deltas(self, session_id: str, since_step: int = 0) -> list[Delta]:
        """Return the session's deltas with ``step > since_step``, in step order."""
        stmt = (
            select(*_DELTA_COLUMNS)
            .where(StateDelta.session_id == session_id, StateDelta.step > since_step)
            .order_by(StateDelta.step)
        )

        async def op(s: AsyncSession) -> list[Delta]:
            return [_delta_record(row) for row in await s.execute(stmt)]

        return await self._read(op, "get_deltas")

    # -- resume ---------------------------------------------------------------------------

    async def resume_session(
        self,
        session_id: str,
        *,
        user_id: str,
        max_pairs: int = DEFAULT_MAX_PAIRS,
        include_memory: bool = True,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> ResumeResult:
        """Load a session for continuation (SPEC §5).

        Reads a bounded number of rows for the history window (at most ``max_pairs``
        phase outputs and ``2 * max_pairs`` messages), whatever the session's length.

        Args:
            session_id: The session to resume.
            user_id: Who asks; another user's session is reported as not found.
            max_pairs: How many history pairs to keep.
            include_memory: Also load the stored memory steps into ``memory``.
            max_steps: At most this many of the newest memory steps are loaded, so
                resuming costs the same for a long session as for a short one.

        Raises:
            SessionNotFound: ``Session {id} not found`` (unknown, or not this user's).
            SessionCompleted: ``Session {id} already completed``.
            SessionFailed: ``Session {id} failed and cannot be resumed``.
            NothingToResume: ``Session {id} has no completed phases to resume from``.
        """
        if max_pairs < 0:
            raise ValueError("max_pairs must not be negative")

        @dataclass
        class _Loaded:
            session: SessionRecord
            outputs: list[_WindowOutput]
            window: list[_WindowOutput]
            messages: list[_WindowMessage]
            steps: Sequence[_Row]

        async def op(s: AsyncSession) -> _Loaded:
            row = (
                await s.execute(self._session_select().where(SessionRow.id == session_id))
            ).one_or_none()
            if row is None or row.user_id != user_id:
                raise SessionNotFound(session_id)
            session = _session_record(row)
            if session.status == "completed":
                raise SessionCompleted(session_id)
            if session.status == "failed":
                raise SessionFailed(session_id)
            outputs = [
                _WindowOutput(phase_id, status, None, None, None)
                for phase_id, status in await s.execute(
                    select(PhaseOutput.phase_id, PhaseOutput.status)
                    .where(PhaseOutput.session_id == session_id)
                    .order_by(PhaseOutput.created_at, PhaseOutput.id)
                )
            ]
            if not completed_phase_ids(outputs):
                raise NothingToResume(session_id)
            window: list[_WindowOutput] = []
            messages: list[_WindowMessage] = []
            if max_pairs:
                window = [
                    _WindowOutput(phase_id, _COMPLETED, "", user_input, output)
                    for phase_id, user_input, output in await s.execute(
                        select(PhaseOutput.phase_id, PhaseOutput.user_input, PhaseOutput.output)
                        .where(
                            PhaseOutput.session_id == session_id,
                            PhaseOutput.status == _COMPLETED,
                            PhaseOutput.system_prompt.is_not(None),
                        )
                        .order_by(PhaseOutput.created_at.desc(), PhaseOutput.id.desc())
                        .limit(max_pairs)
                    )
                ][::-1]
                messages = [
                    _WindowMessage(*r)
                    for r in await s.execute(
                        select(
                            SessionConversation.role,
                            SessionConversation.content,
                            SessionConversation.phase_id,
                            SessionConversation.interrupted,
                        )
                        .where(SessionConversation.session_id == session_id)
                        .order_by(
                            SessionConversation.created_at.desc(), SessionConversation.id.desc()
                        )
                        .limit(2 * max_pairs)
                    )
                ][::-1]
            steps: Sequence[_Row] = []
            if include_memory and max_steps > 0:
                newest = (
                    select(*_STEP_COLUMNS)
                    .where(AgentStep.session_id == session_id)
                    .order_by(AgentStep.seq.desc())
                    .limit(max_steps)
                )
                steps = (await s.execute(newest)).all()[::-1]
            return _Loaded(session, outputs, window, messages, steps)

        loaded = await self._read(op, "resume_session")
        done = completed_phase_ids(loaded.outputs)
        context = ResumeContext(
            history=reconstruct_history(loaded.window, loaded.messages, max_pairs),
            last_completed_phase=done[-1],
            total_phases=len(self._phase_ids),
            completed_phases=sum(1 for phase_id in self._phase_ids if phase_id in done),
        )
        return ResumeResult(
            session=loaded.session,
            next_phase_id=next_phase_id(self._phase_ids, loaded.outputs),
            context=context,
            memory=await self._decode_or_empty(session_id, loaded.steps),
        )


async def open_repository(
    url: str | URL,
    *,
    secret: bytes,
    create_schema: bool = False,
    phase_ids: Sequence[str] = DEFAULT_PHASE_IDS,
    pool_size: int = 5,
    max_overflow: int = 10,
    clock: Callable[[], datetime] = utcnow,
) -> Repository:
    """Open the repository on ``url``.

    Args:
        url: A SQLAlchemy URL (``sqlite+aiosqlite:///...`` or ``postgresql+asyncpg://...``;
            the plain ``sqlite://`` / ``postgresql://`` forms get their async driver).
        secret: The HMAC key of memory steps (``Settings.memory_secret``).
        create_schema: Run the Alembic migrations first (the embedded SQLite default;
            PostgreSQL fleets run ``python -m coach db upgrade`` instead).
        phase_ids: The manifest's phase ids, in order.
        pool_size: PostgreSQL pool size.
        max_overflow: PostgreSQL pool overflow.
        clock: Returns the current UTC time (tests pass a fixed clock).

    Returns:
        The repository; close it with ``await repo.aclose()`` (or ``async with``).
    """
    if create_schema:
        await upgrade(url)
    engine = create_engine(url, pool_size=pool_size, max_overflow=max_overflow)
    return Repository(engine, secret=secret, phase_ids=phase_ids, clock=clock)
