"""SessionRecorder turns session events into queued writes (no AgentSession needed)."""

from livekit import rtc
from livekit.agents import llm
from livekit.agents.voice.events import ConversationItemAddedEvent, FunctionToolsExecutedEvent

from coach.conversation.attach import SessionRecorder
from coach.conversation.runtime import Runtime
from coach.store import AddMessage, AppendSteps, WriteOp


def added(item: llm.ChatMessage | llm.AgentHandoff) -> ConversationItemAddedEvent:
    return ConversationItemAddedEvent(item=item)


async def test_items_before_the_session_exists_are_held_then_written_in_order(
    runtime: Runtime,
) -> None:
    submitted: list[WriteOp] = []
    runtime.recorder.submit = submitted.append  # type: ignore[method-assign,assignment]
    userdata = runtime.new_userdata(identity="ivy")
    events: rtc.EventEmitter[str] = rtc.EventEmitter()  # stands in for the AgentSession
    SessionRecorder(userdata).attach(events)  # type: ignore[arg-type]

    greeting = llm.ChatMessage(role="assistant", content=["Hello!"])
    events.emit("conversation_item_added", added(greeting))
    call = llm.FunctionCall(call_id="c1", name="identify_user", arguments="{}")
    out = llm.FunctionCallOutput(call_id="c1", name="identify_user", output="ok", is_error=False)
    events.emit(
        "function_tools_executed",
        FunctionToolsExecutedEvent(function_calls=[call], function_call_outputs=[out]),
    )
    assert submitted == []  # no session yet: held

    userdata.session_id, userdata.current_phase_id = "s" * 32, "empathize"
    cut = llm.ChatMessage(role="assistant", content=["Let me expl"], interrupted=True)
    events.emit("conversation_item_added", added(cut))

    messages = [op for op in submitted if isinstance(op, AddMessage)]
    steps = [op for op in submitted if isinstance(op, AppendSteps)]
    assert [(m.content, m.phase_id, m.interrupted) for m in messages] == [
        ("Hello!", None, False),  # phase as it was when it was said
        ("Let me expl", "empathize", True),
    ]
    assert [(s.start, s.steps[0]) for s in steps] == [(0, greeting), (1, call), (2, out), (3, cut)]
