from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from livekit.agents import (
    Agent,
    AgentSession,
    APIConnectOptions,
    APIStatusError,
    RunContext,
    function_tool,
)
from livekit.agents.voice.agent_session import SessionConnectOptions
from livekit.agents.voice.run_result import RunResult
from livekit.plugins import openai

from coach.testing import FakeOpenAIServer, Reply, ToolCall, call, calls, say
from tests.processes import GRACE, running

RUN_TIMEOUT = 10.0
REPO_ROOT = Path(__file__).resolve().parents[2]

PLANNER_PROMPT = "You are the planner. Record the person's plan."
COACH_PROMPT = "You are the coach. Encourage the person to start."

# Long enough that the server must split it over several 4-character chunks.
LONG_TEXT = "Tell me about the product you are designing and who it is for."
LONG_GOAL = "a calmer onboarding flow for first-time users"


@dataclass
class Plan:
    goal: str | None = None
    steps: list[str] = field(default_factory=list)


class Coach(Agent):
    def __init__(self) -> None:
        super().__init__(instructions=COACH_PROMPT)

    async def on_enter(self) -> None:
        self.session.generate_reply()


class Planner(Agent):
    def __init__(self) -> None:
        super().__init__(instructions=PLANNER_PROMPT)

    @function_tool
    async def record_plan(self, context: RunContext[Plan], goal: str, steps: list[str]) -> str:
        """Record the person's goal and the steps towards it."""
        context.userdata.goal = goal
        context.userdata.steps = list(steps)
        return f"Saved {len(steps)} steps."

    @function_tool
    async def hand_to_coach(self, context: RunContext[Plan]) -> Agent:
        """Hand over to the coach once the plan is recorded."""
        return Coach()


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer(chunk_size=4) as srv:
        yield srv


@pytest.fixture
def plan() -> Plan:
    return Plan()


@pytest.fixture
async def session(server: FakeOpenAIServer, plan: Plan) -> AsyncIterator[AgentSession[Plan]]:
    model = openai.LLM(model="fake", base_url=server.base_url, api_key="x")
    sess = AgentSession[Plan](
        llm=model,
        userdata=plan,
        # a failed request is reported at once instead of being retried with back-off
        conn_options=SessionConnectOptions(llm_conn_options=APIConnectOptions(max_retry=0)),
    )
    await sess.start(Planner())
    yield sess
    await sess.aclose()
    await model.aclose()


async def run(session: AgentSession[Plan], text: str) -> RunResult[None]:
    async with asyncio.timeout(RUN_TIMEOUT):
        return await session.run(user_input=text)


