"""Erasing data (voice conversations are personal data): a session, a person, and
sessions past a retention period — each in one transaction, everything of them.

Rows are deleted table by table (children first) rather than left to the foreign keys'
cascades, so an erase does not depend on how a connection was configured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from sqlalchemy import delete, select
from sqlalchemy.engine import Connection

from .sql import (
    AGENT_STEPS,
    CONVERSATIONS,
    DELTAS,
    PERSON_DELTAS,
    PERSONS,
    PHASE_OUTPUTS,
    SESSIONS,
    STATES,
    USERS,
)

__all__ = ["delete_sessions", "delete_user"]

_CHILDREN: Final = (DELTAS, STATES, AGENT_STEPS, CONVERSATIONS, PHASE_OUTPUTS)
_CHUNK: Final = 500


def delete_sessions(conn: Connection, session_ids: Sequence[str]) -> int:
    """Delete the sessions and every row of theirs; return how many sessions there were."""
    deleted = 0
    for start in range(0, len(session_ids), _CHUNK):
        ids = list(session_ids[start : start + _CHUNK])
        for table in _CHILDREN:
            conn.execute(delete(table).where(table.c.session_id.in_(ids)))
        deleted += conn.execute(delete(SESSIONS).where(SESSIONS.c.id.in_(ids))).rowcount
    return deleted


def delete_user(conn: Connection, identity: str) -> int | None:
    """Delete the person with ``identity``, all their sessions and what coach remembered
    about them; return how many sessions that was (``None``: no such person)."""
    user_id = conn.execute(select(USERS.c.id).where(USERS.c.identity == identity)).scalar()
    if user_id is None:
        return None
    ids = list(conn.scalars(select(SESSIONS.c.id).where(SESSIONS.c.user_id == user_id)))
    deleted = delete_sessions(conn, ids)
    for table in (PERSON_DELTAS, PERSONS):  # what coach remembered about them
        conn.execute(delete(table).where(table.c.user_id == user_id))
    conn.execute(delete(USERS).where(USERS.c.id == user_id))
    return deleted
