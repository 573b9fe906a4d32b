"""What every aggregate's statements share: dialect-aware inserts, and the checks a value
passes before any database sees it (the tables are :mod:`.schema`'s)."""

from __future__ import annotations

import json
from typing import Any, Final, TypeAlias, overload

from sqlalchemy import Column, Select, Table
from sqlalchemy.engine import Connection, Row

from ..errors import InvalidWrite
from ..store import clean_text

__all__ = [
    "AnyRow",
    "AnySelect",
    "MAX_ACTOR",
    "check_status",
    "clean_text",
    "fit",
    "json_object",
    "upsert",
]

AnyRow: TypeAlias = Row[*tuple[Any, ...]]
AnySelect: TypeAlias = Select[*tuple[Any, ...]]


def upsert(conn: Connection, table: Table) -> Any:
    """An ``INSERT`` that knows ``ON CONFLICT`` on this connection's dialect."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)


def check_status(status: str, allowed: tuple[str, ...], what: str) -> None:
    """Refuse a status outside ``allowed`` (nothing is written)."""
    if status not in allowed:
        raise InvalidWrite(f"Invalid {what} status: {status}. Must be one of {', '.join(allowed)}")


MAX_ACTOR: Final = 255
"""The longest actor id a delta records (it is sealed, so no column length says so)."""


@overload
def fit(value: str, column: Column[Any] | int, what: str) -> str: ...
@overload
def fit(value: None, column: Column[Any] | int, what: str) -> None: ...
@overload
def fit(value: str | None, column: Column[Any] | int, what: str) -> str | None: ...
def fit(value: str | None, column: Column[Any] | int, what: str) -> str | None:
    """``value`` as it will be stored: valid UTF-8 (:func:`~coach.store.clean_text`) and
    no longer than ``column`` allows (or ``column`` characters) — on SQLite, which does
    not enforce lengths, as on PostgreSQL, which does. Otherwise :class:`InvalidWrite`
    (nothing is written)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidWrite(f"{what} must be text, not {type(value).__name__}")
    value = clean_text(value)
    length = column if isinstance(column, int) else getattr(column.type, "length", None)
    if length is not None and len(value) > length:
        raise InvalidWrite(f"{what} is longer than {length} characters")
    return value


def json_object(value: object, zone: str) -> dict[str, Any]:
    """``value`` if it is a JSON object; otherwise :class:`InvalidWrite`."""
    if not isinstance(value, dict):
        raise InvalidWrite(f"the {zone} zone must be a JSON object (a dict)")
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidWrite(f"the {zone} zone holds text that is not valid UTF-8") from None
    except (TypeError, ValueError) as exc:
        raise InvalidWrite(f"the {zone} zone is not JSON-serializable: {exc}") from exc
    except RecursionError:
        raise InvalidWrite(f"the {zone} zone is nested too deeply") from None
    return value
