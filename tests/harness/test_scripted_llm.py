from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from livekit.agents import Agent, AgentSession, RunContext, function_tool, llm
from livekit.agents.voice.run_result import RunResult

from coach.testing import (
    Reply,
    Script,
    ScriptedLLM,
    ScriptError,
    ScriptExhausted,
    ToolCall,
    call,
    calls,
    load_script,
    say,
)

# A run that hangs is a failure, not a stuck suite.
RUN_TIMEOUT = 10.0

INTAKE_PROMPT = "You are the intake coach. Ask for the person's goal and record it."
REVIEW_PROMPT = "You are the reviewer. Greet the person and review their goal."


@dataclass
class Notes:
    goal: str | None = None
    deadline_weeks: int | None = None
    tags: list[str] = field(default_factory=list)


class Reviewer(Agent):
    def __init__(self) -> None:
        super().__init__(instructions=REVIEW_PROMPT)

    async def on_enter(self) -> None:
        self.session.generate_reply()


class Intake(Agent):
    def __init__(self) -> None:
        super().__init__(instructions=INTAKE_PROMPT)

    @function_tool
    async def record_goal(self, context: RunContext[Notes], goal: str, deadline_weeks: int) -> str:
        """Record the person's goal and how many weeks they have."""
        context.userdata.goal = goal
        context.userdata.deadline_weeks = deadline_weeks
        return f"Recorded goal {goal!r} due in {deadline_weeks} weeks."

    @function_tool
    async def add_tag(self, context: RunContext[Notes], tag: str) -> str:
        """Tag the goal with a topic."""
        context.userdata.tags.append(tag)
        return f"tagged {tag}"

    @function_tool
    async def start_review(self, context: RunContext[Notes]) -> Agent:
        """Hand the person over to the reviewer once the goal is recorded."""
        return Reviewer()


@pytest.fixture
def notes() -> Notes:
    return Notes()


async def start_session(
    model: ScriptedLLM, notes: Notes, agent: Agent | None = None
) -> AgentSession[Notes]:
    session = AgentSession[Notes](llm=model, userdata=notes)
    await session.start(agent or Intake())
    return session


@pytest.fixture
def scripted() -> ScriptedLLM:
    return ScriptedLLM(chunk_size=4)


@pytest.fixture
async def session(scripted: ScriptedLLM, notes: Notes) -> AsyncIterator[AgentSession[Notes]]:
    sess = await start_session(scripted, notes)
    yield sess
    await sess.aclose()


async def run(session: AgentSession[Notes], text: str) -> RunResult[None]:
    async with asyncio.timeout(RUN_TIMEOUT):
        return await session.run(user_input=text)


# -- the script data ------------------------------------------------------------------


def test_builders_make_replies() -> None:
    assert say("hi") == Reply(text="hi")
    assert call("record_goal", goal="ship", deadline_weeks=2) == Reply(
        tool_calls=(ToolCall("record_goal", {"goal": "ship", "deadline_weeks": 2}),)
    )
    both = calls(ToolCall("add_tag", {"tag": "a"}), ToolCall("add_tag", {"tag": "b"}))
    assert [tc.arguments["tag"] for tc in both.tool_calls] == ["a", "b"]
    assert both.text == ""
    with pytest.raises(ScriptError):
        calls()


def test_script_is_a_fifo_that_fails_clearly_when_empty() -> None:
    script = Script([say("one")])
    script.extend([say("two")])
    assert script.remaining == 2
    assert script.next_reply() == say("one")
    assert script.next_reply() == say("two")
    assert script.remaining == 0
    with pytest.raises(ScriptExhausted, match=r"all 2 scripted replies were used.*reply #3"):
        script.next_reply()
    with pytest.raises(ScriptError, match="Reply objects"):
        script.extend(["not a reply"])  # type: ignore[list-item]


YAML_SCRIPT = """
- say: Hello! What are you working on?
- call: record_goal
  args: {goal: ship v1, deadline_weeks: 3}
- calls:
    - {call: add_tag, args: {tag: design}}
    - {call: add_tag, args: {tag: research}}
- say: Handing you over.
  call: start_review
- Plain strings are text replies.
"""

YAML_REPLIES = [
    say("Hello! What are you working on?"),
    call("record_goal", goal="ship v1", deadline_weeks=3),
    calls(ToolCall("add_tag", {"tag": "design"}), ToolCall("add_tag", {"tag": "research"})),
    Reply(text="Handing you over.", tool_calls=(ToolCall("start_review"),)),
    say("Plain strings are text replies."),
]


