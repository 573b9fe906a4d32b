"""A whole scripted conversation, then the database read back."""

import asyncio

import pytest
from livekit.agents import llm
from livekit.agents.voice.events import ConversationItemAddedEvent, FunctionToolsExecutedEvent

from coach.runtime import Runtime
from coach.settings import Settings
from tests.agents.helpers import CHALLENGE
from tests.fakes import ScriptedLLM, call, say


@pytest.fixture(params=["process", "inline"])
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """Both writers: the recorder's child process (the default) and in-process."""
    return settings.model_copy(update={"recorder_process": request.param == "process"})


async def test_every_step_of_a_full_conversation_is_stored(runtime: Runtime) -> None:
    model = ScriptedLLM([say("Hi! Who are you?")])
    userdata = runtime.new_userdata()
    session = runtime.new_session(userdata, llm=model)
    seen: list[llm.ChatItem] = []  # what the session emitted, in order

    def on_item(ev: ConversationItemAddedEvent) -> None:
        if isinstance(ev.item, llm.ChatMessage | llm.AgentHandoff):
            seen.append(ev.item)

    def on_tools(ev: FunctionToolsExecutedEvent) -> None:
        for c, o in zip(ev.function_calls, ev.function_call_outputs, strict=True):
            seen.extend([c, o])

    session.on("conversation_item_added", on_item)
    session.on("function_tools_executed", on_tools)
    await (await session.start(runtime.first_agent(userdata), capture_run=True))

    turns = [
        ("I'm Ada", [call("identify_user", name="Ada"), say("Hi Ada! What shall we design?")]),
        (
            CHALLENGE,
            [
                call("capture_design_challenge", challenge=CHALLENGE),
                call("transfer_to_strategist"),
                say("Strategist here. Who struggles?"),
            ],
        ),
    ]
    for phase in ("empathize", "define", "ideate", "strategy"):
        turns.append((f"notes on {phase}", [say(f"Tell me more about {phase}.")]))
        turns.append(
            (
                f"done with {phase}",
                [call("complete_phase", summary=f"{phase} decided"), say(f"{phase} recorded.")],
            )
        )
    turns += [
        ("evaluate please", [call("transfer_to_evaluator"), say("Evaluator here.")]),
        (
            "score it",
            [
                call(
                    "record_evaluation", desirability=4, feasibility=4, viability=3, summary="Good."
                ),
                say("Scores are in."),
            ],
        ),
        ("bye", [call("finish_session"), say("Goodbye!")]),
    ]
    for text, replies in turns:
        model.extend(replies)
        await session.run(user_input=text)
    userdata = session.userdata
    session_id = userdata.session_id
    assert session_id is not None
    await session.aclose()
    await asyncio.wait_for(runtime.recorder.flush(), 10)
    store = runtime.store

    stored = await store.get_session(session_id)
    assert stored is not None
    assert (stored.status, stored.current_agent, stored.current_phase_id) == (
        "completed",
        "evaluator",
        "evaluation",
    )
    assert stored.design_challenge == CHALLENGE

    # Every user and assistant message, in order, with the phase it belongs to.
    conversation = await store.get_session_conversation(session_id)
    expected = [
        (m.role, m.text_content)
        for m in seen
        if isinstance(m, llm.ChatMessage) and m.role in ("user", "assistant") and m.text_content
    ]
    assert [(m.role, m.content) for m in conversation] == expected
    by_text = {m.content: m.phase_id for m in conversation}
    assert by_text["Hi! Who are you?"] is None  # before any phase was active
    assert by_text["notes on define"] == "define"
    assert by_text["define recorded."] == "ideate"  # said after define was completed
    assert by_text["score it"] == "evaluation"
    assert [m.content for m in await store.get_session_conversation(session_id, phase_id="ideate")][
        :2
    ] == [
        "define recorded.",
        "notes on ideate",
    ]

    # Phase outputs: all completed, prompts preserved through the completing update.
    outputs = await store.get_phase_outputs(session_id)
    assert [o.phase_id for o in outputs] == list(runtime.prompts.manifest.ids)
    assert all(o.status == "completed" for o in outputs)
    assert all(o.system_prompt and o.user_input for o in outputs)
    define = next(o for o in outputs if o.phase_id == "define")
    assert "Current phase: Define" in define.system_prompt  # type: ignore[operator]
    assert "Empathize: empathize decided" in define.user_input  # type: ignore[operator]
    assert define.output == "define decided"

    # Memory steps restore to an equivalent chat context: same items, same order.
    steps = await store.load_agent_state(session_id)
    assert [type(s) for s in steps] == [type(s) for s in seen]
    assert [s.id for s in steps] == [s.id for s in seen]  # type: ignore[attr-defined]
    restored = llm.ChatContext(steps)  # type: ignore[arg-type]
    original = llm.ChatContext(seen)
    assert restored.to_dict(exclude_timestamp=False) == original.to_dict(exclude_timestamp=False)
    assert await store.agent_step_count(session_id) == len(seen)
    assert runtime.recorder.stats().dropped == 0
    assert (runtime.writer is not None) is runtime.settings.recorder_process
