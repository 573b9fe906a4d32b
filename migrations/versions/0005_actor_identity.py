"""``state_deltas.actor_id`` holds a whole identity (up to 255 characters, as
``users.identity``): a user action's actor is the caller's identity, and on PostgreSQL
a long one was refused (and fenced the session) while SQLite kept it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 01:40:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # SQLite copies the table (nothing refers to state_deltas, so nothing cascades).
    with op.batch_alter_table("state_deltas") as batch:
        batch.alter_column("actor_id", type_=sa.String(255), existing_nullable=True)


def downgrade() -> None:
    with op.batch_alter_table("state_deltas") as batch:
        batch.alter_column(
            "actor_id",
            type_=sa.String(64),
            existing_nullable=True,
            postgresql_using="left(actor_id, 64)",
        )
