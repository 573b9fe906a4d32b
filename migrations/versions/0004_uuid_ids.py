"""On PostgreSQL, ids are native ``uuid``: 16 bytes instead of 33 in every row and index
entry that holds a user or session id (five places per stored message). SQLite keeps
them as text. Every id coach writes is 32 hex digits, which PostgreSQL reads as a uuid.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 00:40:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CHILDREN = (
    "phase_outputs",
    "session_conversations",
    "agent_steps",
    "session_state",
    "state_deltas",
)
_FOREIGN_KEYS = [("sessions", "user_id", "users")] + [
    (table, "session_id", "sessions") for table in _CHILDREN
]
_COLUMNS = [("users", "id"), ("sessions", "id"), ("phase_outputs", "id")] + [
    (table, column) for table, column, _ in _FOREIGN_KEYS
]


def _retype(type_: str, using: str) -> None:
    """Give every id column ``type_`` (``using`` converts a value), keys dropped meanwhile."""
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column, referred in _FOREIGN_KEYS:
        op.drop_constraint(f"fk_{table}_{column}_{referred}", table, type_="foreignkey")
    for table, column in _COLUMNS:
        converted = using.format(column=column)
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE {type_} USING {converted}")
    for table, column, referred in _FOREIGN_KEYS:
        op.create_foreign_key(
            f"fk_{table}_{column}_{referred}",
            table,
            referred,
            [column],
            ["id"],
            ondelete="CASCADE",
        )


def upgrade() -> None:
    _retype("uuid", "{column}::uuid")


def downgrade() -> None:
    _retype("varchar(32)", "replace({column}::text, '-', '')")
