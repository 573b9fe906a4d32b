"""Tool-call arguments that are not one JSON object: a model cut off by its token limit
sends a truncated object, a confused one sends something else. The real openai plugin,
over HTTP, against the fake OpenAI server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from livekit.agents import AgentSession
from livekit.plugins import openai

from coach.conversation.runtime import Runtime
from coach.conversation.userdata import UserData
from coach.testing import FakeOpenAIServer, call, raw_call, say


@pytest.fixture
async def strategist(
    runtime: Runtime,
) -> AsyncIterator[tuple[AgentSession[UserData], FakeOpenAIServer]]:
    """A conversation with the strategist, over the real plugin."""
    replies = [
        say("Hi! What would you like to design?"),
        call("capture_design_challenge", challenge="Onboarding for a budgeting app."),
        call("transfer_to_strategist"),
        say("Strategist here. Who gives up?"),
    ]
    async with FakeOpenAIServer(replies) as server:
        model = openai.LLM(model="fake", base_url=server.base_url, api_key="x")
        userdata = runtime.new_userdata(identity="ada")
        session = runtime.new_session(userdata, llm=model)
        await (await session.start(runtime.first_agent(userdata), capture_run=True))
        await session.run(user_input="Onboarding for my budgeting app")
        assert userdata.current_agent == "strategist"
        try:
            yield session, server
        finally:
            await session.aclose()
            await model.aclose()


def tool_replies(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def insights(session: AgentSession[UserData]) -> list[str]:
    return [i["text"] for i in session.userdata.state.data["insights"]]


async def test_truncated_arguments_are_completed_and_the_tool_runs(
    strategist: tuple[AgentSession[UserData], FakeOpenAIServer],
) -> None:
    session, server = strategist
    server.extend([raw_call("add_insight", '{"text": "unterminated'), say("Noted.")])
    await session.run(user_input="People distrust bank linking")
    assert insights(session) == ["unterminated"]
    assert tool_replies(server.requests[-1])[-1] == "Insight recorded (1 so far)."
    # The call goes back to the model as the valid JSON that ran.
    (sent,) = [
        c["function"]["arguments"]
        for m in server.requests[-1]["messages"]
        for c in m.get("tool_calls") or []
        if c["function"]["name"] == "add_insight"
    ]
    assert sent == '{"text": "unterminated"}'


@pytest.mark.parametrize(
    "arguments",
    ['{"text": "a" "b"}', "{text: unquoted}", '{"text": "ok"} and more', "the insight"],
)
async def test_arguments_that_are_not_json_are_refused_to_the_model(
    strategist: tuple[AgentSession[UserData], FakeOpenAIServer], arguments: str
) -> None:
    session, server = strategist
    server.extend(
        [
            raw_call("add_insight", arguments),
            call("add_insight", text="People distrust bank linking."),  # corrected
            say("Noted."),
        ]
    )
    await session.run(user_input="People distrust bank linking")
    # Nothing was stored from the refused call; the model read why and tried again.
    assert insights(session) == ["People distrust bank linking."]
    refused = tool_replies(server.requests[-2])[-1]
    assert "not a valid JSON object" in refused and "add_insight" in refused, refused
    assert tool_replies(server.requests[-1])[-1] == "Insight recorded (1 so far)."
