"""Branching from any turn: the branch holds the session exactly as it was after that
turn — messages, memory steps, zones, deltas, phases completed by then — the original
is untouched, and both resume.

The zones each branch must hold are recorded here while the conversation runs."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, cast

import pytest
from livekit import rtc
from livekit.agents import AgentSession, llm

from coach.agents import DesignStrategist
from coach.conversation.runtime import Runtime
from coach.conversation.userdata import UserData
from coach.errors import BranchRefused
from coach.surfaces.rpc import invoke
from coach.testing import ScriptedLLM, call, say

from .helpers import CHALLENGE, new_session_with_phases, start

OWNER = "ada"


@dataclass
class Turn:
    """One user turn as the live session had it once it was over."""

    words: str
    message_id: int
    """The conversation row of what the user said."""
    zones: tuple[int, dict[str, Any], dict[str, Any], dict[str, Any]]
    """(step, data, template, view) after the turn."""
    said: list[str]
    """The whole conversation after the turn."""


async def flushed(runtime: Runtime) -> None:
    await asyncio.wait_for(runtime.recorder.flush(), 10)


async def zones_of(runtime: Runtime, session_id: str) -> tuple[int, Any, Any, Any]:
    state = await runtime.store.get_state(session_id)
    return state.step, state.data, state.template, state.view


async def run_turn(
    runtime: Runtime,
    session: AgentSession[UserData],
    model: ScriptedLLM,
    words: str,
    *script: Any,
) -> Turn:
    model.extend(list(script))
    await session.run(user_input=words)
    await flushed(runtime)
    session_id = session.userdata.session_id
    assert session_id is not None
    messages = await runtime.store.get_session_conversation(session_id)
    (mine,) = [m for m in messages if m.role == "user" and m.content == words]
    zones = await zones_of(runtime, session_id)
    return Turn(words, mine.id, zones, [m.content for m in messages])


async def conversation(runtime: Runtime) -> tuple[str, list[Turn]]:
    """Challenge, empathize and define completed, then three turns of ideate."""
    model = ScriptedLLM([say("Hi!")])
    session = await start(runtime, model, identity=OWNER)
    turns = [
        await run_turn(
            runtime,
            session,
            model,
            f"I want to work on: {CHALLENGE}",
            call("capture_design_challenge", challenge=CHALLENGE),
            call("transfer_to_strategist"),
            say("Strategist here. Who struggles today?"),
        )
    ]
    for n, phase in enumerate(("empathize", "define"), start=1):
        turns.append(
            await run_turn(
                runtime,
                session,
                model,
                f"My thoughts on {phase}: observation {n}",
                call("complete_phase", summary=f"Summary of {phase}."),
                say(f"Phase {n} done."),
            )
        )
    turns.append(
        await run_turn(
            runtime, session, model, "Let me think out loud first.", say("Take your time.")
        )
    )
    for title in ("Lockers", "Kiosks"):
        turns.append(
            await run_turn(
                runtime,
                session,
                model,
                f"What about {title}?",
                call("add_idea", title=title, description=f"{title}, sketched."),
                say("Noted."),
            )
        )
    session_id = session.userdata.session_id
    assert session_id is not None
    await session.aclose()
    await flushed(runtime)
    return session_id, turns


async def test_a_branch_from_a_turn_holds_the_work_exactly_as_it_was_then(
    runtime: Runtime,
) -> None:
    source, turns = await conversation(runtime)
    # (the turns chosen hold different boards: the branch cannot pass by holding any one)
    assert len({repr(t.zones) for t in (turns[1], turns[3], turns[5])}) == 3
    assert turns[3].zones[0] == turns[2].zones[0] > 0
    original_steps = cast(list[llm.ChatItem], await runtime.store.load_agent_state(source))
    original_said = [m.content for m in await runtime.store.get_session_conversation(source)]
    # define's turn (a phase end), the chat after it (no zone change) and the latest turn
    for turn, phases, upcoming in [
        (turns[2], ["challenge", "empathize", "define"], "ideate"),
        (turns[3], ["challenge", "empathize", "define"], "ideate"),
        (turns[5], ["challenge", "empathize", "define"], "ideate"),
        (turns[1], ["challenge", "empathize"], "define"),
    ]:
        record = await runtime.store.branch_session(source, after_message=turn.message_id)
        branch = record.id
        assert (record.parent_session_id, record.branched_from_phase) == (source, phases[-1])
        assert record.current_phase_id == upcoming
        assert await zones_of(runtime, branch) == turn.zones, turn.words
        said = [m.content for m in await runtime.store.get_session_conversation(branch)]
        assert said == turn.said, turn.words
        outputs = await runtime.store.get_phase_outputs(branch)
        assert [(o.phase_id, o.status) for o in outputs] == [(p, "completed") for p in phases]
        deltas = await runtime.store.get_deltas(branch)
        assert [d.step for d in deltas] == list(range(1, turn.zones[0] + 1))
        # The memory is a prefix of the source's that ends on the turn's reply, every
        # call with its output, every step verifying as the branch's own.
        steps = cast(list[llm.ChatItem], await runtime.store.load_agent_state(branch))
        assert [s.id for s in steps] == [s.id for s in original_steps[: len(steps)]]
        calls = {s.call_id for s in steps if isinstance(s, llm.FunctionCall)}
        assert calls == {s.call_id for s in steps if isinstance(s, llm.FunctionCallOutput)}
        last = steps[-1]
        assert isinstance(last, llm.ChatMessage) and last.role == "assistant"
        assert last.text_content == turn.said[-1]
    # the original is untouched
    assert [m.content for m in await runtime.store.get_session_conversation(source)] == (
        original_said
    )
    assert await zones_of(runtime, source) == turns[-1].zones
    assert len(await runtime.store.load_agent_state(source)) == len(original_steps)


async def test_refusals_are_one_line_and_create_nothing(runtime: Runtime) -> None:
    source, turns = await conversation(runtime)
    other = await new_session_with_phases(runtime, OWNER, 1)
    foreign = (await runtime.store.get_session_conversation(other))[0].id
    user = (await runtime.store.get_session(source)).user_id  # type: ignore[union-attr]
    before = len(await runtime.store.get_user_sessions(user))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"after_message": foreign}, f"Message {foreign} is not in this session"),
        ({"after_message": 10**9}, "is not in this session"),
        # Lockers' turn: Kiosks changed the board after it, and no value was recorded then
        ({"after_message": turns[4].message_id}, "its state then was not recorded"),
        ({}, "Branch from a phase or from a message, not both."),
        ({"phase_id": "define", "after_message": turns[2].message_id}, "not both"),
    ]
    for kwargs, words in cases:
        with pytest.raises(BranchRefused, match=words) as refused:
            await runtime.store.branch_session(source, **kwargs)
        assert "\n" not in str(refused.value)
    assert len(await runtime.store.get_user_sessions(user)) == before


async def resume(runtime: Runtime, session_id: str) -> tuple[AgentSession[UserData], ScriptedLLM]:
    model = ScriptedLLM([say("Welcome back, Ada!")])
    session = await start(runtime, model, identity=OWNER)
    model.extend([call("select_session_to_load", session_id=session_id), say("Say continue.")])
    await session.run(user_input="that one")
    model.extend([call("load_selected_session"), say("Welcome back.")])
    await session.run(user_input="continue")
    return session, model


async def test_the_branch_and_the_original_both_resume(runtime: Runtime) -> None:
    source, turns = await conversation(runtime)
    branch = (await runtime.store.branch_session(source, after_message=turns[3].message_id)).id
    for session_id, title, ideas in [
        (branch, "Vending", ["Vending"]),
        (source, "Mailroom", ["Lockers", "Kiosks", "Mailroom"]),
    ]:
        session, model = await resume(runtime, session_id)
        assert session.userdata.session_id == session_id
        assert session.userdata.current_phase_id == "ideate"
        model.extend([call("add_idea", title=title, description="."), say("Ok.")])
        await session.run(user_input=f"What about {title}?")
        await session.aclose()
        await flushed(runtime)
        state = await runtime.store.get_state(session_id)
        assert [i["title"] for i in state.data["ideas"]] == ideas


async def rpc(
    session: AgentSession[UserData], name: str, payload: dict[str, Any], caller: str = OWNER
) -> Any:
    data = rtc.RpcInvocationData("req", caller, json.dumps(payload), 5.0, name)
    return json.loads(await invoke(name, session.userdata, data, session=session))


async def rpc_refused(
    session: AgentSession[UserData], payload: dict[str, Any], caller: str = OWNER
) -> rtc.RpcError:
    with pytest.raises(rtc.RpcError) as caught:
        await rpc(session, "coach.branch_session", payload, caller)
    assert "\n" not in caught.value.message
    return caught.value


async def test_the_room_branches_from_a_turn_by_rpc_and_both_sessions_resume(
    runtime: Runtime,
) -> None:
    source, turns = await conversation(runtime)
    other = await new_session_with_phases(runtime, OWNER, 1)
    foreign = (await runtime.store.get_session_conversation(other))[0].id
    session, model = await resume(runtime, other)  # a live conversation on another session
    page = await rpc(session, "coach.get_session_conversation", {"session_id": source})
    (chosen,) = [e for e in page["entries"] if e["text"] == turns[3].words]
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"session_id": source, "after_message_id": foreign}, 409, OWNER),
        ({"session_id": source, "after_message_id": turns[4].message_id}, 409, OWNER),
        ({"session_id": source, "phase_id": "define", "after_message_id": 1}, 400, OWNER),
        ({"session_id": source}, 400, OWNER),
        ({"session_id": source, "after_message_id": chosen["message_id"]}, 403, "mallory"),
    ]
    for payload, code, caller in cases:
        assert (await rpc_refused(session, payload, caller)).code == code, payload
    assert session.userdata.session_id == other  # nothing changed

    answer = await rpc(
        session,
        "coach.branch_session",
        {"session_id": source, "after_message_id": chosen["message_id"]},
    )
    branch = answer["session_id"]
    assert answer == {
        "session_id": branch,
        "parent_session_id": source,
        "branched_from_phase": "define",
        "after_message_id": chosen["message_id"],
        "agent": "strategist",
        "next_phase_id": "ideate",
    }
    assert session.userdata.session_id == branch
    assert isinstance(session.current_agent, DesignStrategist)
    restored = [m.text_content for m in session.current_agent.chat_ctx.messages()]
    assert turns[3].words in restored and "What about Lockers?" not in restored
    model.extend([call("add_idea", title="Vending", description="."), say("Ok.")])
    await session.run(user_input="What about Vending?")
    await session.aclose()
    await flushed(runtime)
    assert [i["title"] for i in (await runtime.store.get_state(branch)).data["ideas"]] == [
        "Vending"
    ]

    again, model = await resume(runtime, source)  # the original resumes as it was
    assert again.userdata.session_id == source
    assert [i["title"] for i in again.userdata.state.data["ideas"]] == ["Lockers", "Kiosks"]
    await again.aclose()
