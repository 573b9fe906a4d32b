"""The person: lasting facts a user agreed coach may remember, and their deltas (SPEC §4.6).

Two new tables, both cascading from ``users`` so that erasing a person erases them.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 20:40:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from coach.persistence.schema import HexId

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "persons",
        sa.Column("user_id", HexId(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_persons_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("user_id", name=op.f("pk_persons")),
    )
    op.create_table(
        "person_deltas",
        sa.Column("user_id", HexId(), nullable=False),
        sa.Column("step", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("turn_id", sa.String(length=64), nullable=True),
        sa.Column("trigger", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("actor_id", sa.String(length=255), nullable=True),
        sa.Column("delta_type", sa.String(length=16), nullable=False),
        sa.Column("path", sa.String(length=255), nullable=False),
        sa.Column("action", sa.JSON(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "\"delta_type\" IN ('add', 'update', 'remove')",
            name=op.f("ck_person_deltas_delta_type"),
        ),
        sa.CheckConstraint(
            "\"source\" IN ('llm', 'user', 'system')", name=op.f("ck_person_deltas_source")
        ),
        sa.CheckConstraint(
            "\"trigger\" IN ('user_query', 'user_action', 'system')",
            name=op.f("ck_person_deltas_trigger"),
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_person_deltas_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("user_id", "step", name=op.f("pk_person_deltas")),
    )


def downgrade() -> None:
    op.drop_table("person_deltas")
    op.drop_table("persons")
