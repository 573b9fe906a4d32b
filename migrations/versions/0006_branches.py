"""Branching: a session may branch from a completed phase of another (SPEC §8a).

``sessions`` gains its parent and the phase it branched from; ``phase_outputs`` gains
where each completed phase ends (memory position, state step, the zones then), recorded
when the turn that completed it is over, so a branch starts at an exact, whole point.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 02:30:00+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from coach.persistence.schema import HexId

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Added columns only: SQLite alters in place (no table copy, nothing cascades).
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("parent_session_id", HexId(), nullable=True))
        batch.add_column(sa.Column("branched_from_phase", sa.String(64), nullable=True))
    with op.batch_alter_table("phase_outputs") as batch:
        batch.add_column(sa.Column("memory_end", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("state_end", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("state_snapshot", sa.JSON(), nullable=True))


def downgrade() -> None:
    for table, column in (
        ("phase_outputs", "state_snapshot"),
        ("phase_outputs", "state_end"),
        ("phase_outputs", "memory_end"),
        ("sessions", "branched_from_phase"),
        ("sessions", "parent_session_id"),
    ):
        op.drop_column(table, column)  # not batch: no table copy on SQLite
