"""Users and sessions: race-safe users, newest-first sessions with progress, validation."""

from __future__ import annotations

import asyncio

import pytest

from coach.errors import InvalidWrite, SessionNotFound, StorageError
from coach.persistence import Repository
from coach.store import PhaseDone
from tests.support import update_session


async def test_get_or_create_user_is_idempotent_and_race_safe(repo: Repository) -> None:
    users = await asyncio.gather(*(repo.get_or_create_user("alice") for _ in range(10)))
    assert len({user.id for user in users}) == 1
    assert users[0].identity == "alice"
    assert users[0].created_at.tzinfo is not None


async def test_display_name_is_kept_unless_a_new_one_is_given(repo: Repository) -> None:
    first = await repo.get_or_create_user("p-123", "Alice")
    again = await repo.get_or_create_user("p-123")
    renamed = await repo.get_or_create_user("p-123", "Ally")
    assert first.id == again.id == renamed.id
    assert again.display_name == "Alice"
    assert renamed.display_name == "Ally"


async def test_user_sessions_newest_first_with_progress(repo: Repository) -> None:
    user = await repo.get_or_create_user("bob")
    other = await repo.get_or_create_user("carol")
    older = await repo.create_session(user.id, "first challenge")
    newer = await repo.create_session(user.id, "second challenge")
    await repo.create_session(other.id, "not bob's")
    for phase in ("challenge", "empathize"):
        await repo.save_phase_output(older.id, phase, phase.title(), "completed", output="x")
    await repo.save_phase_output(older.id, "define", "Define", "running")

    sessions = await repo.get_user_sessions(user.id)

    assert [s.id for s in sessions] == [newer.id, older.id]
    assert [s.completed_phases for s in sessions] == [0, 2]
    assert sessions[1].design_challenge == "first challenge"
    assert all(s.status == "in_progress" for s in sessions)


async def test_create_and_get_session(repo: Repository) -> None:
    user = await repo.get_or_create_user("dana")
    created = await repo.create_session(user.id)
    loaded = await repo.get_session(created.id)
    assert loaded == created
    assert await repo.get_session("no-such-session") is None


async def test_create_session_for_unknown_user_is_a_storage_error(repo: Repository) -> None:
    with pytest.raises(StorageError):
        await repo.create_session("no-such-user")


async def test_update_session_changes_given_fields_and_bumps_updated_at(repo: Repository) -> None:
    user = await repo.get_or_create_user("erin")
    session = await repo.create_session(user.id)
    updated = await update_session(
        repo, session.id, current_agent="DesignStrategist", current_phase_id="empathize"
    )
    assert updated.current_agent == "DesignStrategist"
    assert updated.current_phase_id == "empathize"
    assert updated.status == "in_progress"
    assert updated.updated_at >= session.updated_at
    assert updated.created_at == session.created_at

    done = await update_session(repo, session.id, status="completed")
    assert done.status == "completed"
    assert done.current_agent == "DesignStrategist"


async def test_invalid_status_is_refused_and_nothing_changes(repo: Repository) -> None:
    user = await repo.get_or_create_user("fay")
    session = await repo.create_session(user.id)
    with pytest.raises(InvalidWrite, match="Invalid session status: paused"):
        await update_session(repo, session.id, status="paused")
    assert await repo.get_session(session.id) == session


async def test_update_unknown_session(repo: Repository) -> None:
    with pytest.raises(SessionNotFound, match="^Session nope not found$"):
        await update_session(repo, "nope", status="failed")


async def test_a_session_created_with_its_first_phase_is_never_listed_without_it(
    repo: Repository,
) -> None:
    user = await repo.get_or_create_user("first-phase")
    done = PhaseDone("challenge", "Challenge", "SYS", "commuting", "commuting")
    session = await repo.create_session(user.id, "commuting", first_phase=done)
    [listed] = await repo.get_user_sessions(user.id)
    assert listed.completed_phases == session.completed_phases == 1
    [output] = await repo.get_phase_outputs(session.id)
    assert (output.status, output.system_prompt, output.output) == ("completed", "SYS", "commuting")
    assert (await repo.resume_session(session.id, user_id=user.id)).next_phase_id == "empathize"


@pytest.mark.parametrize("bogus", ["not-an-id", "", "A" * 32, "0" * 33, "x' OR '1'='1"])
async def test_an_id_that_is_no_id_finds_nothing_on_every_backend(
    repo: Repository, bogus: str
) -> None:
    # PostgreSQL stores ids as uuid: a malformed one must read as "not found" there too,
    # not fail the statement.
    user = await repo.get_or_create_user("ids")
    assert await repo.get_session(bogus) is None
    assert await repo.get_user_sessions(bogus) == []
    with pytest.raises(SessionNotFound):
        await repo.resume_session(bogus, user_id=user.id)
    with pytest.raises(SessionNotFound):
        await repo.add_session_message(bogus, "user", "hello")


async def test_a_user_is_found_by_id_and_an_id_that_is_no_id_finds_none(repo: Repository) -> None:
    user = await repo.get_or_create_user("alice", display_name="Alice")
    assert await repo.get_user(user.id) == user
    for nobody in ("f" * 32, "nope", "x\ud800"):
        assert await repo.get_user(nobody) is None
