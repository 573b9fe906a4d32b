"""Users and sessions: statements and reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.engine import Connection

from ..errors import InvalidWrite, SessionNotFound, StaleWrite
from ..store import SessionRecord, UserRecord
from .crypto import Sealer
from .driver import claim_steps
from .memory import stored_count
from .schema import PHASE_OUTPUTS, SESSION_STATUSES, SESSIONS, STATES, USERS
from .sql import AnyRow, AnySelect, check_status, fit, upsert
from .zones import empty_zones

__all__ = [
    "SESSION_FIELDS",
    "apply_session_write",
    "claim_memory",
    "insert_session",
    "recent_sessions_select",
    "expired_select",
    "room_session_select",
    "session_record",
    "session_select",
    "session_values",
    "insert_user",
    "user_record",
    "user_select",
    "user_sessions_select",
]

SESSION_FIELDS: Final = frozenset(
    {"status", "design_challenge", "current_agent", "current_phase_id", "room"}
)
_COLUMNS: Final = (
    SESSIONS.c.id,
    SESSIONS.c.user_id,
    SESSIONS.c.design_challenge,
    SESSIONS.c.status,
    SESSIONS.c.current_agent,
    SESSIONS.c.current_phase_id,
    SESSIONS.c.created_at,
    SESSIONS.c.updated_at,
)


def _completed_count(phase_ids: Sequence[str]) -> ColumnElement[int]:
    return (
        select(func.count())
        .where(
            PHASE_OUTPUTS.c.session_id == SESSIONS.c.id,
            PHASE_OUTPUTS.c.status == "completed",
            PHASE_OUTPUTS.c.phase_id.in_(phase_ids),
        )
        .correlate(SESSIONS)
        .scalar_subquery()
    )


def session_select(phase_ids: Sequence[str]) -> AnySelect:
    """Sessions with their count of completed manifest phases (see :func:`session_record`)."""
    return select(
        *_COLUMNS,
        _completed_count(phase_ids).label("completed"),
        SESSIONS.c.room,
        SESSIONS.c.parent_session_id,
        SESSIONS.c.branched_from_phase,
    )


def user_sessions_select(phase_ids: Sequence[str], user_id: str) -> AnySelect:
    """A user's sessions, newest first."""
    return (
        session_select(phase_ids)
        .where(SESSIONS.c.user_id == user_id)
        .order_by(SESSIONS.c.created_at.desc(), SESSIONS.c.id.desc())
    )


def recent_sessions_select(phase_ids: Sequence[str], limit: int) -> AnySelect:
    """The most recently updated sessions of every user."""
    return (
        session_select(phase_ids)
        .order_by(SESSIONS.c.updated_at.desc(), SESSIONS.c.id.desc())
        .limit(limit)
    )


def expired_select(phase_ids: Sequence[str], older_than: datetime, status: str | None) -> AnySelect:
    """Sessions last updated before ``older_than`` (only with ``status``, if given),
    oldest first: what a retention policy erases."""
    stmt = session_select(phase_ids).where(SESSIONS.c.updated_at < older_than)
    if status is not None:
        stmt = stmt.where(SESSIONS.c.status == status)
    return stmt.order_by(SESSIONS.c.updated_at, SESSIONS.c.id)


def room_session_select(phase_ids: Sequence[str], user_id: str, room: str) -> AnySelect:
    """The user's most recent in-progress session in ``room``."""
    return (
        session_select(phase_ids)
        .where(
            SESSIONS.c.user_id == user_id,
            SESSIONS.c.room == room,
            SESSIONS.c.status == "in_progress",
        )
        .order_by(SESSIONS.c.updated_at.desc(), SESSIONS.c.id.desc())
        .limit(1)
    )


def session_record(row: AnyRow, sealer: Sealer) -> SessionRecord:
    """The record of a row of :func:`session_select` (columns after it ignored), its
    challenge opened with its owner's ``sealer``."""
    challenge = sealer.open("sessions", "design_challenge", (row[0],), row[2])
    return SessionRecord(row[0], row[1], challenge, *row[3:12])


def user_select() -> AnySelect:
    """Users as :class:`UserRecord` columns (see :func:`user_record`)."""
    return select(USERS.c.id, USERS.c.identity, USERS.c.display_name, USERS.c.created_at)