def test_load_script_from_yaml_text_and_file(tmp_path: Path) -> None:
    assert load_script(YAML_SCRIPT) == YAML_REPLIES
    path = tmp_path / "replies.yaml"
    path.write_text(YAML_SCRIPT, encoding="utf-8")
    assert load_script(path) == YAML_REPLIES
    assert load_script(str(path)) == YAML_REPLIES


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("say: not a list", "a script is a YAML list"),
        ("- {say: ok}\n- {shout: loud}", r"item #1: unknown keys \['shout'\]"),
        ("- {call: a, calls: [{call: b}]}", "either 'call' or 'calls'"),
        ("- {call: a, args: [1, 2]}", "'args' must be a mapping"),
        ("- {calls: []}", "non-empty list"),
        ("- {say: [1]}", "'say' must be a string"),
        ("- [unclosed", "not valid YAML"),
    ],
)
def test_load_script_rejects_malformed_documents(document: str, message: str) -> None:
    with pytest.raises(ScriptError, match=message):
        load_script(document)


# -- the LLM stream itself -------------------------------------------------------------


async def test_stream_splits_text_into_chunks_and_tool_calls_into_function_calls() -> None:
    text = "Let me write that down for you."
    model = ScriptedLLM(
        [Reply(text=text, tool_calls=(ToolCall("add_tag", {"tag": "x"}), ToolCall("noop")))],
        chunk_size=5,
    )
    ctx = llm.ChatContext.empty()
    ctx.add_message(role="user", content="hi")

    deltas: list[str] = []
    tool_calls: list[llm.FunctionToolCall] = []
    async with model.chat(chat_ctx=ctx) as stream:
        async for chunk in stream:
            if chunk.delta and chunk.delta.content:
                deltas.append(chunk.delta.content)
            if chunk.delta:
                tool_calls.extend(chunk.delta.tool_calls)

    assert deltas == [text[i : i + 5] for i in range(0, len(text), 5)]
    assert [(tc.name, json.loads(tc.arguments)) for tc in tool_calls] == [
        ("add_tag", {"tag": "x"}),
        ("noop", {}),
    ]
    assert len({tc.call_id for tc in tool_calls}) == 2
    assert model.model == model.provider == "scripted"
    await model.aclose()


async def test_collect_gives_back_the_whole_reply() -> None:
    model = ScriptedLLM([say("A reply longer than one chunk.")], chunk_size=3)
    response = await model.chat(chat_ctx=llm.ChatContext.empty()).collect()
    assert response.text == "A reply longer than one chunk."
    assert response.tool_calls == []
    assert response.usage is not None


# -- driving an AgentSession -------------------------------------------------------------


async def test_text_reply(session: AgentSession[Notes], scripted: ScriptedLLM) -> None:
    scripted.extend([say("Hello! What are you working on this week?")])

    result = await run(session, "hi")

    message = result.expect.next_event().is_message(role="assistant")
    assert message.event().item.text_content == "Hello! What are you working on this week?"
    result.expect.no_more_events()
    assert scripted.script.remaining == 0


async def test_tool_call_mutates_userdata(
    session: AgentSession[Notes], scripted: ScriptedLLM, notes: Notes
) -> None:
    scripted.extend(
        [call("record_goal", goal="ship v1", deadline_weeks=3), say("Got it: ship v1.")]
    )

    result = await run(session, "I want to ship v1 in three weeks")

    expect = result.expect
    expect.next_event().is_function_call(
        name="record_goal", arguments={"goal": "ship v1", "deadline_weeks": 3}
    )
    expect.next_event().is_function_call_output(
        output="Recorded goal 'ship v1' due in 3 weeks.", is_error=False
    )
    expect.next_event().is_message(role="assistant")
    expect.no_more_events()
    assert notes == Notes(goal="ship v1", deadline_weeks=3)
    # the follow-up request showed the model its tool's result
    assert scripted.requests[-1].tool_outputs() == [
        ("record_goal", "Recorded goal 'ship v1' due in 3 weeks.")
    ]


