"""Persistence for coach: the :class:`~coach.store.Store` protocol over SQLite or
PostgreSQL with SQLAlchemy 2 (async, Core statements).

Usage::

    from coach.persistence import open_repository

    repo = await open_repository(settings.database_url, secret=settings.memory_secret,
                                 master_keys=settings.master_keys,
                                 keys_url=settings.keys_url,
                                 create_schema=settings.is_embedded_sqlite)
    user = await repo.get_or_create_user("alice")
    session = await repo.create_session(user.id, "Make commuting less lonely")
    ...
    await repo.aclose()

Modules: :mod:`.repository` (the façade with the seed names), :mod:`.batch` (the one
write path), one module per aggregate — :mod:`.sessions`, :mod:`.phases`,
:mod:`.conversation`, :mod:`.memory`, :mod:`.zones`, :mod:`.resume` — and
:mod:`.schema` (the tables), :mod:`.sql` (shared statement helpers), :mod:`.engine`
(engines, transactions, retries), :mod:`.failures` (which driver errors pass by
themselves), :mod:`.codec` (signed pickle of memory steps),
:mod:`.migrate` (Alembic), :mod:`.crypto` (sealing personal fields with each person's
key), :mod:`.keystore` (the data keys, in a database apart from the data) and
:mod:`.owners` (whose key seals a session's rows).
"""

from __future__ import annotations

from ..store import (
    HistoryMessage,
    MessageRecord,
    PhaseOutputRecord,
    ResumeContext,
    ResumeResult,
    SessionRecord,
    StateRecord,
    UserRecord,
)
from .codec import StepCodec
from .engine import Database, create_engine
from .migrate import current_revision, ensure_schema, schema_diff, upgrade, upgrade_sync
from .repository import Repository, open_repository

__all__ = [
    "Database",
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
