"""What coach sends a model server, read off the wire: the real openai plugin against the
fake OpenAI server, driven through the chat. A local server (llama.cpp, llama-cpp-python,
Ollama) reads a missing ``tool_choice`` as "none" on some versions, may reject a second
system message, and generates until its context is full without a token cap."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from livekit.agents import llm

from coach.models import build_llm
from coach.settings import Settings
from coach.surfaces.chat import EXIT_OK, run_chat
from coach.testing import DEMO_SCRIPT, FakeOpenAIServer, load_script
from tests.support import keys_url

from .test_chat_cli import SECRET

DEMO = DEMO_SCRIPT
TURNS = "I'm Ada\nOnboarding for my budgeting app\nThey quit at bank linking\n"


def settings_for(server: FakeOpenAIServer, database_url: str, **extra: Any) -> Settings:
    return Settings(
        database_url=database_url,
        keys_url=keys_url(database_url),
        secret_key=SECRET,
        llm_base_url=server.base_url,
        llm_model="fake",
        **extra,
    )


async def demo_requests(database_url: str, **extra: Any) -> list[dict[str, Any]]:
    """The requests of the demo conversation: greeting, tools, a handoff, a phase."""
    async with FakeOpenAIServer(load_script(DEMO)) as server:
        err = io.StringIO()
        code = await run_chat(
            settings_for(server, database_url, **extra),
            user="ada",
            stdin=io.StringIO(TURNS),
            stdout=io.StringIO(),
            stderr=err,
        )
        assert code == EXIT_OK, err.getvalue()
        assert server.script.remaining == 0
        return server.requests


def system_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] in ("system", "developer")]


async def test_tool_choice_auto_is_sent_whenever_tools_are_offered(sqlite_url: str) -> None:
    requests = await demo_requests(sqlite_url)
    assert all(r.get("tools") for r in requests)
    # The first request too: before any tool result, the plugin leaves it out.
    assert [r.get("tool_choice") for r in requests] == ["auto"] * len(requests)


async def test_no_tool_choice_without_tools(sqlite_url: str) -> None:
    async with FakeOpenAIServer(load_script("- say: hi")) as server:
        model = build_llm(settings_for(server, sqlite_url))
        try:
            ctx = llm.ChatContext.empty()
            ctx.add_message(role="user", content="hello")
            async with model.chat(chat_ctx=ctx) as stream:
                text = [c.delta.content async for c in stream if c.delta and c.delta.content]
            assert "".join(text) == "hi"
        finally:
            await model.aclose()
    (request,) = server.requests
    assert "tool_choice" not in request and "tools" not in request


async def test_a_request_opens_with_one_system_message(sqlite_url: str) -> None:
    requests = await demo_requests(sqlite_url)
    for request in requests:
        roles = [m["role"] for m in request["messages"]]
        assert roles[0] == "system" and "system" not in roles[1:], roles
    # The first request: the coach's instructions, then its greeting, in one message.
    (prompt,) = system_messages(requests[0])
    assert prompt.startswith("You are the Design Coach")
    assert prompt.index("Current user:") < prompt.index("Greet")
    # A greeting after a handoff: in the same one message, last, as what to do now.
    strategist_first = next(r for r in requests if "Design Strategist in one" in str(r))
    (prompt,) = system_messages(strategist_first)
    assert prompt.startswith("You are the Design Strategist")
    now = prompt.index("Now, for your next reply")
    assert now > prompt.index("Session brief") and now < prompt.index("Do not answer or repeat")


async def test_every_request_caps_the_reply_length(sqlite_url: str, tmp_path: Path) -> None:
    requests = await demo_requests(sqlite_url)
    assert [r.get("max_tokens") for r in requests] == [400] * len(requests)
    other = f"sqlite+aiosqlite:///{tmp_path / 'other.db'}"
    requests = await demo_requests(other, llm_max_tokens=123)
    assert [r.get("max_tokens") for r in requests] == [123] * len(requests)
