"""What every aggregate's statements share: the tables, dialect-aware inserts, and the
checks a value passes before any database sees it."""

from __future__ import annotations

import json
from typing import Any, Final, TypeAlias, cast, overload

from sqlalchemy import Select, Table
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Row

from ..errors import InvalidWrite
from .schema import (
    AgentStep,
    PhaseOutput,
    SessionConversation,
    SessionRow,
    SessionState,
    StateDelta,
    User,
)

__all__ = [
    "AGENT_STEPS",
    "CONVERSATIONS",
    "DELTAS",
    "PHASE_OUTPUTS",
    "SESSIONS",
    "STATES",
    "USERS",
    "AnyRow",
    "AnySelect",
    "check_status",
    "clean_text",
    "json_object",
    "upsert",
]

AnyRow: TypeAlias = Row[*tuple[Any, ...]]
AnySelect: TypeAlias = Select[*tuple[Any, ...]]

USERS: Final = cast(Table, User.__table__)
SESSIONS: Final = cast(Table, SessionRow.__table__)
PHASE_OUTPUTS: Final = cast(Table, PhaseOutput.__table__)
CONVERSATIONS: Final = cast(Table, SessionConversation.__table__)
AGENT_STEPS: Final = cast(Table, AgentStep.__table__)
STATES: Final = cast(Table, SessionState.__table__)
DELTAS: Final = cast(Table, StateDelta.__table__)


def upsert(conn: Connection, table: Table) -> Any:
    """An ``INSERT`` that knows ``ON CONFLICT`` on this connection's dialect."""
    return pg_insert(table) if conn.dialect.name == "postgresql" else sqlite_insert(table)


def check_status(status: str, allowed: tuple[str, ...], what: str) -> None:
    """Refuse a status outside ``allowed`` (nothing is written)."""
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


def json_object(value: object, zone: str) -> dict[str, Any]:
    """``value`` if it is a JSON object; otherwise :class:`InvalidWrite`."""
    if not isinstance(value, dict):
        raise InvalidWrite(f"the {zone} zone must be a JSON object (a dict)")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidWrite(f"the {zone} zone is not JSON-serializable: {exc}") from exc
    return value