def streamed_deltas(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [choice["delta"] for chunk in chunks for choice in chunk["choices"]]


# -- the real openai plugin end to end ----------------------------------------------------


async def test_streamed_text_reply(server: FakeOpenAIServer, session: AgentSession[Plan]) -> None:
    server.extend([say(LONG_TEXT)])

    result = await run(session, "hello")

    message = result.expect.next_event().is_message(role="assistant")
    assert message.event().item.text_content == LONG_TEXT
    result.expect.no_more_events()
    # the reply really crossed the wire in many pieces
    contents = [d["content"] for d in streamed_deltas(server.responses[0]) if d.get("content")]
    assert len(contents) == len(LONG_TEXT) // 4 + 1
    assert "".join(contents) == LONG_TEXT

    (request,) = server.requests
    assert request["model"] == "fake"
    assert request["stream"] is True
    assert request["messages"] == [
        {"role": "system", "content": PLANNER_PROMPT},
        {"role": "user", "content": "hello"},
    ]


async def test_tool_call_with_arguments_split_over_chunks(
    server: FakeOpenAIServer, session: AgentSession[Plan], plan: Plan
) -> None:
    steps = ["interview five users", "sketch three flows", "test the best one"]
    server.extend([call("record_plan", goal=LONG_GOAL, steps=steps), say("Plan saved.")])

    result = await run(session, "here is my plan")

    expect = result.expect
    expect.next_event().is_function_call(
        name="record_plan", arguments={"goal": LONG_GOAL, "steps": steps}
    )
    expect.next_event().is_function_call_output(output="Saved 3 steps.", is_error=False)
    expect.next_event().is_message(role="assistant")
    expect.no_more_events()
    assert plan == Plan(goal=LONG_GOAL, steps=steps)

    # the arguments arrived in many tool_call deltas after the one naming the function
    tool_deltas = [
        d["tool_calls"][0] for d in streamed_deltas(server.responses[0]) if "tool_calls" in d
    ]
    assert tool_deltas[0]["function"]["name"] == "record_plan"
    assert len(tool_deltas) > 10
    assert all("name" not in d["function"] for d in tool_deltas[1:])

    first, follow_up = server.requests
    # tools are offered as strict JSON-schema functions
    offered = {tool["function"]["name"]: tool for tool in first["tools"]}
    assert set(offered) == {"record_plan", "hand_to_coach"}
    record_plan = offered["record_plan"]
    assert record_plan["type"] == "function"
    assert record_plan["function"]["strict"] is True
    assert record_plan["function"]["parameters"]["required"] == ["goal", "steps"]
    # the follow-up carries the assistant's tool call and the tool's output back
    assistant_call, tool_output = follow_up["messages"][-2:]
    (sent_call,) = assistant_call["tool_calls"]
    assert sent_call["function"]["name"] == "record_plan"
    assert json.loads(sent_call["function"]["arguments"]) == {"goal": LONG_GOAL, "steps": steps}
    assert tool_output == {
        "role": "tool",
        "tool_call_id": sent_call["id"],
        "content": "Saved 3 steps.",
    }


async def test_parallel_tool_calls_over_http(
    server: FakeOpenAIServer, session: AgentSession[Plan], plan: Plan
) -> None:
    server.extend(
        [
            calls(
                ToolCall("record_plan", {"goal": "first", "steps": ["a"]}),
                ToolCall("record_plan", {"goal": "second", "steps": ["b", "c"]}),
            ),
            say("Both saved."),
        ]
    )

    result = await run(session, "two plans")

    result.expect.contains_function_call(name="record_plan", arguments={"goal": "first"})
    result.expect.contains_function_call(name="record_plan", arguments={"goal": "second"})
    result.expect.contains_function_call_output(output="Saved 1 steps.")
    result.expect.contains_function_call_output(output="Saved 2 steps.")
    tool_messages = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 2
    assert len({m["tool_call_id"] for m in tool_messages}) == 2


async def test_handoff_to_second_agent(
    server: FakeOpenAIServer, session: AgentSession[Plan]
) -> None:
    server.extend([call("hand_to_coach"), say("Coach here. Let's start with step one.")])

    result = await run(session, "I'm ready")

    expect = result.expect
    expect.next_event().is_function_call(name="hand_to_coach", arguments={})
    expect.next_event().is_function_call_output()
    expect.next_event().is_agent_handoff(new_agent_type=Coach)
    reply = expect.next_event().is_message(role="assistant")
    assert reply.event().item.text_content == "Coach here. Let's start with step one."
    expect.no_more_events()
    assert isinstance(session.current_agent, Coach)

    # the coach's request used its own prompt and offered no tools
    coach_request = server.requests[-1]
    assert coach_request["messages"][0] == {"role": "system", "content": COACH_PROMPT}
    assert "tools" not in coach_request
    assert server.script.remaining == 0


async def test_exhausted_script_fails_the_run_with_the_servers_message(
    server: FakeOpenAIServer, session: AgentSession[Plan]
) -> None:
    with pytest.raises(APIStatusError, match="script exhausted: all 0 scripted replies") as info:
        await run(session, "anyone there?")
    assert info.value.status_code == 500
    assert "last user message: 'anyone there?'" in info.value.message
    assert len(server.requests) == 1


# -- the raw HTTP shape ---------------------------------------------------------------------


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def post_completion(
    http: aiohttp.ClientSession, server: FakeOpenAIServer, **body: Any
) -> aiohttp.ClientResponse:
    payload = {"model": "fake", "messages": [{"role": "user", "content": "hi"}], **body}
    return await http.post(f"{server.base_url}/chat/completions", json=payload)


async def read_sse(response: aiohttp.ClientResponse) -> list[str]:
    raw = (await response.read()).decode()
    events = raw.split("\n\n")
    assert events[-1] == ""  # the stream ends with a complete event
    assert all(event.startswith("data: ") for event in events[:-1])
    return [event.removeprefix("data: ") for event in events[:-1]]


async def test_models_endpoint(server: FakeOpenAIServer, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{server.base_url}/models") as response:
        assert response.status == 200
        body = await response.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["fake"]
    assert body["data"][0]["object"] == "model"


async def test_sse_stream_shape(server: FakeOpenAIServer, http: aiohttp.ClientSession) -> None:
    server.extend([Reply(text="Hello world!", tool_calls=(ToolCall("f", {"x": "long value"}),))])

    response = await post_completion(
        http, server, stream=True, stream_options={"include_usage": True}
    )
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    events = await read_sse(response)

    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    *choice_chunks, usage_chunk = chunks
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]

    deltas = [c["choices"][0]["delta"] for c in choice_chunks]
    finish = [c["choices"][0]["finish_reason"] for c in choice_chunks]
    assert deltas[0]["role"] == "assistant"
    assert finish == [None] * (len(choice_chunks) - 1) + ["tool_calls"]
    assert deltas[-1] == {}
    assert [d["content"] for d in deltas[1:4]] == ["Hell", "o wo", "rld!"]
    first_tool, *arg_pieces = (d["tool_calls"][0] for d in deltas[4:-1])
    assert first_tool["index"] == 0
    assert first_tool["id"].startswith("call_")
    assert first_tool["type"] == "function"
    assert first_tool["function"] == {"name": "f", "arguments": ""}
    assert len(arg_pieces) > 1
    assert all(piece["index"] == 0 for piece in arg_pieces)
    arguments = "".join(piece["function"]["arguments"] for piece in arg_pieces)
    assert json.loads(arguments) == {"x": "long value"}


async def test_sse_stream_without_usage_and_text_only(
    server: FakeOpenAIServer, http: aiohttp.ClientSession
) -> None:
    server.extend([say("ok")])

    response = await post_completion(http, server, stream=True)
    events = await read_sse(response)

    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert all(c["choices"] for c in chunks)  # no usage chunk was asked for
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_non_streaming_completion(
    server: FakeOpenAIServer, http: aiohttp.ClientSession
) -> None:
    server.extend([say("plain"), call("f", n=1)])

    async with await post_completion(http, server) as response:
        text_body = await response.json()
    async with await post_completion(http, server, stream=False) as response:
        tool_body = await response.json()

    assert text_body["object"] == "chat.completion"
    (choice,) = text_body["choices"]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == "plain"
    assert choice["finish_reason"] == "stop"
    assert "tool_calls" not in choice["message"]
    assert text_body["usage"]["completion_tokens"] >= 1

    (tool_choice,) = tool_body["choices"]
    assert tool_choice["finish_reason"] == "tool_calls"
    assert tool_choice["message"]["content"] is None
    (tool_call,) = tool_choice["message"]["tool_calls"]
    assert tool_call["function"] == {"name": "f", "arguments": '{"n": 1}'}
    assert len(server.requests) == 2


async def test_exhausted_script_answers_500_with_an_openai_error(
    server: FakeOpenAIServer, http: aiohttp.ClientSession
) -> None:
    server.extend([say("only one")])
    async with await post_completion(http, server, stream=True) as response:
        assert response.status == 200
        await response.read()

    async with await post_completion(http, server, stream=True) as response:
        assert response.status == 500
        body = await response.json()
    assert body["error"]["code"] == "script_exhausted"
    assert body["error"]["message"].startswith("script exhausted: all 1 scripted reply were used")


async def test_bad_json_is_a_400(server: FakeOpenAIServer, http: aiohttp.ClientSession) -> None:
    async with http.post(f"{server.base_url}/chat/completions", data=b"{nope") as response:
        assert response.status == 400
        body = await response.json()
    assert "not JSON" in body["error"]["message"]
    assert server.requests == []


async def test_base_url_only_while_running() -> None:
    server = FakeOpenAIServer()
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url
    async with server:
        assert server.base_url.startswith("http://127.0.0.1:")
        assert server.base_url.endswith("/v1")
        assert not server.base_url.endswith(":0/v1")
    with pytest.raises(RuntimeError, match="not running"):
        _ = server.base_url


# -- the CLI ---------------------------------------------------------------------------------


@pytest.mark.slow
async def test_cli_serves_a_yaml_script(tmp_path: Path, http: aiohttp.ClientSession) -> None:
    script = tmp_path / "replies.yaml"
    script.write_text("- say: Hi from the CLI.\n", encoding="utf-8")
    async with running(
        sys.executable,
        *("-m", "coach.testing.openai_server", "--port", "0", "--script", str(script)),
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None
        # Start-up waits on the banner; the limit only guards against a hang.
        async with asyncio.timeout(GRACE):
            banner = (await proc.stdout.readline()).decode()
        match = re.search(r"1 scripted replies at (http://127\.0\.0\.1:\d+/v1)$", banner.strip())
        assert match, banner
        base_url = match.group(1)

        async with http.get(f"{base_url}/models") as response:
            assert response.status == 200
        payload = {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}
        async with http.post(f"{base_url}/chat/completions", json=payload) as response:
            body = await response.json()
        assert body["choices"][0]["message"]["content"] == "Hi from the CLI."

        proc.send_signal(signal.SIGINT)  # Ctrl-C ends it cleanly
        async with asyncio.timeout(GRACE):
            returncode = await proc.wait()
    assert returncode == 0
