"""A rolling deploy: the running release keeps working on a database a newer release
migrated, as long as that migration was additive; anything else is refused in one line.

(Not on the in-memory database: it lives and dies with one process of one release.)"""

from __future__ import annotations

import asyncio
import re

import pytest
from sqlalchemy import text

from coach.errors import ConfigError
from coach.persistence import create_engine, current_revision, open_repository, upgrade
from coach.persistence.migrate import head_revision, require_current
from coach.surfaces.health import DatabaseHealth
from tests.support import MEMORY_SECRET, NOT_IN_MEMORY, keys_of


async def newer_release(url: str, *statements: str, revision: str = "0099_next") -> None:
    """What a newer release's ``db upgrade`` leaves: its statements, its revision."""
    engine = create_engine(url, pool_size=1, max_overflow=0)
    try:
        async with engine.begin() as conn:
            for statement in statements:
                await conn.execute(text(statement))
            await conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    finally:
        await engine.dispose()


@NOT_IN_MEMORY
async def test_an_additive_migration_of_a_newer_release_keeps_this_release_running(
    database_url: str,
) -> None:
    await newer_release(
        database_url,
        "ALTER TABLE sessions ADD COLUMN retention_until TIMESTAMP NULL",
        "ALTER TABLE session_conversations ADD COLUMN language VARCHAR(16) NOT NULL DEFAULT 'en'",
        "CREATE TABLE session_tags (session_id VARCHAR(32), tag VARCHAR(64))",
        "CREATE INDEX ix_sessions_updated_at_id ON sessions (updated_at, id)",
    )
    await require_current(database_url)  # starts, and the health check says usable
    health = DatabaseHealth(lambda: database_url, lambda server: 0.25, interval=0.0)
    assert await asyncio.to_thread(health.load, None) == 0.25 and health.usable

    # ... and it works: a session with a message, written and read back.
    repo = await open_repository(
        database_url, **keys_of(database_url), secret=MEMORY_SECRET, check_schema=True
    )
    try:
        user = await repo.get_or_create_user("ada")
        session = await repo.create_session(user.id)
        await repo.add_session_message(session.id, "user", "Hello")
        assert [m.content for m in await repo.get_session_conversation(session.id)] == ["Hello"]
    finally:
        await repo.aclose()


@pytest.mark.parametrize(
    ("statement", "says"),
    [
        (
            "ALTER TABLE sessions ADD COLUMN tenant VARCHAR(32) NOT NULL DEFAULT 'x'",
            None,  # a default: this release's inserts still work
        ),
        (
            "ALTER TABLE session_conversations ADD COLUMN tenant VARCHAR(32) NOT NULL",
            "column session_conversations.tenant takes no NULL and has no default",
        ),
        (
            "ALTER TABLE session_conversations DROP COLUMN interrupted",
            "column session_conversations.interrupted is missing",
        ),
        ("DROP TABLE state_deltas", "table state_deltas is missing"),
        (
            "CREATE UNIQUE INDEX ux_one_message_per_role ON session_conversations "
            "(session_id, role)",
            "unique index ux_one_message_per_role on session_conversations was added",
        ),
    ],
)
@NOT_IN_MEMORY
async def test_a_newer_release_that_changed_what_this_release_uses_is_refused(
    database_url: str, statement: str, says: str | None
) -> None:
    await newer_release(database_url, statement)
    if says is None:
        await require_current(database_url)
        return
    with pytest.raises(ConfigError) as refused:
        await require_current(database_url)
    message = str(refused.value)
    assert "revision 0099_next of a newer release" in message and says in message
    assert "\n" not in message
    health = DatabaseHealth(lambda: database_url, lambda server: 0.25, interval=0.0)
    assert (
        await asyncio.to_thread(health.load, None) == 1.0
    )  # full: LiveKit dispatches to the new release's workers


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("statement", "says"),
    [
        (
            "ALTER TABLE session_conversations ALTER COLUMN role TYPE VARCHAR(8)",
            "column session_conversations.role changed type",
        ),
        (
            "ALTER TABLE session_conversations ALTER COLUMN phase_id SET NOT NULL",
            "column session_conversations.phase_id changed whether it takes NULL",
        ),
    ],
)
async def test_a_newer_release_that_changed_a_column_is_refused(
    postgres_url: str, statement: str, says: str
) -> None:
    # (SQLite cannot alter a column in place: PostgreSQL only.)
    await newer_release(postgres_url, statement)
    with pytest.raises(ConfigError, match=re.escape(says)):
        await require_current(postgres_url)


@NOT_IN_MEMORY
async def test_a_database_behind_this_release_says_to_upgrade(database_url: str) -> None:
    await newer_release(database_url, revision="0005")
    with pytest.raises(
        ConfigError,
        match=f"at revision 0005; this release needs revision "
        f"{head_revision()}. Run: python -m coach db upgrade",
    ):
        await require_current(database_url)


@NOT_IN_MEMORY
async def test_upgrade_leaves_a_newer_release_s_database_as_it_is(database_url: str) -> None:
    # An older release's `db upgrade`, or an embedded file opened by an older release: the
    # database is not touched; it is used if compatible and refused in one line if not.
    await newer_release(database_url, "ALTER TABLE sessions ADD COLUMN retention_until TEXT")
    await upgrade(database_url)
    assert await current_revision(database_url) == "0099_next"
    repo = await open_repository(
        database_url, **keys_of(database_url), secret=MEMORY_SECRET, create_schema=True
    )
    await repo.aclose()

    await newer_release(database_url, "DROP TABLE state_deltas", revision="0100_after")
    with pytest.raises(ConfigError, match="table state_deltas is missing"):
        await upgrade(database_url)
    assert await current_revision(database_url) == "0100_after"
