"""The room's RPC methods through the real handler: real ``rtc.RpcInvocationData``, a fake
room participant, a live ``AgentSession`` on the scripted model; SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from livekit import rtc
from livekit.agents import AgentSession
from livekit.agents.voice.io import TextOutput
from livekit.agents.voice.run_result import RunResult

from coach.agents import DesignEvaluator, DesignStrategist
from coach.conversation.runtime import Runtime
from coach.conversation.userdata import UserData
from coach.state import person
from coach.state.zones import DeltaSpec
from coach.surfaces.rpc import MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES, METHODS, invoke, register_all
from coach.testing import ScriptedLLM, say
from coach.testing.paced_llm import PacedLLM, tool_call
from tests.support import update_session

from .helpers import CHALLENGE, new_session_with_phases, start
from .test_notes_unreachable import UnreachableReads

OWNER = "ada"
UNKNOWN = "f" * 32


async def call(
    userdata: UserData,
    name: str,
    payload: Any = None,
    *,
    caller: str = OWNER,
    session: AgentSession[UserData] | None = None,
) -> Any:
    """Call ``name`` as ``caller`` would over the room; the decoded answer."""
    text = payload if isinstance(payload, str) else json.dumps(payload or {})
    data = rtc.RpcInvocationData("req", caller, text, 5.0, name)
    answer = await invoke(name, userdata, data, session=session)
    assert len(answer.encode()) <= MAX_RESPONSE_BYTES
    return json.loads(answer)


async def refused(userdata: UserData, name: str, payload: Any, **kwargs: Any) -> rtc.RpcError:
    with pytest.raises(rtc.RpcError) as caught:
        await call(userdata, name, payload, **kwargs)
    return caught.value


async def live(runtime: Runtime, identity: str = OWNER) -> AgentSession[UserData]:
    """The owner's live conversation in the room (greeted, not yet resumed)."""
    return await start(runtime, ScriptedLLM([say("Welcome back!")]), identity=identity)


# --- the registry -----------------------------------------------------------------------


class FakeParticipant:
    """The agent participant's RPC registration, recorded."""

    def __init__(self) -> None:
        self.handlers: dict[str, Any] = {}

    def register_rpc_method(self, name: str, handler: Any) -> None:
        self.handlers[name] = handler


async def test_every_method_is_registered_and_answers_through_the_room(runtime: Runtime) -> None:
    session = await live(runtime)
    participant = FakeParticipant()
    register_all(participant, session.userdata, session)  # type: ignore[arg-type]
    assert (
        sorted(participant.handlers)
        == sorted(METHODS)
        == [
            "coach.branch_session",
            "coach.delete_session",
            "coach.export_my_data",
            "coach.focus",
            "coach.forget",
            "coach.forget_me",
            "coach.get_phase_outputs",
            "coach.get_profile",
            "coach.get_session_conversation",
            "coach.get_state",
            "coach.interrupt",
            "coach.list_sessions",
            "coach.resume_session",
        ]
    )
    answer = await participant.handlers["coach.list_sessions"](
        rtc.RpcInvocationData("req", OWNER, "{}", 5.0, "coach.list_sessions")
    )
    assert json.loads(answer) == {"sessions": [], "more": False}
    await session.aclose()


