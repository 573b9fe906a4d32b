"""write_batch: the recorder's group commit — all ops in order in one transaction."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from livekit.agents import llm
from sqlalchemy import text

from coach.errors import InvalidRole, InvalidWrite, SessionNotFound, StaleWrite
from coach.persistence import Repository
from coach.store import AddMessage, AppendSteps, SavePhaseOutput, UpdateSession
from tests.support import raw_sql


async def _session(repo: Repository) -> str:
    user = await repo.get_or_create_user("batcher")
    return (await repo.create_session(user.id)).id


async def test_a_batch_applies_every_op_in_order(repo: Repository) -> None:
    sid = await _session(repo)
    items = tuple(llm.ChatMessage(role="user", content=[f"m{i}"]) for i in range(4))
    await repo.write_batch(
        [
            SavePhaseOutput(sid, "challenge", "Challenge", "running", system_prompt="SYS"),
            AddMessage(sid, "user", "hi", "challenge"),
            AppendSteps(sid, 0, items[:2]),
            AddMessage(sid, "assistant", "hel", "challenge", interrupted=True),
            AppendSteps(sid, 2, items[2:]),
            SavePhaseOutput(sid, "challenge", "Challenge", "completed", output="done"),
            UpdateSession(sid, {"current_agent": "strategist", "current_phase_id": "empathize"}),
        ]
    )
    [output] = await repo.get_phase_outputs(sid)
    assert (output.status, output.system_prompt, output.output) == ("completed", "SYS", "done")
    messages = await repo.get_session_conversation(sid)
    assert [(m.content, m.interrupted) for m in messages] == [("hi", False), ("hel", True)]
    assert await repo.load_agent_state(sid) == list(items)
    session = await repo.get_session(sid)
    assert session is not None
    assert (session.current_agent, session.current_phase_id) == ("strategist", "empathize")


async def test_a_batch_of_more_steps_than_one_insert_takes_stores_them_all_in_order(
    repo: Repository,
) -> None:
    # 1,001 steps: three multi-row inserts on PostgreSQL (500 rows each at most), some
    # linked to a message and some not.
    sid = await _session(repo)
    items = tuple(llm.ChatMessage(role="user", content=[f"s{i}"]) for i in range(1001))
    await repo.write_batch(
        [
            AppendSteps(sid, 0, items[:600]),
            AddMessage(sid, "user", "s600", "challenge"),
            AppendSteps(sid, 600, items[600:]),
        ]
    )
    assert await repo.agent_step_count(sid) == 1001
    assert await repo.load_agent_state(sid) == list(items)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (AddMessage("SID", "tool", "x"), InvalidRole),
        (SavePhaseOutput("SID", "p", "P", "done"), InvalidWrite),
        (UpdateSession("SID", {"colour": "red"}), InvalidWrite),
        (UpdateSession("SID", {"status": "paused"}), InvalidWrite),
        (AppendSteps("SID", 5, ("x",)), StaleWrite),
        (AppendSteps("SID", 0, (lambda: None,)), InvalidWrite),
        (AddMessage("missing", "user", "x"), SessionNotFound),
    ],
)
async def test_one_bad_op_writes_nothing(repo: Repository, bad: Any, error: type) -> None:
    sid = await _session(repo)
    if bad.session_id == "SID":
        bad = type(bad)(**{**bad.__dict__, "session_id": sid})
    with pytest.raises(error):
        await repo.write_batch([AddMessage(sid, "user", "before"), bad])
    assert await repo.get_session_conversation(sid) == []
    assert await repo.agent_step_count(sid) == 0


async def test_unknown_op_is_refused(repo: Repository) -> None:
    with pytest.raises(InvalidWrite, match="unknown write op"):
        await repo.write_batch([object()])  # type: ignore[list-item]
    await repo.write_batch([])


async def test_a_large_batch_over_several_sessions_keeps_each_kinds_order(repo: Repository) -> None:
    a, b = await _session(repo), await _session(repo)
    ops: list[Any] = []
    for i in range(300):
        sid = a if i % 3 else b
        ops.append(AddMessage(sid, "user" if i % 2 else "assistant", f"m{i}"))
    steps_a = [llm.ChatMessage(role="user", content=[f"s{i}"]) for i in range(50)]
    for i in range(0, 50, 5):  # appends of one session, interleaved with other writes
        ops.insert(i * 3, AppendSteps(a, i, tuple(steps_a[i : i + 5])))
    await repo.write_batch(ops)
    expected_a = [op.content for op in ops if isinstance(op, AddMessage) and op.session_id == a]
    assert [m.content for m in await repo.get_session_conversation(a)] == expected_a
    assert len(await repo.get_session_conversation(b)) == 100
    assert await repo.load_agent_state(a) == steps_a


async def test_a_batch_larger_than_one_insert_keeps_its_order_and_links(repo: Repository) -> None:
    # More messages than one INSERT carries: each step still carries its own message's
    # text, and the messages read back in the batch's order with increasing ids.
    sid = await _session(repo)
    said = [llm.ChatMessage(role="user", content=[f"said {i}"]) for i in range(1201)]
    ops: list[Any] = [AddMessage(sid, "user", f"said {i}") for i in range(1201)]
    ops.append(AppendSteps(sid, 0, tuple(said)))
    await repo.write_batch(ops)
    messages = await repo.get_session_conversation(sid)
    assert [m.content for m in messages] == [f"said {i}" for i in range(1201)]
    assert [m.id for m in messages] == sorted(m.id for m in messages)
    assert await repo.load_agent_state(sid) == said
    async with raw_sql(repo) as conn:
        linked = (
            await conn.execute(text("SELECT seq, message_id FROM agent_steps ORDER BY seq"))
        ).all()
    assert [message_id for _, message_id in linked] == [m.id for m in messages]


async def test_gapped_steps_in_one_batch_write_nothing(repo: Repository) -> None:
    sid = await _session(repo)
    with pytest.raises(InvalidWrite, match="not contiguous"):
        await repo.write_batch(
            [
                AppendSteps(sid, 0, ("a",)),
                AddMessage(sid, "user", "x"),
                AppendSteps(sid, 2, ("c",)),
            ]
        )
    assert await repo.agent_step_count(sid) == 0
    assert await repo.get_session_conversation(sid) == []


async def test_a_message_step_keeps_its_text_once_and_it_is_still_signed(
    repo: Repository, caplog: pytest.LogCaptureFixture
) -> None:
    user = await repo.get_or_create_user("once")
    sid = (await repo.create_session(user.id)).id
    thought = "a long thought about commuting " * 20
    said = llm.ChatMessage(role="user", content=[thought])
    call = llm.FunctionCall(call_id="c", name="f", arguments="{}")
    await repo.write_batch([AddMessage(sid, "user", thought), AppendSteps(sid, 0, (said, call))])
    assert await repo.load_agent_state(sid) == [said, call]
    async with raw_sql(repo) as conn:
        rows = (
            await conn.execute(
                text("SELECT message_id, length(payload) FROM agent_steps ORDER BY seq")
            )
        ).all()
    assert rows[0][0] is not None and rows[0][1] < 200  # the text lives in the message row
    assert rows[1][0] is None
    async with raw_sql(repo, begin=True) as conn:  # someone edits the conversation row
        await conn.execute(text("UPDATE session_conversations SET content = 'edited'"))
    with caplog.at_level(logging.ERROR, logger="coach.persistence"):
        assert await repo.load_agent_state(sid) == []
    assert "session_conversations.content" in caplog.text  # its seal fails first


async def test_a_stale_claim_among_several_sessions_names_its_session_and_writes_nothing(
    repo: Repository,
) -> None:
    # A batch's memory claims are one statement however many sessions it writes: the one
    # that did not hold is still named, and the claims that held are rolled back with it.
    a, b, c = [await _session(repo) for _ in range(3)]
    await repo.write_batch([AppendSteps(b, 0, ("elsewhere",))])  # another writer moved b on
    batch: list[Any] = [AddMessage(sid, "user", f"to {sid}") for sid in (a, b, c)]
    batch += [AppendSteps(sid, 0, (f"step of {sid}",)) for sid in (c, b, a)]
    with pytest.raises(StaleWrite, match=f"Session {b} has 1 memory steps stored, not 0"):
        await repo.write_batch(batch)
    assert [await repo.agent_step_count(sid) for sid in (a, b, c)] == [0, 1, 0]
    assert [await repo.get_session_conversation(sid) for sid in (a, c)] == [[], []]


async def test_the_claims_of_a_batch_over_hundreds_of_sessions_all_hold(repo: Repository) -> None:
    # One statement on PostgreSQL, however many; a session with a field to change too is
    # updated by a statement of its own, its claim with it.
    user = await repo.get_or_create_user("many")
    sids = [(await repo.create_session(user.id)).id for _ in range(301)]
    await repo.write_batch([AppendSteps(sid, 0, (f"first of {sid}",)) for sid in sids])
    await repo.write_batch(
        [AppendSteps(sid, 1, (f"second of {sid}",)) for sid in reversed(sids)]
        + [UpdateSession(sids[7], {"current_agent": "strategist"})]
    )
    counts = {sid: await repo.agent_step_count(sid) for sid in sids}
    assert set(counts.values()) == {2}, counts
    assert await repo.load_agent_state(sids[-1]) == [
        f"first of {sids[-1]}",
        f"second of {sids[-1]}",
    ]