def user_record(row: AnyRow, sealer: Sealer) -> UserRecord:
    """The record of a row of :func:`user_select`, opened with the user's ``sealer``."""
    opened = sealer.open_row("users", row._asdict())
    return UserRecord(row.id, opened["identity"], opened["display_name"], row.created_at)


def insert_user(
    conn: Connection,
    user_id: str,
    identity_hash: str,
    identity: str,
    display_name: str | None,
    sealer: Sealer,
    now: datetime,
) -> UserRecord | None:
    """Create the user unless one with ``identity_hash`` exists (then ``None``: another
    worker created them first). The caller checked ``identity`` and ``display_name``."""
    values = {"id": user_id, "identity": identity, "display_name": display_name}
    stmt = (
        upsert(conn, USERS)
        .values(
            **sealer.seal_row("users", values),
            identity_hash=identity_hash,
            created_at=now,
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=["identity_hash"])
    )
    if conn.execute(stmt).rowcount == 0:
        return None
    return UserRecord(user_id, identity, display_name, now)


def session_values(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Checked session fields (unknown names and statuses refused)."""
    unknown = set(fields) - SESSION_FIELDS
    if unknown:
        raise InvalidWrite(f"unknown session fields: {', '.join(sorted(unknown))}")
    if fields.get("status") is not None:
        check_status(fields["status"], SESSION_STATUSES, "session")
    return {name: fit(value, SESSIONS.c[name], f"session {name}") for name, value in fields.items()}


def claim_memory(
    conn: Connection, claims: Mapping[str, tuple[int, int]], *, lock: Sequence[str] = ()
) -> None:
    """Claim memory positions ``start .. start + count - 1`` of each session (``claims``:
    session id -> ``(start, count)``): one statement on PostgreSQL, one per session on
    SQLite (:func:`~.driver.claim_steps`). Each takes its session's row lock, unless the
    caller holds it already; on PostgreSQL the sessions of ``lock`` (at least those
    claimed) are locked first, in id order, by the same statement (by one of their own
    when nothing is claimed).

    Raises:
        SessionNotFound: There is no such session (the first, in id order).
        StaleWrite: A ``start`` is not the stored step count (another writer got there).
    """
    ordered = [(sid, start, start + count) for sid, (start, count) in sorted(claims.items())]
    for sid in claim_steps(conn, ordered, lock=lock):
        stored = stored_count(conn, sid)
        if stored is None:
            raise SessionNotFound(sid)
        raise StaleWrite(f"Session {sid} has {stored} memory steps stored, not {claims[sid][0]}")


def apply_session_write(
    conn: Connection,
    session_id: str,
    values: Mapping[str, Any],
    *,
    steps: tuple[int, int] | None = None,
) -> None:
    """Update one session row with ``values`` (``updated_at`` among them, non-empty)
    and, with ``steps=(start, count)``, claim memory positions ``start .. start + count
    - 1`` in the same statement, which also takes the row lock.

    Raises:
        SessionNotFound: There is no such session.
        StaleWrite: ``start`` is not the stored step count (another writer got there).
    """
    stmt = update(SESSIONS).where(SESSIONS.c.id == session_id).values(**values)
    if steps is not None:
        start, count = steps
        stmt = stmt.where(SESSIONS.c.memory_steps == start).values(memory_steps=start + count)
    if conn.execute(stmt).rowcount:
        return
    stored = stored_count(conn, session_id)
    if stored is None or steps is None:
        raise SessionNotFound(session_id)
    raise StaleWrite(f"Session {session_id} has {stored} memory steps stored, not {steps[0]}")


def insert_session(conn: Connection, record: SessionRecord, sealer: Sealer) -> None:
    """Insert a new session and its empty zoned state (step 0), sealed with its owner's
    ``sealer``."""
    challenge = fit(record.design_challenge, SESSIONS.c.design_challenge, "challenge")
    empty = (record.id,)
    conn.execute(
        SESSIONS.insert().values(
            id=record.id,
            user_id=record.user_id,
            design_challenge=sealer.seal("sessions", "design_challenge", empty, challenge),
            status=record.status,
            room=fit(record.room, SESSIONS.c.room, "room"),
            memory_steps=0,
            created_at=record.created_at,
            updated_at=record.updated_at,
        )
    )
    conn.execute(
        STATES.insert().values(
            session_id=record.id,
            step=0,
            **empty_zones(record.id, sealer),
            created_at=record.created_at,
            updated_at=record.updated_at,
        )
    )
