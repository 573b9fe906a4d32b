"""``tests.postgres.Databases``: each PostgreSQL test gets a migrated database with no rows
and no key store, whether it is a new clone or one an earlier test left behind."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from coach.persistence import open_repository
from coach.persistence.migrate import head_revision
from tests.postgres import Databases, admin, connect, pg_url
from tests.support import MEMORY_SECRET, keys_of, keys_url

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def databases() -> Iterator[Databases]:
    made = Databases.create()
    try:
        yield made
    finally:
        made.close()


async def _fetch(name: str | None, query: str) -> list[asyncpg.Record]:
    """``query``'s rows, on database ``name`` (the admin database for ``None``)."""
    conn = await connect(name)
    try:
        rows: list[asyncpg.Record] = await conn.fetch(query)
        return rows
    finally:
        await conn.close()


def _columns(name: str) -> list[tuple[str, str]]:
    rows = asyncio.run(
        _fetch(
            name,
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY table_name, column_name",
        )
    )
    return [(row[0], row[1]) for row in rows]


def _key_store(name: str) -> Path:
    store = keys_url(pg_url(name))
    assert store is not None
    return Path(str(make_url(store).database))


async def _visit(name: str) -> tuple[int, bool]:
    """A person's session with one message (its id, from the sequence), written through
    coach's repository; whether that person was already known."""
    repo = await open_repository(pg_url(name), **keys_of(pg_url(name)), secret=MEMORY_SECRET)
    try:
        known = await repo.find_user("ada") is not None
        user = await repo.get_or_create_user("ada")
        session = await repo.create_session(user.id, "onboarding")
        return await repo.add_session_message(session.id, "user", "hello"), known
    finally:
        await repo.aclose()


def test_a_database_left_with_rows_is_handed_out_again_empty(databases: Databases) -> None:
    name = databases.take()
    schema = _columns(name)
    assert asyncio.run(_visit(name)) == (1, False)
    assert _key_store(name).exists()
    asyncio.run(admin("UPDATE alembic_version SET version_num = '0100_after'", database=name))
    databases.give_back(name)

    again = databases.take()
    try:
        assert again == name  # emptied, not cloned again
        assert not _key_store(again).exists()
        assert _columns(again) == schema
        version = asyncio.run(_fetch(again, "SELECT version_num FROM alembic_version"))
        assert [row[0] for row in version] == [head_revision()]
        # A new person, and the first message's id is 1 again, as in a new database.
        assert asyncio.run(_visit(again)) == (1, False)
    finally:
        databases.give_back(again)


@pytest.mark.parametrize(
    "statement",
    [
        "ALTER TABLE sessions ADD COLUMN tenant VARCHAR(32)",
        "DROP TABLE state_deltas",
        "CREATE INDEX sessions_by_room ON sessions (room)",
    ],
)
def test_a_database_whose_schema_changed_is_dropped(databases: Databases, statement: str) -> None:
    name = databases.take()
    schema = _columns(name)
    asyncio.run(admin(statement, database=name))
    _key_store(name).write_bytes(b"keys")
    databases.give_back(name)
    assert not _key_store(name).exists()  # dropped with its database

    again = databases.take()
    try:
        assert again != name
        assert _columns(again) == schema
        listed = asyncio.run(
            _fetch(None, f"SELECT count(*) FROM pg_database WHERE datname = '{name}'")
        )
        assert listed[0][0] == 0
    finally:
        databases.give_back(again)


async def _give_back_while_connected(databases: Databases, name: str) -> bool:
    """Give ``name`` back with a connection to it still open; whether that was ended."""
    held = await connect(name)
    try:
        await asyncio.to_thread(databases.give_back, name)
        with pytest.raises((asyncpg.PostgresError, OSError, asyncpg.InterfaceError)):
            await held.fetchval("SELECT 1")
        return True
    finally:
        held.terminate()


def test_a_database_with_a_connection_left_open_is_dropped(databases: Databases) -> None:
    name = databases.take()
    assert asyncio.run(_give_back_while_connected(databases, name))
    again = databases.take()
    try:
        assert again != name
    finally:
        databases.give_back(again)
