"""The database schema (SPEC §4): SQLAlchemy Core tables, the single source for migrations.

Core, not ORM models: coach's statements are Core statements, and SQLAlchemy's ORM costs
every command that opens the database a tenth of a second to import.

Production code never calls ``metadata.create_all``; Alembic migrations in
``migrations/`` build the schema and a test proves they agree with these tables.
Constraints are named by :data:`NAMING_CONVENTION` so migrations can address them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    false,
)
from sqlalchemy.types import TypeDecorator, TypeEngine

__all__ = [
    "AGENT_STEPS",
    "CONVERSATIONS",
    "DELTAS",
    "MESSAGE_ROLES",
    "NAMING_CONVENTION",
    "PERSONS",
    "PERSON_DELTAS",
    "PHASE_OUTPUTS",
    "PHASE_STATUSES",
    "SESSIONS",
    "SESSION_STATUSES",
    "STATES",
    "USERS",
    "HexId",
    "UTCDateTime",
    "metadata",
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


def _binds_as_is(kind: TypeDecorator[Any], dialect: Dialect) -> bool:
    """Whether ``kind``'s type on ``dialect`` takes a value with no processor of its own:
    then the decorator's own bind (its ``process_bind_param``) is all there is to do."""
    return kind.load_dialect_impl(dialect).bind_processor(dialect) is None


def _hex_id(value: str | None) -> str | None:
    """An id as bound: itself if it is 32 hex digits, else the nil id."""
    if value is None:
        return None
    return value if _HEX_ID.fullmatch(value) else _NIL_ID


class HexId(TypeDecorator[str]):
    """A 32-hex-digit id (:func:`new_id`): native ``uuid`` on PostgreSQL — 16 bytes, not
    33, in every row and index entry that holds it — and text on SQLite. A value that is
    no such id (any text, a NUL, a lone surrogate) is looked up as the nil id on both, so
    it matches nothing instead of failing the statement."""

    impl = String(32)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import UUID

            return dialect.type_descriptor(UUID(as_uuid=False))
        return dialect.type_descriptor(String(32))

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return _hex_id(value)

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        """:func:`_hex_id` itself where the dialect's own type binds the text as it is
        (SQLite's text; PostgreSQL's ``uuid`` through asyncpg, which takes the hex):
        the decorator's own processor would add two calls to every id bound."""
        return _hex_id if _binds_as_is(self, dialect) else super().bind_processor(dialect)

    def process_result_value(self, value: object, dialect: Dialect) -> str | None:
        return None if value is None else str(value).replace("-", "")


def _in_utc(value: datetime) -> datetime:
    """An aware time in UTC; a naive one is refused."""
    if value.tzinfo is None:
        raise ValueError("naive datetimes are not stored; use an aware UTC datetime")
    return value if value.tzinfo is UTC else value.astimezone(UTC)


