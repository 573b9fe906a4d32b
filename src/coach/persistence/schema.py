"""The database schema (SPEC §4): SQLAlchemy 2 models, the single source for migrations.

Production code never calls ``metadata.create_all``; Alembic migrations in
``migrations/`` build the schema and a test proves they agree with these models.
Constraints are named by :data:`NAMING_CONVENTION` so migrations can address them.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    UniqueConstraint,
    false,
)
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

__all__ = [
    "MESSAGE_ROLES",
    "NAMING_CONVENTION",
    "PHASE_STATUSES",
    "SESSION_STATUSES",
    "AgentStep",
    "Base",
    "PhaseOutput",
    "SessionConversation",
    "SessionRow",
    "SessionState",
    "StateDelta",
    "User",
    "HexId",
    "UTCDateTime",
    "new_id",
    "utcnow",
]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

SESSION_STATUSES = ("in_progress", "completed", "failed")
PHASE_STATUSES = ("running", "completed", "failed")
MESSAGE_ROLES = ("user", "assistant", "system")
TRIGGERS = ("user_query", "user_action", "system")
SOURCES = ("llm", "user", "system")
DELTA_TYPES = ("add", "update", "remove")


def utcnow() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


_HEX_ID: Final = re.compile(r"[0-9a-f]{32}")
_NIL_ID: Final = "0" * 32


def new_id() -> str:
    """A new string id (uuid4 hex)."""
    return uuid.uuid4().hex


def _in(column: str, values: tuple[str, ...]) -> str:
    quoted = ", ".join(f"'{value}'" for value in values)
    return f'"{column}" IN ({quoted})'


class HexId(TypeDecorator[str]):
    """A 32-hex-digit id (:func:`new_id`): native ``uuid`` on PostgreSQL — 16 bytes, not
    33, in every row and index entry that holds it — and text on SQLite. A value that is
    no such id (any text, a NUL, a lone surrogate) is looked up as the nil id on both, so
    it matches nothing instead of failing the statement."""

    impl = String(32)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(PG_UUID(as_uuid=False))
        return dialect.type_descriptor(String(32))

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        return value if _HEX_ID.fullmatch(value) else _NIL_ID

    def process_result_value(self, value: object, dialect: Dialect) -> str | None:
        return None if value is None else str(value).replace("-", "")


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC and always returned timezone-aware.

    PostgreSQL keeps ``timestamptz``; SQLite keeps naive UTC text (which sorts in time
    order), and the zone is put back on read.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use an aware UTC datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# Integer ids that grow by insertion order: BIGINT where it matters, and the
# "INTEGER PRIMARY KEY" rowid alias SQLite needs for autoincrement.
_BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    """Declarative base carrying the naming convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: JSON()}


class _Audit:
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class User(_Audit, Base):
    """A person, keyed by their LiveKit identity (or the ``--user`` name in chat)."""

    __tablename__ = "users"

    id: Mapped[str] = mapped_column(HexId, primary_key=True, default=new_id)
    identity_hash: Mapped[str] = mapped_column(String(64), unique=True)
    """The keyed hash of the identity (:meth:`~.keystore.Vault.identity_hash`): how a
    user is found, without the identity stored readable."""
    identity: Mapped[bytes] = mapped_column(LargeBinary)
    """The identity, sealed with the person's key (like every personal column below:
    :data:`~.crypto.SEALED`)."""
    display_name: Mapped[bytes | None] = mapped_column(LargeBinary)