# --- checks every method shares -----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(METHODS))
async def test_only_the_owner_is_answered(runtime: Runtime, name: str) -> None:
    session = await live(runtime)
    error = await refused(session.userdata, name, {}, caller="mallory", session=session)
    assert error.code == 403
    await session.aclose()


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ("not json", 400),
        ("[" * 1_500 + "]" * 1_500, 400),  # too deep to read, within the size limit
        ({"session_id": UNKNOWN, "surprise": 1}, 400),  # unknown field
        ({"session_id": 5}, 400),
        ({}, 400),  # session_id is required
        ({"session_id": UNKNOWN, "pad": "é" * (MAX_REQUEST_BYTES // 2)}, 413),  # bytes, not chars
    ],
)
async def test_a_bad_payload_gets_its_documented_code(
    runtime: Runtime, payload: Any, code: int
) -> None:
    session = await live(runtime)
    error = await refused(session.userdata, "coach.get_phase_outputs", payload, session=session)
    assert error.code == code
    assert "Traceback" not in error.message
    await session.aclose()


@pytest.mark.parametrize(
    "name",
    [
        "coach.get_phase_outputs",
        "coach.get_session_conversation",
        "coach.resume_session",
        "coach.branch_session",
        "coach.delete_session",
    ],
)
async def test_unknown_malformed_and_foreign_ids_get_the_same_answer(
    runtime: Runtime, name: str
) -> None:
    foreign = await new_session_with_phases(runtime, "bob", 1)
    await new_session_with_phases(runtime, OWNER, 1)
    session = await live(runtime)
    answers = set()
    for session_id in (foreign, UNKNOWN, "not-an-id", "x" * 64, foreign.upper()):
        payload = {"session_id": session_id}
        if name == "coach.branch_session":
            payload["phase_id"] = "empathize"
        error = await refused(session.userdata, name, payload, session=session)
        answers.add((error.code, error.message))
    assert answers == {(404, "No such session.")}
    await session.aclose()


async def test_a_database_that_does_not_answer_is_503(runtime: Runtime) -> None:
    session_id = await new_session_with_phases(runtime, OWNER, 1)
    session = await live(runtime)
    flaky = dataclasses.replace(runtime, store=UnreachableReads(runtime.store))
    userdata = flaky.new_userdata(identity=OWNER)
    for name, payload in [
        ("coach.list_sessions", {}),
        ("coach.get_phase_outputs", {"session_id": session_id}),
    ]:
        error = await refused(userdata, name, payload, session=session)
        assert error.code == 503
    await session.aclose()


# --- coach.list_sessions ----------------------------------------------------------------


async def test_list_sessions_shows_the_callers_sessions_newest_first(runtime: Runtime) -> None:
    first = await new_session_with_phases(runtime, OWNER, 1, challenge="First challenge.")
    second = await new_session_with_phases(runtime, OWNER, 2, challenge="Second challenge.")
    await new_session_with_phases(runtime, "bob", 1)
    session = await live(runtime)
    answer = await call(session.userdata, "coach.list_sessions", session=session)
    assert [s["id"] for s in answer["sessions"]] == [second, first]
    newest = answer["sessions"][0]
    assert newest["challenge"] == "Second challenge."
    assert (newest["status"], newest["phases_done"], newest["phases_total"]) == (
        "in_progress",
        3,  # the challenge, empathize and define
        6,
    )
    assert (newest["current_agent"], newest["current_phase_id"]) == ("strategist", "ideate")
    assert answer["more"] is False

    limited = await call(session.userdata, "coach.list_sessions", {"limit": 1}, session=session)
    assert [s["id"] for s in limited["sessions"]] == [second] and limited["more"] is True
    await session.aclose()


async def test_a_caller_who_has_no_sessions_gets_an_empty_list(runtime: Runtime) -> None:
    userdata = runtime.new_userdata(identity="newcomer")
    answer = await call(userdata, "coach.list_sessions", caller="newcomer")
    assert answer == {"sessions": [], "more": False}


# --- coach.get_phase_outputs ------------------------------------------------------------


async def test_phase_outputs_come_in_order_with_prompts_only_when_asked(runtime: Runtime) -> None:
    session_id = await new_session_with_phases(runtime, OWNER, 1)
    session = await live(runtime)
    plain = await call(
        session.userdata, "coach.get_phase_outputs", {"session_id": session_id}, session=session
    )
    assert [(p["phase_id"], p["status"]) for p in plain["phases"]] == [
        ("challenge", "completed"),
        ("empathize", "completed"),
        ("define", "running"),
    ]
    assert plain["phases"][0]["output"] == CHALLENGE
    assert all(p["system_prompt"] is None and p["user_input"] is None for p in plain["phases"])

    prompted = await call(
        session.userdata,
        "coach.get_phase_outputs",
        {"session_id": session_id, "include_prompts": True},
        session=session,
    )
    empathize = prompted["phases"][1]
    assert "Current phase: Empathize" in empathize["system_prompt"]
    assert empathize["user_input"] and empathize["truncated"] == []
    await session.aclose()


async def test_prompts_larger_than_an_answer_are_cut_and_say_so(runtime: Runtime) -> None:
    session_id = await new_session_with_phases(runtime, OWNER, 1)
    huge = "é" * 12_000  # 24 KB of UTF-8: more than one answer may hold
    await runtime.store.save_phase_output(
        session_id, "define", "Define", "running", system_prompt=huge, user_input=huge
    )
    session = await live(runtime)
    answer = await call(
        session.userdata,
        "coach.get_phase_outputs",
        {"session_id": session_id, "include_prompts": True},
        session=session,
    )
    define = answer["phases"][2]
    assert sorted(define["truncated"]) == ["system_prompt", "user_input"]
    assert huge.startswith(define["system_prompt"]) and len(define["system_prompt"]) < len(huge)
    assert answer["phases"][1]["truncated"] == []  # the others are whole
    await session.aclose()


# --- coach.get_session_conversation -----------------------------------------------------


async def conversation_of(runtime: Runtime, messages: int) -> str:
    """A session of the owner holding exactly ``messages`` messages."""
    user = await runtime.store.get_or_create_user(OWNER)
    session = await runtime.store.create_session(user.id, "Paging")
    for n in range(messages):
        await runtime.store.add_session_message(
            session.id, "user" if n % 2 == 0 else "assistant", f"m{n}", phase_id="empathize"
        )
    return session.id


async def pages(userdata: UserData, session_id: str, limit: int) -> list[list[str]]:
    """Every page from the newest back, each page's texts oldest first."""
    found, before = [], None
    while True:
        payload = {"session_id": session_id, "limit": limit, "before": before}
        answer = await call(userdata, "coach.get_session_conversation", payload)
        found.append([e["text"] for e in answer["entries"]])
        before = answer["before"]
        if before is None:
            return found


@pytest.mark.parametrize(
    ("messages", "limit", "expected"),
    [
        (0, 3, [[]]),
        (1, 3, [["m0"]]),
        (3, 3, [["m0", "m1", "m2"]]),  # exactly one page
        (4, 3, [["m1", "m2", "m3"], ["m0"]]),  # one past
        (4, 1, [["m3"], ["m2"], ["m1"], ["m0"]]),
    ],
)
async def test_the_conversation_pages_back_from_the_newest(
    runtime: Runtime, messages: int, limit: int, expected: list[list[str]]
) -> None:
    session_id = await conversation_of(runtime, messages)
    userdata = runtime.new_userdata(identity=OWNER)
    assert await pages(userdata, session_id, limit) == expected


async def test_messages_are_marked_and_a_phase_can_be_asked_for(runtime: Runtime) -> None:
    session_id = await conversation_of(runtime, 2)
    await runtime.store.add_session_message(
        session_id, "assistant", "cut off", phase_id="define", interrupted=True
    )
    userdata = runtime.new_userdata(identity=OWNER)
    answer = await call(userdata, "coach.get_session_conversation", {"session_id": session_id})
    last = answer["entries"][-1]
    assert (last["kind"], last["role"], last["interrupted"], last["phase_id"]) == (
        "message",
        "assistant",
        True,
        "define",
    )
    assert last["message_id"] > answer["entries"][0]["message_id"]
    define = await call(
        userdata,
        "coach.get_session_conversation",
        {"session_id": session_id, "phase_id": "define"},
    )
    assert [e["text"] for e in define["entries"]] == ["cut off"]


async def test_a_message_larger_than_an_answer_is_cut_and_says_so(runtime: Runtime) -> None:
    session_id = await conversation_of(runtime, 1)
    await runtime.store.add_session_message(session_id, "assistant", "𝄞" * 5_000)  # 20 KB
    userdata = runtime.new_userdata(identity=OWNER)
    answer = await call(
        userdata, "coach.get_session_conversation", {"session_id": session_id, "limit": 2}
    )
    (entry,) = answer["entries"]  # the page ends early: the older message is the next page
    assert entry["truncated"] is True and set(entry["text"]) == {"𝄞"}
    assert answer["before"] == entry["message_id"]
    older = await call(
        userdata,
        "coach.get_session_conversation",
        {"session_id": session_id, "before": answer["before"]},
    )
    assert [e["text"] for e in older["entries"]] == ["m0"] and older["before"] is None


async def test_with_steps_tool_calls_outputs_and_handoffs_come_between_messages(
    runtime: Runtime,
) -> None:
    session_id = await new_session_with_phases(runtime, OWNER, 1)
    userdata = runtime.new_userdata(identity=OWNER)
    payload = {"session_id": session_id, "include_steps": True, "limit": 200}
    answer = await call(userdata, "coach.get_session_conversation", payload)
    entries = answer["entries"]
    kinds = [e["kind"] for e in entries]
    assert {"message", "tool_call", "tool_output", "handoff"} <= set(kinds)
    capture = next(e for e in entries if e["kind"] == "tool_call")
    assert capture["tool"] == "capture_design_challenge"
    assert json.loads(capture["text"]) == {"challenge": CHALLENGE}
    output = entries[kinds.index("tool_output")]
    assert output["tool"] == "capture_design_challenge" and output["is_error"] is False
    handoff = entries[kinds.index("handoff")]
    assert (handoff["from_agent"], handoff["to_agent"]) == ("design_coach", "design_strategist")
    steps = [e["step"] for e in entries]
    assert steps == sorted(steps) and answer["before"] is None
    messages = [e for e in entries if e["kind"] == "message"]
    assert all(m["message_id"] is not None for m in messages)
    plain = await call(userdata, "coach.get_session_conversation", {"session_id": session_id})
    assert [m["text"] for m in messages] == [e["text"] for e in plain["entries"]]

    # Paged by memory position, newest first, and a phase's steps alone.
    page = await call(userdata, "coach.get_session_conversation", {**payload, "limit": 3})
    assert [e["step"] for e in page["entries"]] == steps[-3:] and page["before"] == steps[-3]
    empathize = await call(
        userdata, "coach.get_session_conversation", {**payload, "phase_id": "empathize"}
    )
    assert empathize["entries"] and {e["phase_id"] for e in empathize["entries"]} == {"empathize"}
    assert "complete_phase" in {e["tool"] for e in empathize["entries"]}


# --- coach.resume_session ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("phases", "agent", "kind"),
    [(1, "strategist", DesignStrategist), (4, "evaluator", DesignEvaluator)],
)
async def test_resume_hands_the_live_conversation_to_the_agent_that_continues(
    runtime: Runtime, phases: int, agent: str, kind: type[Any]
) -> None:
    session_id = await new_session_with_phases(runtime, OWNER, phases)
    model = ScriptedLLM([say("Welcome back!")])
    session = await start(runtime, model, identity=OWNER)
    model.extend([say("Here is where we were.")])
    answer = await call(
        session.userdata, "coach.resume_session", {"session_id": session_id}, session=session
    )
    assert answer["session_id"] == session_id and answer["agent"] == agent
    assert answer["challenge"] == CHALLENGE
    assert isinstance(session.current_agent, kind)
    assert session.userdata.session_id == session_id
    # It takes over with the first visit's conversation, and greets with its recap.
    restored = [m.text_content for m in session.current_agent.chat_ctx.messages()]
    assert "My thoughts on empathize: observation 1" in restored
    assert CHALLENGE in session.current_agent.greeting(session.userdata)

    again = await refused(
        session.userdata, "coach.resume_session", {"session_id": session_id}, session=session
    )
    assert again.code == 409
    await session.aclose()


