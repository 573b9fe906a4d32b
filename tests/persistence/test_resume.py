"""resume_session (SPEC §5): errors, next phase, the history window and its bounded reads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from coach.errors import NothingToResume, SessionCompleted, SessionFailed, SessionNotFound
from coach.persistence import HistoryMessage, Repository
from tests.support import append_steps, update_session


async def _user_session(repo: Repository, identity: str = "alice") -> tuple[str, str]:
    user = await repo.get_or_create_user(identity)
    return user.id, (await repo.create_session(user.id, "commute")).id


async def _complete(repo: Repository, sid: str, phase: str, prompt: str | None = "SYS") -> None:
    await repo.save_phase_output(
        sid, phase, phase.title(), "running", system_prompt=prompt, user_input=f"in {phase}"
    )
    await repo.save_phase_output(sid, phase, phase.title(), "completed", output=f"out {phase}")


async def test_resume_returns_next_phase_and_context(repo: Repository) -> None:
    uid, sid = await _user_session(repo)
    await _complete(repo, sid, "challenge")
    await _complete(repo, sid, "empathize")
    await repo.save_phase_output(sid, "define", "Define", "running", system_prompt="SYS")
    await repo.add_session_message(sid, "user", "where were we?", phase_id="define")
    await repo.add_session_message(sid, "assistant", "Defin", phase_id="define", interrupted=True)

    result = await repo.resume_session(sid, user_id=uid)

    assert result.session.id == sid and result.session.completed_phases == 2
    assert result.next_phase_id == "define"
    assert result.context.last_completed_phase == "empathize"
    assert (result.context.total_phases, result.context.completed_phases) == (6, 2)
    assert result.context.history == [
        HistoryMessage("user", "in challenge", "challenge"),
        HistoryMessage("assistant", "out challenge", "challenge"),
        HistoryMessage("user", "in empathize", "empathize"),
        HistoryMessage("assistant", "out empathize", "empathize"),
        HistoryMessage("user", "where were we?", "define"),
        HistoryMessage("assistant", "Defin", "define", interrupted=True),
    ]
    assert result.memory == []


async def test_outputs_without_system_prompt_are_not_history(repo: Repository) -> None:
    uid, sid = await _user_session(repo)
    await _complete(repo, sid, "challenge", prompt=None)
    await _complete(repo, sid, "empathize")
    result = await repo.resume_session(sid, user_id=uid)
    assert [m.content for m in result.context.history] == ["in empathize", "out empathize"]
    assert result.next_phase_id == "define"


async def test_unknown_session(repo: Repository) -> None:
    uid, _ = await _user_session(repo)
    with pytest.raises(SessionNotFound) as caught:
        await repo.resume_session("nope", user_id=uid)
    assert str(caught.value) == "Session nope not found"


async def test_another_users_session_looks_unknown(repo: Repository) -> None:
    _, sid = await _user_session(repo, "alice")
    await _complete(repo, sid, "challenge")
    mallory = await repo.get_or_create_user("mallory")
    with pytest.raises(SessionNotFound) as caught:
        await repo.resume_session(sid, user_id=mallory.id)
    assert str(caught.value) == f"Session {sid} not found"


async def test_completed_session(repo: Repository) -> None:
    uid, sid = await _user_session(repo)
    await _complete(repo, sid, "challenge")
    await update_session(repo, sid, status="completed")
    with pytest.raises(SessionCompleted) as caught:
        await repo.resume_session(sid, user_id=uid)
    assert str(caught.value) == f"Session {sid} already completed"


async def test_failed_session(repo: Repository) -> None:
    uid, sid = await _user_session(repo)
    await _complete(repo, sid, "challenge")
    await update_session(repo, sid, status="failed")
    with pytest.raises(SessionFailed) as caught:
        await repo.resume_session(sid, user_id=uid)
    assert str(caught.value) == f"Session {sid} failed and cannot be resumed"


async def test_nothing_completed(repo: Repository) -> None:
    uid, sid = await _user_session(repo)
    await repo.save_phase_output(sid, "challenge", "Challenge", "running", system_prompt="S")
    await repo.save_phase_output(sid, "empathize", "Empathize", "failed", error="boom")
    with pytest.raises(NothingToResume) as caught:
        await repo.resume_session(sid, user_id=uid)
    assert str(caught.value) == f"Session {sid} has no completed phases to resume from"


async def test_every_phase_completed_points_at_the_last(repo: Repository) -> None:
    uid, sid = await _user_session(repo)
    for phase in repo.phase_ids:
        await _complete(repo, sid, phase)
    result = await repo.resume_session(sid, user_id=uid)
    assert result.next_phase_id == "evaluation"
    assert result.context.completed_phases == result.context.total_phases == 6


@pytest.mark.parametrize(("pairs", "kept"), [(0, 0), (25, 25), (50, 25)])
async def test_history_window_of_phase_pairs(repo: Repository, pairs: int, kept: int) -> None:
    uid, sid = await _user_session(repo)
    await _complete(repo, sid, "challenge", prompt=None)  # resumable, but not history
    for i in range(pairs):
        await _complete(repo, sid, f"p{i:02d}")
    result = await repo.resume_session(sid, user_id=uid, max_pairs=25)
    history = result.context.history
    assert len(history) == 2 * kept
    expected = [f"p{i:02d}" for i in range(pairs - kept, pairs)]
    assert [m.phase_id for m in history[::2]] == expected
    assert all(m.role == "user" for m in history[::2])
    assert all(m.role == "assistant" for m in history[1::2])


@pytest.mark.parametrize(("pairs", "max_pairs"), [(50, 25), (50, 0), (10, 25)])
async def test_history_window_spans_phases_and_conversation(
    repo: Repository, pairs: int, max_pairs: int
) -> None:
    uid, sid = await _user_session(repo)
    await _complete(repo, sid, "challenge")
    for i in range(pairs):
        await repo.add_session_message(sid, "user", f"q{i}")
        await repo.add_session_message(sid, "assistant", f"a{i}")
    result = await repo.resume_session(sid, user_id=uid, max_pairs=max_pairs)
    everything = ["in challenge", "out challenge"]
    for i in range(pairs):
        everything += [f"q{i}", f"a{i}"]
    expected = everything[-2 * max_pairs :] if max_pairs else []
    assert [m.content for m in result.context.history] == expected


@contextmanager
def _statements(repo: Repository) -> Iterator[list[str]]:
    seen: list[str] = []

    def _record(*args: Any) -> None:
        seen.append(str(args[2]))

    event.listen(repo.database.sync_engine, "before_cursor_execute", _record)
    try:
        yield seen
    finally:
        event.remove(repo.database.sync_engine, "before_cursor_execute", _record)


async def test_resume_reads_a_bounded_window(repo: Repository) -> None:
    uid, sid = await _user_session(repo)
    await _complete(repo, sid, "challenge")
    for i in range(300):
        await repo.add_session_message(sid, "user" if i % 2 == 0 else "assistant", f"m{i}")
    with _statements(repo) as statements:
        result = await repo.resume_session(sid, user_id=uid, max_pairs=5)
    assert len(result.context.history) == 10
    reads = [s for s in statements if "session_conversations" in s]
    assert len(reads) == 1 and "LIMIT" in reads[0].upper()
    # Phase outputs: at most one per manifest phase; the long system prompt is not read.
    outputs = [s for s in statements if "FROM phase_outputs" in s and "count(" not in s]
    assert len(outputs) == 1 and "CASE WHEN (phase_outputs.system_prompt IS NULL)" in outputs[0]
    assert not any("agent_steps" in s for s in statements)  # none stored: none read


async def test_resume_loads_only_the_newest_memory_steps(repo: Repository) -> None:
    from livekit.agents import llm

    uid, sid = await _user_session(repo)
    await _complete(repo, sid, "challenge")
    items = [llm.ChatMessage(role="user", content=[f"s{i}"]) for i in range(40)]
    await repo.save_agent_state(sid, items)
    with _statements(repo) as statements:
        result = await repo.resume_session(sid, user_id=uid, max_steps=10)
    assert result.memory == items[-10:]  # signatures still verify: they bind each position
    steps_reads = [s for s in statements if "agent_steps" in s]
    assert len(steps_reads) == 1 and "agent_steps.seq >=" in steps_reads[0]
    assert (await repo.resume_session(sid, user_id=uid)).memory == items  # under the cap: all


async def test_resume_reads_the_steps_of_the_window_exchanges(repo: Repository) -> None:
    from livekit.agents import llm

    from coach.store import AddMessage, AppendSteps

    uid, sid = await _user_session(repo)
    await _complete(repo, sid, "challenge")
    steps: list[object] = [llm.AgentHandoff(new_agent_id="coach")]
    await append_steps(repo, sid, steps, start=0)
    for turn in range(8):  # a message, a tool call and its output, the reply
        said = llm.ChatMessage(role="user", content=[f"u{turn}"])
        call = llm.FunctionCall(call_id=f"c{turn}", name="add_insight", arguments="{}")
        done = llm.FunctionCallOutput(
            call_id=f"c{turn}", name="add_insight", output="ok", is_error=False
        )
        reply = llm.ChatMessage(role="assistant", content=[f"a{turn}"])
        turn_steps = (said, call, done, reply)
        await repo.write_batch(
            [
                AddMessage(sid, "user", f"u{turn}"),
                AddMessage(sid, "assistant", f"a{turn}"),
                AppendSteps(sid, len(steps), turn_steps),
            ]
        )
        steps += turn_steps

    # A full window (older messages before it): the steps from its oldest message on.
    windowed = await repo.resume_session(sid, user_id=uid, max_pairs=3)
    assert [m.content for m in windowed.context.history][:1] == ["u5"]
    assert windowed.memory == steps[-12:] and windowed.stored_steps == len(steps)
    # max_steps still caps it.
    assert (await repo.resume_session(sid, user_id=uid, max_pairs=3, max_steps=5)).memory == (
        steps[-5:]
    )
    # The window holds the whole conversation: every step, the handoff before it too.
    assert (await repo.resume_session(sid, user_id=uid, max_pairs=8)).memory == steps
