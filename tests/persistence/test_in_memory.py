"""Databases in memory: a named one is reached by the migrations and by every repository
opened on it while it is held; ``sqlite://``, which nothing else can reach, is refused
where a second connection would be needed."""

from __future__ import annotations

from contextlib import closing

import pytest
from sqlalchemy.engine import make_url

from coach.errors import ConfigError
from coach.persistence import current_revision, open_repository, schema_diff
from coach.persistence.engine import Database, is_memory
from coach.persistence.inmemory import memory_database, memory_url
from coach.persistence.keystore import default_keys_url
from coach.persistence.migrate import head_revision
from tests.support import MEMORY_SECRET, in_memory, keys_of


@pytest.mark.parametrize(
    ("url", "memory"),
    [
        ("sqlite://", True),
        ("sqlite:///:memory:", True),
        ("sqlite+aiosqlite:///file:/coach-x?vfs=memdb&uri=true", True),
        ("sqlite:///file:coach-x?mode=memory&cache=shared&uri=true", True),
        ("sqlite:///coach.db", False),
        ("sqlite:///file:coach.db?mode=ro&uri=true", False),
        ("postgresql://coach@127.0.0.1/coach", False),
    ],
)
def test_which_urls_are_in_memory(url: str, memory: bool) -> None:
    assert is_memory(url) is memory


def test_a_named_database_keeps_its_keys_beside_it_in_memory() -> None:
    url = memory_url()
    keys = default_keys_url(url)
    assert keys is not None and is_memory(keys)
    assert keys.database == f"{url.database}.keys" and keys != url
    assert memory_url().database != url.database  # every one is new


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
async def test_a_database_nothing_else_can_reach_is_refused_for_migrations(url: str) -> None:
    # Each connection to it would be a new, empty database: migrating one would leave
    # the repository's without a schema.
    with pytest.raises(ConfigError, match=r"new, empty database.*memory_store\(\)"):
        await open_repository(url, **keys_of(url), secret=MEMORY_SECRET, create_schema=True)
    with pytest.raises(ConfigError, match="memory_store"):
        await current_revision(url)


async def test_an_anonymous_database_still_runs_units_on_its_one_connection() -> None:
    database = Database("sqlite://")
    try:
        await database.run(lambda c: c.exec_driver_sql("CREATE TABLE t (x)"), write=True, what="t")
        await database.run(
            lambda c: c.exec_driver_sql("INSERT INTO t VALUES (1)"), write=True, what="t"
        )
        count = await database.run(
            lambda c: c.exec_driver_sql("SELECT count(*) FROM t").scalar(), write=False, what="t"
        )
        assert count == 1
    finally:
        await database.dispose()


async def test_a_blank_database_in_memory_is_migrated_by_create_schema() -> None:
    async with memory_database(migrated=False) as url:
        assert await current_revision(url) is None
        repo = await open_repository(
            url, **keys_of(str(url)), secret=MEMORY_SECRET, create_schema=True
        )
        try:
            user = await repo.get_or_create_user("first-run")
            assert (await repo.create_session(user.id)).status == "in_progress"
        finally:
            await repo.aclose()
        assert await current_revision(url) == head_revision()
        assert await schema_diff(url) == []


async def test_what_is_written_outlives_its_repository_until_the_block_ends() -> None:
    async with memory_database() as url:
        repo = await open_repository(url, **keys_of(str(url)), secret=MEMORY_SECRET)
        try:
            user = await repo.get_or_create_user("alice")
            session = await repo.create_session(user.id, "kept")
        finally:
            await repo.aclose()
        repo = await open_repository(url, **keys_of(str(url)), secret=MEMORY_SECRET)
        try:
            found = await repo.get_session(session.id)
            assert found is not None and found.design_challenge == "kept"
        finally:
            await repo.aclose()
    with closing(in_memory(url)) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)
    keys = make_url(str(default_keys_url(url)))
    with closing(in_memory(keys)) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)