async def test_a_resume_before_identification_knows_who_is_talking(runtime: Runtime) -> None:
    """The lookup at the greeting failed (the database was away), so the live conversation
    knows its caller's identity but not who they are: the resume identifies them, and the
    agent that takes over knows their name and what they agreed coach may remember."""
    session_id = await new_session_with_phases(runtime, OWNER, 1)
    user = await runtime.store.get_or_create_user(OWNER)
    value, _ = person.remember(person.empty_person(), "role", "leads a design team of four")
    spec = DeltaSpec(trigger="user_query", source="llm", delta_type="add", path="person.facts")
    await runtime.store.update_person(user.id, dict(value), spec, expected_step=0)
    model = ScriptedLLM([say("Welcome!"), say("Here is where we were.")])
    session = await start(runtime, model, identity=OWNER)
    session.userdata.clear_person()  # what a failed lookup at the greeting leaves
    greeted = asyncio.Event()  # the agent that takes over has spoken its recap
    session.on(
        "conversation_item_added",
        lambda ev: greeted.set() if ev.item.text_content == "Here is where we were." else None,
    )
    await call(
        session.userdata, "coach.resume_session", {"session_id": session_id}, session=session
    )
    assert session.userdata.user_id == user.id
    assert session.userdata.user_name == user.display_name
    assert session.userdata.person == value
    assert [s.id for s in session.userdata.past_sessions] == [session_id]
    told = session.current_agent.sent_instructions  # type: ignore[attr-defined]
    assert "(not known yet)" not in told and "leads a design team of four" in told
    # What the model is sent by the agent that took over, on its next turn.
    await asyncio.wait_for(greeted.wait(), 30)  # a hang guard only
    model.extend([say("Let's go on.")])
    await session.run(user_input="Where were we?")
    system = model.requests[-1].system_prompt
    assert system.startswith("You are the Design Strategist")
    assert "(not known yet)" not in system and "leads a design team of four" in system
    await session.aclose()


