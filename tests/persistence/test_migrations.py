"""Migrations: the models and the migration agree; upgrading is idempotent."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from coach.persistence import (
    create_engine,
    current_revision,
    ensure_schema,
    open_repository,
    schema_diff,
    upgrade,
)
from coach.persistence.migrate import head_revision


async def test_models_and_migrations_agree(database_url: str) -> None:
    assert await schema_diff(database_url) == []
    assert await current_revision(database_url) == head_revision()


async def test_upgrade_is_idempotent(blank_database_url: str) -> None:
    assert await current_revision(blank_database_url) is None
    await upgrade(blank_database_url)
    await upgrade(blank_database_url)
    assert await current_revision(blank_database_url) == head_revision() == "0002"
    assert await schema_diff(blank_database_url) == []


async def test_open_repository_can_create_the_schema(
    blank_database_url: str, memory_secret: bytes
) -> None:
    repo = await open_repository(blank_database_url, secret=memory_secret, create_schema=True)
    try:
        user = await repo.get_or_create_user("first-run")
        assert (await repo.create_session(user.id)).status == "in_progress"
    finally:
        await repo.aclose()


async def test_ensure_schema_creates_the_embedded_file_and_its_directory(tmp_path: Path) -> None:
    path = tmp_path / "data" / "dir" / "coach.db"
    await ensure_schema(f"sqlite:///{path}")
    assert path.exists()
    assert await current_revision(f"sqlite:///{path}") == head_revision()


async def test_sqlite_pragmas(sqlite_url: str, memory_secret: bytes) -> None:
    repo = await open_repository(sqlite_url, secret=memory_secret)
    try:
        async with repo.engine.connect() as conn:
            assert (await conn.scalar(text("PRAGMA journal_mode"))) == "wal"
            assert (await conn.scalar(text("PRAGMA foreign_keys"))) == 1
            assert (await conn.scalar(text("PRAGMA busy_timeout"))) >= 1000
    finally:
        await repo.aclose()


async def test_0001_database_upgrades_to_head_keeping_sessions(
    blank_database_url: str, memory_secret: bytes
) -> None:
    await upgrade(blank_database_url, "0001")
    assert await current_revision(blank_database_url) == "0001"
    engine = create_engine(blank_database_url)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO users (id, identity, created_at, updated_at) "
                "VALUES ('u1', 'old', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            )
        )
        await conn.execute(
            text(
                "INSERT INTO sessions (id, user_id, status, created_at, updated_at) "
                "VALUES ('s1', 'u1', 'in_progress', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            )
        )
    await engine.dispose()
    await upgrade(blank_database_url)
    repo = await open_repository(blank_database_url, secret=memory_secret)
    try:
        session = await repo.get_session("s1")
        assert session is not None and session.room is None
        assert (await repo.update_session("s1", room="r1")).room == "r1"
        assert (await repo.find_room_session("u1", "r1")).id == "s1"  # type: ignore[union-attr]
    finally:
        await repo.aclose()
