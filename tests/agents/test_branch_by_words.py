"""Branching by voice from a moment the user describes: "go back to before we picked the
lockers idea". The agent passes a few words said then; the tool finds the message, says
which one the branch ends with, and the conversation continues in the branch."""

from __future__ import annotations

from datetime import UTC, datetime

from livekit.agents import llm
from livekit.agents.llm.utils import build_legacy_openai_schema
from livekit.agents.voice.run_result import RunResult

from coach.agents.branching import message_before
from coach.conversation.runtime import Runtime
from coach.store import MessageRecord
from coach.testing import call, say

from .test_branch_turns import conversation, flushed, resume


def offered_arguments(tools: list[llm.Tool | llm.Toolset]) -> dict[str, object]:
    (tool,) = [
        t for t in tools if isinstance(t, llm.FunctionTool) and t.info.name == "branch_session"
    ]
    schema = build_legacy_openai_schema(tool, internally_tagged=True)
    properties: dict[str, object] = schema["parameters"]["properties"]
    return properties


async def test_go_back_to_before_the_lockers_idea(runtime: Runtime) -> None:
    source, turns = await conversation(runtime)
    session, model = await resume(runtime, source)
    assert set(offered_arguments(session.current_agent.tools)) == {"phase_id", "before"}
    model.extend(
        [
            call("branch_session", before="lockers"),
            say("We are back before lockers."),  # the strategist, on the tool's answer
            say("You were thinking out loud."),  # the branch's strategist, taking over
        ]
    )
    result: RunResult[None] = await session.run(
        user_input="Go back to before we picked the lockers idea"
    )
    output = result.expect.next_event(type="function_call_output").event().item
    assert not output.is_error, output.output
    # It says which message the branch ends with: the reply just before Lockers' turn.
    assert "'Take your time.'" in output.output
    branch = session.userdata.session_id
    assert branch is not None and branch != source
    # What the agent sees next: the branch's conversation, without Lockers and after —
    # and not the visit's resume of the source either — then the request.
    seen = model.requests[-1]
    said = [text for role, text in seen.messages() if role in ("user", "assistant")]
    assert said[: len(turns[3].said)] == turns[3].said
    assert said[len(turns[3].said) :] == ["Go back to before we picked the lockers idea"]
    assert session.userdata.state.data["ideas"] == []
    await session.aclose()
    await flushed(runtime)
    assert (await runtime.store.get_state(branch)).step == turns[3].zones[0]
    source_state = await runtime.store.get_state(source)
    assert [i["title"] for i in source_state.data["ideas"]] == ["Lockers", "Kiosks"]


async def test_an_unclear_moment_is_asked_about_and_nothing_is_made(runtime: Runtime) -> None:
    source, _ = await conversation(runtime)
    session, model = await resume(runtime, source)
    user = session.userdata.user_id
    assert user is not None
    before = len(await runtime.store.get_user_sessions(user))
    for words, answer in [
        ("what about", "Ask the user to be more specific"),  # Lockers' and Kiosks' turns
        ("bicycles", "No message of this session mentions 'bicycles'"),
        ("the", "Ask the user which moment they mean"),
    ]:
        model.extend([call("branch_session", before=words), say("Which moment?")])
        result: RunResult[None] = await session.run(user_input=f"Go back to before {words}")
        output = result.expect.next_event(type="function_call_output").event().item
        assert output.is_error and answer in output.output, output.output
        assert session.userdata.session_id == source
    await session.aclose()
    assert len(await runtime.store.get_user_sessions(user)) == before


def message(n: int, role: str, content: str) -> MessageRecord:
    return MessageRecord(n, "s", None, role, content, False, datetime(2026, 1, 1, tzinfo=UTC))


def test_the_turn_before_the_match_is_kept_whole() -> None:
    said = [
        message(1, "assistant", "Hi! What shall we design?"),
        message(2, "user", "Lockers for the gym"),
        message(3, "assistant", "Noted the lockers."),
        message(4, "user", "Now kiosks"),
        message(5, "assistant", "Kiosks, then."),
    ]
    assert message_before(said, "kiosks").id == 3  # a reply in that turn matches too
    assert message_before(said, "Kiosks, then").id == 3
    assert message_before(said, "gym").id == 1  # the greeting stays
