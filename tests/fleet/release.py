"""The next release, for the drill's rolling deploy: this code plus one additive migration.

:func:`next_release` copies the ``coach`` package with its data beside it, as a wheel
ships it (``coach/_data``: prompts, ``alembic.ini``, migrations — the packaged data wins
over the checkout's, see ``coach._resources``), and adds :data:`MIGRATION` after the
checkout's newest revision. A process started with ``PYTHONPATH`` at the returned
directory runs that release: its ``db upgrade`` applies the migration, and its start-up
check wants the database at the new revision. Processes started without it run this
checkout — the release that is deployed while the new one rolls out.

The migration is what a next release could ship for retention (``sessions prune``
filters and orders by ``updated_at``): a nullable column and an index, both additive —
the running release's statements name their columns and never see either.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from coach.persistence.migrate import head_revision

ROOT = Path(__file__).resolve().parents[2]
REVISION = "fleet_drill"
INDEX = "ix_sessions_updated_at_id"
COLUMN = "retention_until"

MIGRATION = '''"""Retention: an index for pruning by age, and a per-session retention date.

Written by tests/fleet/release.py for the fleet drill; not a migration of this checkout.

Revision ID: {revision}
Revises: {down}
"""

import sqlalchemy as sa
from alembic import op

revision = "{revision}"
down_revision = "{down}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("{column}", sa.DateTime(timezone=True), nullable=True))
    op.create_index("{index}", "sessions", ["updated_at", "id"])


def downgrade() -> None:
    op.drop_index("{index}", table_name="sessions")
    op.drop_column("sessions", "{column}")
'''


def next_release(directory: Path) -> Path:
    """Build the next release under ``directory``; returns the path to put on PYTHONPATH."""
    down = head_revision()
    assert down is not None
    release = directory / "release-next"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    package = release / "coach"
    shutil.copytree(ROOT / "src" / "coach", package, ignore=ignore)
    data = package / "_data"
    shutil.copytree(ROOT / "migrations", data / "migrations", ignore=ignore)
    shutil.copytree(ROOT / "prompts", data / "prompts", ignore=ignore)
    shutil.copyfile(ROOT / "alembic.ini", data / "alembic.ini")
    script = MIGRATION.format(revision=REVISION, down=down, column=COLUMN, index=INDEX)
    (data / "migrations" / "versions" / f"{REVISION}.py").write_text(script)
    return release
