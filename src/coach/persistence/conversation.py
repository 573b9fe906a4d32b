"""The conversation: every user and assistant message, append-only (SPEC §4.3, §6).

Every read is served by the index on ``(session_id, created_at, id)``: a page or the
resume window costs the rows it returns, not the session's length.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, NamedTuple

from sqlalchemy import and_, bindparam, or_, select
from sqlalchemy.engine import Connection

from ..errors import InvalidRole, InvalidWrite
from ..store import AddMessage, MessageRecord
from .crypto import Sealer
from .driver import DriverQuery, utc
from .schema import CONVERSATIONS, MESSAGE_ROLES
from .sql import AnyRow, AnySelect, clean_text, fit

__all__ = [
    "WindowMessage",
    "conversation_select",
    "fetch_window",
    "message_record",
    "message_row",
    "open_content",
]

_C = CONVERSATIONS.c
_COLUMNS: Final = (_C.id, _C.session_id, _C.phase_id, _C.role, _C.content, _C.interrupted)
_PHASE_ID: Final = _C.phase_id


def message_row(op: AddMessage, now: datetime) -> dict[str, Any]:
    """The row of one message, checked (a bad role or content writes nothing)."""
    if op.role not in MESSAGE_ROLES:
        raise InvalidRole(op.role)
    if not isinstance(op.content, str):
        raise InvalidWrite("message content must be a string")
    return {
        "session_id": op.session_id,
        "phase_id": fit(op.phase_id, _PHASE_ID, "message phase_id"),
        "role": op.role,
        "content": clean_text(op.content),
        "interrupted": bool(op.interrupted),
        "created_at": now,
    }


def conversation_select(
    session_id: str,
    *,
    phase_id: str | None = None,
    after_id: int | None = None,
    before_id: int | None = None,
    from_end: bool = False,
    limit: int | None = None,
) -> AnySelect:
    """Messages in time order (ties by insertion), optionally of one phase: the page after
    message ``after_id``, or — with ``before_id`` or ``from_end`` — the page that ends just
    before message ``before_id`` (or at the newest), which comes back newest first."""
    stmt = select(*_COLUMNS, _C.created_at).where(_C.session_id == session_id)
    if phase_id is not None:
        stmt = stmt.where(_C.phase_id == phase_id)
    if after_id is not None:
        after = _time_of(session_id, after_id)
        stmt = stmt.where(
            or_(_C.created_at > after, and_(_C.created_at == after, _C.id > after_id))
        )
    if before_id is not None:
        before = _time_of(session_id, before_id)
        stmt = stmt.where(
            or_(_C.created_at < before, and_(_C.created_at == before, _C.id < before_id))
        )
    if before_id is not None or from_end:
        stmt = stmt.order_by(_C.created_at.desc(), _C.id.desc())
    else:
        stmt = stmt.order_by(_C.created_at, _C.id)
    return stmt.limit(limit) if limit is not None else stmt


def _time_of(session_id: str, message_id: int) -> Any:
    return (
        select(_C.created_at)
        .where(_C.session_id == session_id, _C.id == message_id)
        .scalar_subquery()
    )


def open_content(sealer: Sealer, session_id: str, created_at: Any, role: str, blob: Any) -> str:
    """The text of a conversation row, opened (its session, time and role name it)."""
    bound = (session_id, created_at, role)
    text: str = sealer.open("session_conversations", "content", bound, blob)
    return text


def message_record(row: AnyRow, sealer: Sealer) -> MessageRecord:
    """A row of :func:`conversation_select`, opened."""
    return MessageRecord(
        row.id,
        row.session_id,
        row.phase_id,
        row.role,
        open_content(sealer, row.session_id, row.created_at, row.role, row.content),
        row.interrupted,
        row.created_at,
    )


class WindowMessage(NamedTuple):
    """A message of the resume window, as the history reads it."""

    role: str
    content: str
    phase_id: str | None
    interrupted: bool
    id: int


_WINDOW: Final = DriverQuery(
    select(_C.role, _C.content, _C.phase_id, _C.interrupted, _C.id, _C.created_at)
    .where(_C.session_id == bindparam("b_id"))
    .order_by(_C.created_at.desc(), _C.id.desc())
    .limit(bindparam("b_limit"))
)


def fetch_window(
    conn: Connection, session_id: str, count: int, sealer: Sealer
) -> list[WindowMessage]:
    """The newest ``count`` messages, oldest first, opened."""
    rows = _WINDOW.rows(conn, {"b_id": session_id, "b_limit": count})
    return [
        WindowMessage(
            role,
            open_content(sealer, session_id, utc(created_at), role, content),
            phase_id,
            bool(interrupted),
            message_id,
        )
        for role, content, phase_id, interrupted, message_id, created_at in reversed(rows)
    ]