@pytest.mark.parametrize(
    ("status", "words"), [("completed", "already completed"), ("failed", "failed")]
)
async def test_resume_refuses_what_cannot_be_resumed_with_the_spoken_words(
    runtime: Runtime, status: str, words: str
) -> None:
    session_id = await new_session_with_phases(runtime, OWNER, 1)
    await update_session(runtime.store, session_id, status=status)
    session = await live(runtime)
    error = await refused(
        session.userdata, "coach.resume_session", {"session_id": session_id}, session=session
    )
    assert error.code == 409 and words in error.message and session_id in error.message
    assert not isinstance(session.current_agent, DesignStrategist)
    await session.aclose()


async def test_resume_refuses_a_session_with_nothing_to_resume(runtime: Runtime) -> None:
    user = await runtime.store.get_or_create_user(OWNER)
    empty = await runtime.store.create_session(user.id, "Nothing yet")
    session = await live(runtime)
    error = await refused(
        session.userdata, "coach.resume_session", {"session_id": empty.id}, session=session
    )
    assert error.code == 409 and "no completed phases" in error.message
    await session.aclose()


# --- interrupt ---------------------------------------------------------------------------


class Heard(TextOutput):
    """The session's text output, as a room's transcript takes it (nothing more)."""

    def __init__(self) -> None:
        super().__init__(label="heard", next_in_chain=None)
        self.text = ""
        self._changed = asyncio.Event()

    async def capture_text(self, text: str) -> None:
        self.text += text
        self._changed.set()

    async def shows(self, text: str) -> None:
        while text not in self.text:
            self._changed.clear()
            await self._changed.wait()

    def flush(self) -> None:
        pass


