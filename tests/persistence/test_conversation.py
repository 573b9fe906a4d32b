"""The conversation (zone): role validation, phase filter, ordering, interruption, cascade."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from coach.errors import InvalidRole, SessionNotFound
from coach.persistence import Repository
from tests.support import raw_sql

OpenRepo = Callable[..., Awaitable[Repository]]


async def _session(repo: Repository) -> str:
    user = await repo.get_or_create_user("talker")
    return (await repo.create_session(user.id)).id


async def test_messages_round_trip_in_order(repo: Repository) -> None:
    sid = await _session(repo)
    ids = [
        await repo.add_session_message(sid, "system", "You are a coach."),
        await repo.add_session_message(sid, "user", "Hi", phase_id="challenge"),
        await repo.add_session_message(sid, "assistant", "Hello!", phase_id="challenge"),
    ]
    messages = await repo.get_session_conversation(sid)
    assert [m.id for m in messages] == ids
    assert [(m.role, m.content, m.phase_id) for m in messages] == [
        ("system", "You are a coach.", None),
        ("user", "Hi", "challenge"),
        ("assistant", "Hello!", "challenge"),
    ]
    assert all(m.session_id == sid and not m.interrupted for m in messages)
    assert ids == sorted(ids)


@pytest.mark.parametrize("role", ["tool", "User", "", "developer"])
async def test_invalid_role_is_refused_with_the_spec_message(repo: Repository, role: str) -> None:
    sid = await _session(repo)
    with pytest.raises(InvalidRole) as caught:
        await repo.add_session_message(sid, role, "text")
    assert str(caught.value) == f"Invalid role: {role}. Must be user, assistant, or system"
    with pytest.raises(InvalidRole):
        await repo.add_session_message(sid, role, "text")
    assert await repo.get_session_conversation(sid) == []


async def test_phase_filter(repo: Repository) -> None:
    sid = await _session(repo)
    await repo.add_session_message(sid, "user", "a", phase_id="empathize")
    await repo.add_session_message(sid, "user", "b", phase_id="define")
    await repo.add_session_message(sid, "assistant", "c", phase_id="empathize")
    await repo.add_session_message(sid, "user", "d")
    empathize = await repo.get_session_conversation(sid, phase_id="empathize")
    assert [m.content for m in empathize] == ["a", "c"]
    assert [m.content for m in await repo.get_session_conversation(sid, phase_id="define")] == ["b"]
    assert len(await repo.get_session_conversation(sid)) == 4
    assert await repo.get_session_conversation(sid, phase_id="ideate") == []


async def test_same_timestamp_is_ordered_by_insertion(
    database_url: str, open_repo: OpenRepo
) -> None:
    fixed = datetime(2030, 1, 1, 12, tzinfo=UTC)
    repo = await open_repo(database_url, clock=lambda: fixed)
    sid = await _session(repo)
    contents = [f"message {i}" for i in range(12)]
    for i, content in enumerate(contents):
        await repo.add_session_message(sid, "user" if i % 2 else "assistant", content)
    messages = await repo.get_session_conversation(sid)
    assert [m.content for m in messages] == contents
    assert {m.created_at for m in messages} == {fixed}


async def test_interrupted_flag_is_stored(repo: Repository) -> None:
    sid = await _session(repo)
    await repo.add_session_message(sid, "assistant", "Let me expl", interrupted=True)
    await repo.add_session_message(sid, "user", "wait")
    flags = [m.interrupted for m in await repo.get_session_conversation(sid)]
    assert flags == [True, False]


async def test_messages_of_unknown_session_are_refused(repo: Repository) -> None:
    with pytest.raises(SessionNotFound):
        await repo.add_session_message("missing", "user", "hello")


async def test_deleting_a_session_deletes_its_messages(repo: Repository) -> None:
    sid = await _session(repo)
    await repo.add_session_message(sid, "user", "bye")
    async with raw_sql(repo, begin=True) as conn:
        await conn.execute(text("DELETE FROM sessions WHERE id = :id"), {"id": sid})
        left = await conn.scalar(
            text("SELECT count(*) FROM session_conversations WHERE session_id = :id"),
            {"id": sid},
        )
    assert left == 0


async def test_text_no_database_can_store_is_kept_with_replacement_characters(
    repo: Repository,
) -> None:
    user = await repo.get_or_create_user("surrogates")
    sid = (await repo.create_session(user.id)).id
    await repo.add_session_message(sid, "assistant", "half an emoji \ud83d and a NUL \x00!")
    await repo.save_phase_output(sid, "challenge", "Challenge", "completed", output="out \ud800")
    [message] = await repo.get_session_conversation(sid)
    assert message.content == "half an emoji \ufffd and a NUL \ufffd!"
    [output] = await repo.get_phase_outputs(sid)
    assert output.output == "out \ufffd"


@pytest.mark.parametrize("size", [0, 1, 3, 7, 8])
async def test_pages_cover_the_conversation_once_in_order(repo: Repository, size: int) -> None:
    sid = await _session(repo)
    for i in range(size):
        await repo.add_session_message(sid, "user" if i % 2 == 0 else "assistant", f"m{i}")
    seen: list[str] = []
    after = None
    while page := await repo.get_session_conversation(sid, after_id=after, limit=4):
        assert len(page) <= 4
        seen += [m.content for m in page]
        after = page[-1].id
    assert seen == [f"m{i}" for i in range(size)]
