from datetime import UTC, datetime

from livekit.agents import llm

from coach.agents.restore import restored_chat_ctx
from coach.persistence import HistoryMessage, ResumeContext, ResumeResult, SessionRecord

NOW = datetime(2026, 11, 22, tzinfo=UTC)


def result(memory: list[object], history: list[HistoryMessage] | None = None) -> ResumeResult:
    session = SessionRecord("s" * 32, "u", "c", "in_progress", "strategist", "define", NOW, NOW, 2)
    context = ResumeContext(history or [], "empathize", 6, 2)
    return ResumeResult(session=session, next_phase_id="define", context=context, memory=memory)


def test_a_window_that_starts_mid_turn_begins_at_the_next_user_message() -> None:
    orphan = llm.FunctionCallOutput(call_id="c0", name="t", output="x", is_error=False)
    said = llm.ChatMessage(role="assistant", content=["done"])
    user = llm.ChatMessage(role="user", content=["next"])
    call = llm.FunctionCall(call_id="c1", name="t", arguments="{}")
    out = llm.FunctionCallOutput(call_id="c1", name="t", output="y", is_error=False)
    ctx = restored_chat_ctx(
        result([orphan, said, user, call, out]), current=llm.ChatContext.empty()
    )
    assert [i.id for i in ctx.items] == [user.id, call.id, out.id]


def test_without_memory_the_reconstructed_window_is_used_and_this_visit_follows() -> None:
    history = [
        HistoryMessage("user", "input", "empathize", False),
        HistoryMessage("assistant", "cut off", "empathize", True),
    ]
    now = llm.ChatContext.empty()
    now.add_message(role="system", content="old system prompt")
    now.add_message(role="user", content="continue")
    ctx = restored_chat_ctx(result([], history), current=now)
    messages = [
        (m.role, m.text_content, m.interrupted) for m in ctx.items if isinstance(m, llm.ChatMessage)
    ]
    assert messages == [
        ("user", "input", False),
        ("assistant", "cut off", True),  # shown as interrupted on resume
        ("user", "continue", False),
    ]
