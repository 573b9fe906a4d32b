"""Text that is not UTF-8 in tool arguments and in the context: every request to the
model still encodes, and what is stored and shown holds valid text."""

from __future__ import annotations

import asyncio
import json

from livekit.agents import llm
from livekit.agents.voice.run_result import RunResult
from livekit.plugins import openai

from coach.conversation.runtime import Runtime
from coach.testing import FakeOpenAIServer, ScriptedLLM, call, say
from coach.testing.scripted_llm import RecordedRequest

from .helpers import start

INTERNAL = "An internal error occurred"  # what livekit answers for an exception in a tool


def sendable(request: RecordedRequest) -> str:
    """The request as the openai plugin would send it, encoded as UTF-8 (fails if not)."""
    messages, _ = request.chat_ctx.to_provider_format("openai")
    body = json.dumps(messages, ensure_ascii=False)
    body.encode("utf-8")
    return body


async def test_a_lone_surrogate_echoed_by_a_tool_reaches_the_real_model_cleaned(
    runtime: Runtime,
) -> None:
    async with FakeOpenAIServer([say("Hi!")]) as server:
        model = openai.LLM(model="fake", base_url=server.base_url, api_key="x")
        userdata = runtime.new_userdata(identity="ada")
        session = runtime.new_session(userdata, llm=model)
        await (await session.start(runtime.first_agent(userdata), capture_run=True))
        server.extend([call("select_session_to_load", session_id="old\ud800"), say("Which?")])
        await session.run(user_input="Load my old session")
        server.extend([say("Still here.")])
        result: RunResult[None] = await session.run(
            user_input="Hello again"
        )  # every later turn works too
        reply = result.expect.next_event().is_message(role="assistant").event().item
        assert reply.text_content == "Still here."
        await session.aclose()

    assert server.script.remaining == 0
    tool_replies = [m for m in server.requests[-1]["messages"] if m.get("role") == "tool"]
    assert tool_replies and "old\ufffd" in tool_replies[0]["content"]


async def test_tool_arguments_are_stored_and_shown_as_valid_text(runtime: Runtime) -> None:
    model = ScriptedLLM([say("Hi! What's your name?")])
    session = await start(runtime, model)
    model.extend(
        [
            call("identify_user", name="Ada \ud83d\x00"),
            call("capture_design_challenge", challenge="Onboarding \udcff for all\x00"),
            say("Noted."),
        ]
    )
    result: RunResult[None] = await session.run(user_input="I'm Ada")
    outputs = [e.item.output for e in result.events if isinstance(e.item, llm.FunctionCallOutput)]
    assert len(outputs) == 2 and INTERNAL not in outputs
    userdata = session.userdata
    assert userdata.user_name == "Ada \ufffd\ufffd"
    assert userdata.design_challenge == "Onboarding \ufffd for all\ufffd"
    assert userdata.state.data["challenge"] == userdata.design_challenge
    sendable(model.requests[-1])
    assert userdata.session_id is not None
    stored = await runtime.store.get_session(userdata.session_id)
    assert stored is not None and stored.design_challenge == userdata.design_challenge
    user = await runtime.store.find_user("ada-\ufffd\ufffd")
    assert user is not None and user.display_name == "Ada \ufffd\ufffd"
    await session.aclose()


async def test_a_name_no_identity_can_hold_is_a_tool_error_not_a_crash(runtime: Runtime) -> None:
    model = ScriptedLLM([say("Hi! What's your name?")])
    session = await start(runtime, model)
    model.extend([call("identify_user", name="Ada\x01Lovelace"), say("Sorry?")])
    result: RunResult[None] = await session.run(user_input="I'm Ada")
    output = result.expect.next_event(type="function_call_output").event().item
    assert output.is_error and output.output.startswith("An identity must be plain text")
    assert session.userdata.user_id is None
    await session.aclose()


async def test_what_is_in_the_context_is_sent_as_valid_utf8(runtime: Runtime) -> None:
    model = ScriptedLLM([say("Hi! What's your name?")])
    session = await start(runtime, model)
    model.extend([say("Hello.")])
    await session.run(user_input="I'm Ada \udcff\udcfe")  # e.g. a broken transcript
    assert ("user", "I'm Ada \ufffd\ufffd") in model.requests[-1].messages()
    sendable(model.requests[-1])
    # The agent's own history is left as it was; only what is sent is cleaned.
    kept = [m.text_content for m in session.history.messages() if m.role == "user"]
    assert kept == ["I'm Ada \udcff\udcfe"]
    await session.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 5)