async def test_parallel_tool_calls_all_run(
    session: AgentSession[Notes], scripted: ScriptedLLM, notes: Notes
) -> None:
    scripted.extend(
        [
            calls(ToolCall("add_tag", {"tag": "design"}), ToolCall("add_tag", {"tag": "ux"})),
            say("Tagged both."),
        ]
    )

    result = await run(session, "tag it design and ux")

    expect = result.expect
    expect.contains_function_call(name="add_tag", arguments={"tag": "design"})
    expect.contains_function_call(name="add_tag", arguments={"tag": "ux"})
    expect.contains_function_call_output(output="tagged design")
    expect.contains_function_call_output(output="tagged ux")
    expect[-1].is_message(role="assistant")
    assert sorted(notes.tags) == ["design", "ux"]
    assert len(scripted.requests) == 2  # one request for both calls, one follow-up
    assert sorted(scripted.requests[-1].tool_outputs()) == [
        ("add_tag", "tagged design"),
        ("add_tag", "tagged ux"),
    ]


async def test_handoff_to_second_agent(session: AgentSession[Notes], scripted: ScriptedLLM) -> None:
    scripted.extend([call("start_review"), say("Hi, I'm the reviewer. Let's look at it.")])

    result = await run(session, "I'm done, please review")

    expect = result.expect
    expect.next_event().is_function_call(name="start_review")
    expect.next_event().is_function_call_output()
    expect.next_event().is_agent_handoff(new_agent_type=Reviewer)
    reply = expect.next_event().is_message(role="assistant")
    assert reply.event().item.text_content == "Hi, I'm the reviewer. Let's look at it."
    expect.no_more_events()
    assert isinstance(session.current_agent, Reviewer)
    # the reviewer's reply was generated under its own prompt, with its own (no) tools
    assert scripted.requests[-1].system_prompt == REVIEW_PROMPT
    assert scripted.requests[-1].tools == []


async def test_requests_record_prompt_tools_and_messages(
    session: AgentSession[Notes], scripted: ScriptedLLM
) -> None:
    scripted.extend([say("First."), say("Second.")])

    await run(session, "one")
    await run(session, "two")

    first, second = scripted.requests
    assert first.system_prompt == INTAKE_PROMPT
    assert sorted(first.tools) == ["add_tag", "record_goal", "start_review"]
    assert first.messages() == [("system", INTAKE_PROMPT), ("user", "one")]
    assert second.messages()[1:] == [("user", "one"), ("assistant", "First."), ("user", "two")]
    assert second.last_user_message == "two"
    # the recorded context is a copy: later turns do not rewrite earlier requests
    assert len(first.messages()) == 2


async def test_exhausted_script_fails_the_run_clearly(notes: Notes) -> None:
    model = ScriptedLLM([call("record_goal", goal="ship", deadline_weeks=1)])
    session = await start_session(model, notes)
    try:
        with pytest.raises(
            ScriptExhausted, match=r"all 1 scripted reply were used.*last user message: 'go'"
        ):
            await run(session, "go")
    finally:
        await session.aclose()
    # the tool did run before the follow-up request found the script empty
    assert notes.goal == "ship"
    assert len(model.requests) == 2


async def test_empty_script_fails_on_first_request(notes: Notes) -> None:
    model = ScriptedLLM()
    session = await start_session(model, notes)
    try:
        with pytest.raises(ScriptExhausted, match="all 0 scripted replies"):
            await run(session, "hello?")
    finally:
        await session.aclose()


async def test_yaml_script_drives_a_session(notes: Notes) -> None:
    model = ScriptedLLM(load_script(YAML_SCRIPT))
    session = await start_session(model, notes)
    try:
        greeting = await run(session, "hi")
        # one user turn chains the rest: tool -> parallel tools -> text + handoff -> on_enter
        work = await run(session, "ship v1 in three weeks, tag it design and research")
    finally:
        await session.aclose()

    greeting.expect.next_event().is_message(role="assistant")
    greeting.expect.no_more_events()
    expect = work.expect
    expect.next_event().is_function_call(name="record_goal")
    expect.next_event().is_function_call_output()
    expect.skip_next(4)  # two add_tag calls and their outputs
    assert expect.next_event().is_message(role="assistant").event().item.text_content == (
        "Handing you over."
    )
    expect.next_event().is_function_call(name="start_review")
    expect.next_event().is_function_call_output()
    expect.next_event().is_agent_handoff(new_agent_type=Reviewer)
    expect.next_event().is_message(role="assistant")
    expect.no_more_events()
    assert notes == Notes(goal="ship v1", deadline_weeks=3, tags=["design", "research"])
    assert model.script.remaining == 0
