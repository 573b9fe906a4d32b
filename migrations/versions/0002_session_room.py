"""Sessions remember their LiveKit room, so a reconnecting user continues the same session.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 00:30:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("room", sa.String(length=255), nullable=True))
        batch_op.create_index(
            batch_op.f("ix_sessions_user_id_room"), ["user_id", "room"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_sessions_user_id_room"))
        batch_op.drop_column("room")
