"""Persistence for coach: one async repository over SQLite or PostgreSQL.

Usage::

    from coach.persistence import open_repository

    repo = await open_repository(settings.database_url, secret=settings.memory_secret,
                                 create_schema=settings.is_embedded_sqlite)
    user = await repo.get_or_create_user("alice")
    session = await repo.create_session(user.id, "Make commuting less lonely")
    ...
    await repo.aclose()

Modules: :mod:`.schema` (models), :mod:`.engine` (engines, transactions, retries),
:mod:`.codec` (signed pickle of memory steps), :mod:`.migrate` (Alembic),
:mod:`.records` (what is returned), :mod:`.batch` (group-commit op shapes),
:mod:`.repository` (the repository).
"""

from __future__ import annotations

from ..state.resume import HistoryMessage, ResumeContext
from .batch import (
    AppendStepsOp,
    MessageOp,
    PhaseOutputOp,
    SessionUpdateOp,
    WriteOpLike,
    ZoneWriteOp,
)
from .codec import StepCodec
from .engine import create_engine
from .migrate import current_revision, ensure_schema, schema_diff, upgrade, upgrade_sync
from .records import (
    MessageRecord,
    PhaseOutputRecord,
    ResumeResult,
    SessionRecord,
    StateRecord,
    UserRecord,
)
from .repository import DEFAULT_PHASE_IDS, Repository, open_repository

__all__ = [
    "DEFAULT_PHASE_IDS",
    "AppendStepsOp",
    "MessageOp",
    "PhaseOutputOp",
    "SessionUpdateOp",
    "WriteOpLike",
    "ZoneWriteOp",
    "HistoryMessage",
    "MessageRecord",
    "PhaseOutputRecord",
    "Repository",
    "ResumeContext",
    "ResumeResult",
    "SessionRecord",
    "StateRecord",
    "StepCodec",
    "UserRecord",
    "create_engine",
    "current_revision",
    "ensure_schema",
    "open_repository",
    "schema_diff",
    "upgrade",
    "upgrade_sync",
]
