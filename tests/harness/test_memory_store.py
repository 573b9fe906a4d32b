"""``coach.testing.memory_store``: coach's own store in memory — migrated, independent of
any other, and gone (with its keys) when its block ends."""

from __future__ import annotations

from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from coach.errors import ConfigError, StorageError
from coach.persistence import Repository
from coach.persistence.migrate import head_revision
from coach.testing import memory_store
from tests.support import in_memory


def database_of(store: Repository) -> URL:
    """The URL of a store's database: its key store's, which is named after it
    (:func:`~coach.persistence.keystore.default_keys_url`)."""
    keys = store.vault.store.url
    return keys.set(database=str(keys.database).removesuffix(".keys"))


def tables(url: URL) -> list[str]:
    """The tables of the named in-memory database at ``url``, read from outside the store."""
    with closing(in_memory(url)) as conn:
        return [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]


def files_in(folder: Path) -> list[Path]:
    return list(folder.iterdir())


async def test_a_store_in_memory_is_migrated_and_keeps_what_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with memory_store() as store:
        user = await store.get_or_create_user("alice", "Alice")
        session = await store.create_session(user.id, "Make commuting less lonely")
        await store.add_session_message(session.id, "user", "I hate my commute")
        with closing(in_memory(database_of(store))) as conn:
            revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        assert revision == (head_revision(),)
        found = await store.find_user("alice")
        assert found is not None and found.display_name == "Alice"
        said = await store.get_session_conversation(session.id)
        assert [(m.role, m.content) for m in said] == [("user", "I hate my commute")]
        assert [s.id for s in await store.get_user_sessions(user.id)] == [session.id]
    assert files_in(tmp_path) == []  # no file was written


async def test_two_stores_open_at_once_share_nothing() -> None:
    async with memory_store() as first, memory_store() as second:
        alice = await first.get_or_create_user("alice")
        await first.create_session(alice.id, "one")
        assert await second.find_user("alice") is None
        assert await second.list_sessions() == []
        bob = await second.get_or_create_user("alice")  # the same identity, another person
        assert bob.id != alice.id
        assert await first.delete_user("alice") == 1
        assert (await second.find_user("alice")) == bob


async def test_the_database_and_its_keys_are_gone_when_the_block_ends() -> None:
    async with memory_store() as store:
        user = await store.get_or_create_user("alice")
        session = await store.create_session(user.id)
        url, keys = database_of(store), store.vault.store.url
        assert "sessions" in tables(url) and tables(keys) == ["data_keys"]
    assert tables(url) == [] and tables(keys) == []
    with pytest.raises(StorageError, match="closed"):
        await store.get_session(session.id)


async def test_an_erase_destroys_the_persons_key_in_the_key_store_in_memory() -> None:
    async with memory_store() as store:
        alice = await store.get_or_create_user("alice")
        bob = await store.get_or_create_user("bob")
        await store.create_session(alice.id, "private")
        with closing(in_memory(store.vault.store.url)) as keys:
            owners = "SELECT owner_id FROM data_keys"
            assert {alice.id, bob.id} <= {row[0] for row in keys.execute(owners)}
            assert await store.delete_user("alice") == 1
            held = {row[0] for row in keys.execute(owners)}
        assert alice.id not in held and bob.id in held
        assert await store.find_user("alice") is None


async def test_the_phases_the_clock_and_the_keys_can_be_given() -> None:
    fixed = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    async with memory_store(
        phase_ids=("goal", "plan"),
        clock=lambda: fixed,
        secret=b"a-test-secret-of-enough-bytes-0123",
        master_key="a-test-master-key-0123456789abcdefgh",
    ) as store:
        assert store.phase_ids == ("goal", "plan")
        user = await store.get_or_create_user("alice")
        session = await store.create_session(user.id)
        assert session.created_at == fixed
        await store.save_phase_output(session.id, "goal", "Goal", "completed", output="a goal")
        (progress,) = await store.get_user_sessions(user.id)
        assert progress.completed_phases == 1


async def test_a_master_key_too_short_is_refused() -> None:
    with pytest.raises(ConfigError, match="at least 32 characters"):
        async with memory_store(master_key="short"):
            pass