async def test_interrupt_stops_the_reply_and_it_is_stored_as_interrupted(
    runtime: Runtime,
) -> None:
    """The web client's Stop: the reply being generated ends, what was said of it is
    stored marked as interrupted, and the conversation goes on."""
    halfway, never = asyncio.Event(), asyncio.Event()

    async def half_said() -> None:
        halfway.set()
        await never.wait()  # the rest is never generated: only the interrupt ends it

    challenge = json.dumps({"challenge": CHALLENGE})
    model = PacedLLM(
        ["Welcome back!"],
        [tool_call("capture_design_challenge", challenge)],
        ["Let us start with who struggles", half_said, " and where they stop."],
        ["Sure."],
    )
    userdata = runtime.new_userdata(identity=OWNER)
    session = runtime.new_session(userdata, llm=model)
    heard = session.output.transcription = Heard()  # as a room's transcript
    await (await session.start(runtime.first_agent(userdata), capture_run=True))
    assert await call(userdata, "coach.interrupt", {}, session=session) == {
        "interrupted": False  # nothing is being said
    }
    turn: RunResult[None] = session.run(user_input="Bike parking at the office.")
    await halfway.wait()
    await heard.shows("who struggles")
    assert await call(userdata, "coach.interrupt", {}, session=session) == {"interrupted": True}
    await turn
    await session.run(user_input="Go on.")  # the conversation goes on
    await session.aclose()
    await runtime.recorder.flush()
    assert userdata.session_id is not None
    stored = await runtime.store.get_session_conversation(userdata.session_id)
    assert [(m.role, m.content, m.interrupted) for m in stored][-3:] == [
        ("assistant", "Let us start with who struggles", True),
        ("user", "Go on.", False),
        ("assistant", "Sure.", False),
    ]


async def test_interrupt_without_a_live_conversation_is_409(runtime: Runtime) -> None:
    userdata = runtime.new_userdata(identity=OWNER)
    error = await refused(userdata, "coach.interrupt", {})
    assert error.code == 409
