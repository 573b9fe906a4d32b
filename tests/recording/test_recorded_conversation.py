"""A whole scripted conversation, then the database read back."""

import asyncio

from livekit.agents import llm

from coach.conversation.runtime import Runtime
from coach.testing import ScriptedLLM, say

from .visit import CHALLENGE, GREETING, TURNS, Watcher, run_turn


async def test_every_step_of_a_full_conversation_is_stored(runtime: Runtime) -> None:
    model = ScriptedLLM([say(GREETING)])
    userdata = runtime.new_userdata()
    session = runtime.new_session(userdata, llm=model)
    seen = Watcher(userdata).attach(session).items  # what the session emitted, in order
    await (await session.start(runtime.first_agent(userdata), capture_run=True))
    for turn in range(len(TURNS)):
        await run_turn(session, model, turn)
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
    assert by_text[GREETING] is None  # before any phase was active
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