class SessionRow(_Audit, Base):
    """A coaching session of one user."""

    __tablename__ = "sessions"
    __table_args__ = (
        CheckConstraint(_in("status", SESSION_STATUSES), name="status"),
        Index(None, "user_id", "created_at"),
        Index(None, "user_id", "room"),
    )

    id: Mapped[str] = mapped_column(HexId, primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(HexId, ForeignKey("users.id", ondelete="CASCADE"))
    design_challenge: Mapped[bytes | None] = mapped_column(LargeBinary)
    status: Mapped[str] = mapped_column(String(16), default="in_progress")
    current_agent: Mapped[str | None] = mapped_column(String(64))
    current_phase_id: Mapped[str | None] = mapped_column(String(64))
    room: Mapped[str | None] = mapped_column(String(255))
    """The LiveKit room the session runs in: a user reconnecting to it continues it."""
    memory_steps: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """How many memory steps are stored: appends claim their positions here, and a load
    that finds fewer rows knows the history was cut."""
    parent_session_id: Mapped[str | None] = mapped_column(HexId)
    """The session this one branched from (provenance: the branch holds its own copy)."""
    branched_from_phase: Mapped[str | None] = mapped_column(String(64))
    """The phase of the parent whose end the branch starts from."""


class PhaseOutput(_Audit, Base):
    """The output of one phase with the prompts that produced it (SPEC §4.2)."""

    __tablename__ = "phase_outputs"
    __table_args__ = (
        UniqueConstraint("session_id", "phase_id"),
        CheckConstraint(_in("status", PHASE_STATUSES), name="status"),
    )

    id: Mapped[str] = mapped_column(HexId, primary_key=True, default=new_id)
    session_id: Mapped[str] = mapped_column(HexId, ForeignKey("sessions.id", ondelete="CASCADE"))
    phase_id: Mapped[str] = mapped_column(String(64))
    phase_name: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16))
    system_prompt: Mapped[bytes | None] = mapped_column(LargeBinary)
    user_input: Mapped[bytes | None] = mapped_column(LargeBinary)
    output: Mapped[bytes | None] = mapped_column(LargeBinary)
    error: Mapped[bytes | None] = mapped_column(LargeBinary)
    memory_end: Mapped[int | None] = mapped_column(Integer)
    """Where a completed phase ends, for branching: the memory steps before this position
    (a whole turn: no tool call without its output) ..."""
    state_end: Mapped[int | None] = mapped_column(Integer)
    """... the state step then ..."""
    state_snapshot: Mapped[bytes | None] = mapped_column(LargeBinary)
    """... and the zones then (``{"data": ..., "template": ..., "view": ...}``)."""


class SessionConversation(Base):
    """One conversation message; append-only (SPEC §4.3, §6)."""

    __tablename__ = "session_conversations"
    __table_args__ = (
        CheckConstraint(_in("role", MESSAGE_ROLES), name="role"),
        Index(None, "session_id", "created_at", "id"),  # serves every window and page
    )

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(HexId, ForeignKey("sessions.id", ondelete="CASCADE"))
    phase_id: Mapped[str | None] = mapped_column(String(64))
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[bytes] = mapped_column(LargeBinary)
    interrupted: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AgentStep(Base):
    """One pickled, signed memory step (SPEC §4.4); append-only, one row per step."""

    __tablename__ = "agent_steps"

    session_id: Mapped[str] = mapped_column(
        HexId, ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    codec: Mapped[str] = mapped_column(String(32))
    version: Mapped[int] = mapped_column(Integer)
    signature: Mapped[bytes] = mapped_column(LargeBinary(32))
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    message_id: Mapped[int | None] = mapped_column(_BigId)
    """The conversation row holding this message's text (left out of ``payload``)."""
    created_at: Mapped[datetime | None] = mapped_column()
    """Not written since codec version 2: a chat item carries its own time."""


class SessionState(_Audit, Base):
    """The zoned state of a session: ``step`` and the data/template/view zones (SPEC §4.5).

    The row is the lock that orders writers: every zoned write holds it while it
    bumps ``step`` and records its delta.
    """

    __tablename__ = "session_state"

    session_id: Mapped[str] = mapped_column(
        HexId, ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
    )
    step: Mapped[int] = mapped_column(Integer, default=0)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    template: Mapped[bytes] = mapped_column(LargeBinary)
    view: Mapped[bytes] = mapped_column(LargeBinary)


class _DeltaFields:
    """What a delta records (SPEC §4.5), for a session's state or a person's record."""

    __table_args__ = (
        CheckConstraint(_in("trigger", TRIGGERS), name="trigger"),
        CheckConstraint(_in("source", SOURCES), name="source"),
        CheckConstraint(_in("delta_type", DELTA_TYPES), name="delta_type"),
    )

    step: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    turn_id: Mapped[str | None] = mapped_column(String(64))
    trigger: Mapped[str] = mapped_column(String(16))
    source: Mapped[str] = mapped_column(String(16))
    actor_id: Mapped[bytes | None] = mapped_column(LargeBinary)
    delta_type: Mapped[str] = mapped_column(String(16))
    path: Mapped[str] = mapped_column(String(255))
    action: Mapped[bytes] = mapped_column(LargeBinary)
    result: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class StateDelta(_DeltaFields, Base):
    """Why the state changed at ``step`` (SPEC §4.5); one row per step."""

    __tablename__ = "state_deltas"

    session_id: Mapped[str] = mapped_column(
        HexId, ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
    )


class PersonRow(_Audit, Base):
    """What a person agreed coach may remember about them (SPEC §4.6), with a ``step``
    that orders writers like a session's state row."""

    __tablename__ = "persons"

    user_id: Mapped[str] = mapped_column(
        HexId, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    step: Mapped[int] = mapped_column(Integer, default=0)
    value: Mapped[bytes] = mapped_column(LargeBinary)


class PersonDelta(_DeltaFields, Base):
    """Why the person record changed at ``step``; one row per step."""

    __tablename__ = "person_deltas"

    user_id: Mapped[str] = mapped_column(
        HexId, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