def _bind_utc(value: datetime | None) -> datetime | None:
    """A time as :class:`UTCDateTime` binds it for a driver that takes aware times."""
    return None if value is None else _in_utc(value)


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
        value = _in_utc(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        """On SQLite, the text SQLAlchemy's ``DATETIME`` stores, made in one step: its
        own processor formats seven fields through a dict, half of a time's bind.
        Elsewhere :func:`_in_utc` itself, where the dialect's own type binds the time as
        it is (asyncpg's ``timestamptz``): the decorator's processor adds two calls."""
        if dialect.name != "sqlite":
            return _bind_utc if _binds_as_is(self, dialect) else super().bind_processor(dialect)

        def process(value: datetime | None) -> str | None:
            if value is None:
                return None
            return _in_utc(value).replace(tzinfo=None).isoformat(" ", "microseconds")

        return process

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# Integer ids that grow by insertion order: BIGINT where it matters, and the
# "INTEGER PRIMARY KEY" rowid alias SQLite needs for autoincrement.
_BigId = BigInteger().with_variant(Integer(), "sqlite")

metadata: Final = MetaData(naming_convention=NAMING_CONVENTION)
"""Every table of the schema, with the naming convention."""


def _audit() -> tuple[Column[datetime], Column[datetime]]:
    """``created_at`` and ``updated_at``, stamped by every insert and update."""
    return (
        Column("created_at", UTCDateTime(), nullable=False, default=utcnow),
        Column("updated_at", UTCDateTime(), nullable=False, default=utcnow, onupdate=utcnow),
    )


def _owner(table: str) -> ForeignKey:
    return ForeignKey(f"{table}.id", ondelete="CASCADE")


USERS: Final = Table(
    "users",
    metadata,
    # A person, keyed by their LiveKit identity (or the ``--user`` name in chat).
    Column("id", HexId(), primary_key=True, default=new_id),
    # The keyed hash of the identity (:meth:`~.keystore.Vault.identity_hash`): how a
    # user is found, without the identity stored readable.
    Column("identity_hash", String(64), nullable=False, unique=True),
    # The identity, sealed with the person's key (like every personal column below:
    # :data:`~.crypto.SEALED`).
    Column("identity", LargeBinary(), nullable=False),
    Column("display_name", LargeBinary()),
    *_audit(),
)

SESSIONS: Final = Table(
    "sessions",
    metadata,
    # A coaching session of one user.
    Column("id", HexId(), primary_key=True, default=new_id),
    Column("user_id", HexId(), _owner("users"), nullable=False),
    Column("design_challenge", LargeBinary()),
    Column("status", String(16), nullable=False, default="in_progress"),
    Column("current_agent", String(64)),
    Column("current_phase_id", String(64)),
    # The LiveKit room the session runs in: a user reconnecting to it continues it.
    Column("room", String(255)),
    # How many memory steps are stored: appends claim their positions here, and a load
    # that finds fewer rows knows the history was cut.
    Column("memory_steps", Integer(), nullable=False, default=0, server_default="0"),
    # The session this one branched from (provenance: the branch holds its own copy),
    # and the phase of the parent whose end the branch starts from.
    Column("parent_session_id", HexId()),
    Column("branched_from_phase", String(64)),
    *_audit(),
    CheckConstraint(_in("status", SESSION_STATUSES), name="status"),
    Index(None, "user_id", "created_at"),
    Index(None, "user_id", "room"),
)

PHASE_OUTPUTS: Final = Table(
    "phase_outputs",
    metadata,
    # The output of one phase with the prompts that produced it (SPEC §4.2).
    Column("id", HexId(), primary_key=True, default=new_id),
    Column("session_id", HexId(), _owner("sessions"), nullable=False),
    Column("phase_id", String(64), nullable=False),
    Column("phase_name", String(255), nullable=False),
    Column("status", String(16), nullable=False),
    Column("system_prompt", LargeBinary()),
    Column("user_input", LargeBinary()),
    Column("output", LargeBinary()),
    Column("error", LargeBinary()),
    # Where a completed phase ends, for branching: the memory steps before this position
    # (a whole turn: no tool call without its output), the state step then, and the
    # zones then (``{"data": ..., "template": ..., "view": ...}``).
    Column("memory_end", Integer()),
    Column("state_end", Integer()),
    Column("state_snapshot", LargeBinary()),
    *_audit(),
    UniqueConstraint("session_id", "phase_id"),
    CheckConstraint(_in("status", PHASE_STATUSES), name="status"),
)

CONVERSATIONS: Final = Table(
    "session_conversations",
    metadata,
    # One conversation message; append-only (SPEC §4.3, §6).
    Column("id", _BigId, primary_key=True, autoincrement=True),
    Column("session_id", HexId(), _owner("sessions"), nullable=False),
    Column("phase_id", String(64)),
    Column("role", String(16), nullable=False),
    Column("content", LargeBinary(), nullable=False),
    Column("interrupted", Boolean(), nullable=False, default=False, server_default=false()),
    Column("created_at", UTCDateTime(), nullable=False, default=utcnow),
    CheckConstraint(_in("role", MESSAGE_ROLES), name="role"),
    Index(None, "session_id", "created_at", "id"),  # serves every window and page
)

AGENT_STEPS: Final = Table(
    "agent_steps",
    metadata,
    # One pickled, signed memory step (SPEC §4.4); append-only, one row per step.
    Column("session_id", HexId(), _owner("sessions"), primary_key=True),
    Column("seq", Integer(), primary_key=True, autoincrement=False),
    Column("codec", String(32), nullable=False),
    Column("version", Integer(), nullable=False),
    Column("signature", LargeBinary(32), nullable=False),
    Column("payload", LargeBinary(), nullable=False),
    # The conversation row holding this message's text (left out of ``payload``).
    Column("message_id", _BigId),
    # Not written since codec version 2: a chat item carries its own time.
    Column("created_at", UTCDateTime()),
)

STATES: Final = Table(
    "session_state",
    metadata,
    # The zoned state of a session: ``step`` and the data/template/view zones (SPEC
    # §4.5). The row is the lock that orders writers: every zoned write holds it while
    # it bumps ``step`` and records its delta.
    Column("session_id", HexId(), _owner("sessions"), primary_key=True),
    Column("step", Integer(), nullable=False, default=0),
    Column("data", LargeBinary(), nullable=False),
    Column("template", LargeBinary(), nullable=False),
    Column("view", LargeBinary(), nullable=False),
    *_audit(),
)


def _delta_table(name: str, owner: Column[str]) -> Table:
    """Why a session's state (or a person's record) changed at ``step`` (SPEC §4.5); one
    row per step."""
    return Table(
        name,
        metadata,
        owner,
        Column("step", Integer(), primary_key=True, autoincrement=False),
        Column("turn_id", String(64)),
        Column("trigger", String(16), nullable=False),
        Column("source", String(16), nullable=False),
        Column("actor_id", LargeBinary()),
        Column("delta_type", String(16), nullable=False),
        Column("path", String(255), nullable=False),
        Column("action", LargeBinary(), nullable=False),
        Column("result", LargeBinary(), nullable=False),
        Column("created_at", UTCDateTime(), nullable=False, default=utcnow),
        CheckConstraint(_in("trigger", TRIGGERS), name="trigger"),
        CheckConstraint(_in("source", SOURCES), name="source"),
        CheckConstraint(_in("delta_type", DELTA_TYPES), name="delta_type"),
    )


DELTAS: Final = _delta_table(
    "state_deltas", Column("session_id", HexId(), _owner("sessions"), primary_key=True)
)

PERSONS: Final = Table(
    "persons",
    metadata,
    # What a person agreed coach may remember about them (SPEC §4.6), with a ``step``
    # that orders writers like a session's state row.
    Column("user_id", HexId(), _owner("users"), primary_key=True),
    Column("step", Integer(), nullable=False, default=0),
    Column("value", LargeBinary(), nullable=False),
    *_audit(),
)

PERSON_DELTAS: Final = _delta_table(
    "person_deltas", Column("user_id", HexId(), _owner("users"), primary_key=True)
)
