"""Migrations: the tables and the migrations agree; upgrading is idempotent."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path

import pytest
from livekit.agents import llm
from sqlalchemy import CheckConstraint, UniqueConstraint, inspect, text
from sqlalchemy.engine import Connection

from coach.errors import ConfigError
from coach.persistence import (
    StepCodec,
    create_engine,
    current_revision,
    ensure_schema,
    open_repository,
    schema_diff,
    upgrade,
)
from coach.persistence.keystore import Vault
from coach.persistence.migrate import alembic_config, downgrade, head_revision, scripted_head
from coach.persistence.schema import metadata
from coach.state import person
from coach.state.zones import DeltaSpec
from tests.support import append_steps, keys_of, raw_sql, update_session


def vault_of(url: str) -> Vault:
    """The key store the test repositories of ``url`` use."""
    return Vault.open(url, **keys_of(url))


U1, S1, P1 = "a1" * 16, "b2" * 16, "c3" * 16
"""Ids as coach writes them (32 hex digits: a uuid on PostgreSQL)."""


async def test_tables_and_migrations_agree(database_url: str) -> None:
    assert await schema_diff(database_url) == []
    assert await current_revision(database_url) == head_revision()


def _stored_constraints(conn: Connection) -> set[tuple[str, str | None]]:
    found = inspect(conn)
    return {
        (table, constraint["name"])
        for table in metadata.tables
        for constraint in [
            *found.get_check_constraints(table),
            *found.get_unique_constraints(table),
        ]
    }


async def test_every_constraint_the_tables_name_is_in_the_database_by_that_name(
    database_url: str,
) -> None:
    # A migration drops or alters a constraint by its name (Alembic's comparison does
    # not look at check constraints): the tables must name them as the database does.
    named = {
        (table.name, constraint.name)
        for table in metadata.tables.values()
        for constraint in table.constraints
        if isinstance(constraint, CheckConstraint | UniqueConstraint)
    }
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            stored = await conn.run_sync(_stored_constraints)
    finally:
        await engine.dispose()
    assert named == stored
    assert ("person_deltas", "ck_person_deltas_trigger") in named


async def test_upgrade_is_idempotent(blank_database_url: str) -> None:
    assert await current_revision(blank_database_url) is None
    await upgrade(blank_database_url)
    await upgrade(blank_database_url)
    assert await current_revision(blank_database_url) == head_revision() == "0008"
    assert await schema_diff(blank_database_url) == []


async def test_alembic_s_own_command_migrates_as_db_upgrade_does(blank_database_url: str) -> None:
    # `alembic upgrade head` with no connection handed over: the environment opens one.
    from alembic import command

    await asyncio.to_thread(command.upgrade, alembic_config(blank_database_url), "head")
    assert await current_revision(blank_database_url) == head_revision()
    assert await schema_diff(blank_database_url) == []


def test_the_head_read_without_alembic_is_alembic_s_head() -> None:
    # A start on a database at this head skips Alembic (its import is most of the start).
    assert scripted_head() == head_revision()


async def test_a_database_behind_the_head_is_still_migrated(blank_database_url: str) -> None:
    # The quick check says "at head" only when it is: anything else goes through Alembic.
    await upgrade(blank_database_url, "0006")
    await upgrade(blank_database_url)
    assert await current_revision(blank_database_url) == head_revision()
    assert await schema_diff(blank_database_url) == []


async def test_open_repository_can_create_the_schema(
    blank_database_url: str, memory_secret: bytes
) -> None:
    repo = await open_repository(
        blank_database_url, **keys_of(blank_database_url), secret=memory_secret, create_schema=True
    )
    try:
        user = await repo.get_or_create_user("first-run")
        assert (await repo.create_session(user.id)).status == "in_progress"
    finally:
        await repo.aclose()


async def test_ensure_schema_creates_the_embedded_file(tmp_path: Path) -> None:
    path = tmp_path / "coach.db"
    await ensure_schema(f"sqlite:///{path}")
    assert path.exists()
    assert await current_revision(f"sqlite:///{path}") == head_revision()


async def test_a_sqlite_path_in_a_missing_directory_is_refused_not_created(
    tmp_path: Path,
) -> None:
    # A typo in the path must not start an empty database somewhere new.
    path = tmp_path / "data" / "dir" / "coach.db"
    with pytest.raises(ConfigError, match="its directory .* does not exist"):
        await ensure_schema(f"sqlite:///{path}")
    assert not (tmp_path / "data").exists()


async def test_a_missing_directory_is_named_by_the_database_typed_not_its_key_store(
    tmp_path: Path, memory_secret: bytes
) -> None:
    path = tmp_path / "data" / "coach.db"
    with pytest.raises(ConfigError) as refused:
        await open_repository(
            f"sqlite:///{path}", master_keys=keys_of("sqlite://")["master_keys"],
            secret=memory_secret,
        )  # fmt: skip
    assert f"the SQLite database {path} cannot be opened" in str(refused.value)
    assert "keys" not in str(refused.value)
    assert not (tmp_path / "data").exists()


async def test_sqlite_pragmas(sqlite_url: str, memory_secret: bytes) -> None:
    repo = await open_repository(sqlite_url, **keys_of(sqlite_url), secret=memory_secret)
    try:
        async with raw_sql(repo) as conn:
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
                f"VALUES ('{U1}', 'old', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            )
        )
        await conn.execute(
            text(
                "INSERT INTO sessions (id, user_id, status, created_at, updated_at) "
                f"VALUES ('{S1}', '{U1}', 'in_progress', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            )
        )
    await engine.dispose()
    await upgrade(blank_database_url, vault=vault_of(blank_database_url))
    repo = await open_repository(
        blank_database_url, **keys_of(blank_database_url), secret=memory_secret
    )
    try:
        session = await repo.get_session(S1)
        assert session is not None and session.room is None
        assert (await update_session(repo, S1, room="r1")).room == "r1"
        assert (await repo.find_room_session(U1, "r1")).id == S1  # type: ignore[union-attr]
    finally:
        await repo.aclose()


async def test_a_0002_database_with_rows_upgrades_and_resumes(
    blank_database_url: str, memory_secret: bytes
) -> None:
    """A database as the previous release wrote it — plain-pickle (v1) memory steps, no
    stored count, the old conversation index — upgrades, converts and resumes."""
    items: list[object] = [
        llm.ChatMessage(role="user", content=["Make commuting less lonely " * 8]),
        llm.FunctionCall(call_id="c1", name="capture_design_challenge", arguments="{}"),
        llm.FunctionCallOutput(
            call_id="c1", name="capture_design_challenge", output="ok", is_error=False
        ),
        llm.AgentHandoff(old_agent_id="coach", new_agent_id="strategist"),
        llm.ChatMessage(role="assistant", content=["Let's empathize with commuters. " * 12]),
    ]
    await upgrade(blank_database_url, "0002")
    codec = StepCodec(memory_secret)
    v1 = [codec.sign(S1, seq, pickle.dumps(item, 5), version=1) for seq, item in enumerate(items)]
    engine = create_engine(blank_database_url)
    now = "2026-11-01 10:00:00"
    async with engine.begin() as conn:
        for statement in (
            "INSERT INTO users (id, identity, created_at, updated_at) "
            f"VALUES ('{U1}', 'old', '{now}', '{now}')",
            "INSERT INTO sessions (id, user_id, status, created_at, updated_at) "
            f"VALUES ('{S1}', '{U1}', 'in_progress', '{now}', '{now}')",
            "INSERT INTO phase_outputs (id, session_id, phase_id, phase_name, status, "
            f"system_prompt, user_input, output, created_at, updated_at) VALUES ('{P1}', '{S1}', "
            f"'challenge', 'Challenge', 'completed', 'sys', 'in', 'out', '{now}', '{now}')",
            "INSERT INTO session_conversations (session_id, role, content, interrupted, "
            f"created_at) VALUES ('{S1}', 'user', 'hello', false, '{now}')",
            "INSERT INTO session_state (session_id, step, data, template, view, created_at, "
            f"updated_at) VALUES ('{S1}', 0, '{{}}', '{{}}', '{{}}', '{now}', '{now}')",
        ):
            await conn.execute(text(statement))
        for step in v1:
            await conn.execute(
                text(
                    "INSERT INTO agent_steps (session_id, seq, codec, version, signature, payload, "
                    f"created_at) VALUES ('{S1}', :seq, :codec, 1, :sig, :payload, '{now}')"
                ),
                {
                    "seq": step.seq,
                    "codec": step.codec,
                    "sig": step.signature,
                    "payload": step.payload,
                },
            )
    await engine.dispose()

    await upgrade(blank_database_url, secret=memory_secret, vault=vault_of(blank_database_url))
    repo = await open_repository(
        blank_database_url, **keys_of(blank_database_url), secret=memory_secret
    )
    try:
        async with raw_sql(repo) as conn:
            rows = (
                await conn.execute(text("SELECT version, payload FROM agent_steps ORDER BY seq"))
            ).all()
        assert {version for version, _ in rows} == {2}
        assert sum(len(p) for _, p in rows) < sum(len(s.payload) for s in v1) / 2
        assert await repo.agent_step_count(S1) == len(items)
        result = await repo.resume_session(S1, user_id=U1)
        assert result.memory == items and result.stored_steps == len(items)
        assert [m.content for m in result.context.history][-1] == "hello"
        await append_steps(repo, S1, ["next"], start=len(items))  # appends after
        assert await repo.load_agent_state(S1, since=len(items)) == ["next"]
    finally:
        await repo.aclose()
    # And back: the downgrade re-encodes the steps as the old release reads them.
    await upgrade_to(blank_database_url, "0002", memory_secret)
    engine = create_engine(blank_database_url)
    async with engine.connect() as conn:
        old = (await conn.execute(text("SELECT seq, version, payload FROM agent_steps"))).all()
    await engine.dispose()
    assert {version for _, version, _ in old} == {1}
    assert [pickle.loads(payload) for _, _, payload in sorted(old)] == [*items, "next"]


async def upgrade_to(url: str, revision: str, secret: bytes) -> None:
    """Downgrade ``url`` to ``revision`` (the operator going back to an older release)."""
    vault = vault_of(url)
    try:
        await downgrade(url, revision, secret=secret, vault=vault)
    finally:
        await vault.aclose()


async def test_a_0006_database_upgrades_to_remember_the_person_and_back(
    blank_database_url: str, memory_secret: bytes
) -> None:
    """0007 adds the person tables to a database with people in it; the database itself
    erases them with the user (ON DELETE CASCADE), and the downgrade drops them."""
    await upgrade(blank_database_url, "0006")
    engine = create_engine(blank_database_url)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO users (id, identity, created_at, updated_at) "
                f"VALUES ('{U1}', 'old', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
            )
        )
    await engine.dispose()
    await upgrade(blank_database_url, vault=vault_of(blank_database_url))
    repo = await open_repository(
        blank_database_url, **keys_of(blank_database_url), secret=memory_secret
    )
    try:
        assert (await repo.get_person(U1)).step == 0  # nobody remembered anything yet
        value, change = person.remember(person.empty_person(), "role", "leads a team of four")
        spec = DeltaSpec(trigger="user_query", source="llm", delta_type="add", path=change.path)
        await repo.update_person(U1, dict(value), spec, expected_step=0)
        async with raw_sql(repo, begin=True) as conn:  # the row, not coach's delete_user
            await conn.execute(text(f"DELETE FROM users WHERE id = '{U1}'"))
        async with raw_sql(repo) as conn:
            for table in ("persons", "person_deltas"):
                assert await conn.scalar(text(f"SELECT count(*) FROM {table}")) == 0
    finally:
        await repo.aclose()
    await upgrade_to(blank_database_url, "0006", memory_secret)
    assert await current_revision(blank_database_url) == "0006"
    engine = create_engine(blank_database_url)
    try:
        async with engine.connect() as conn:
            tables = await conn.run_sync(lambda sync: inspect(sync).get_table_names())
    finally:
        await engine.dispose()
    assert "users" in tables and not {"persons", "person_deltas"} & set(tables)
