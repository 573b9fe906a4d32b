"""Rebuilding an agent's chat context from a resumed session."""

from __future__ import annotations

from livekit.agents import llm

from ..persistence import ResumeResult

CHAT_ITEM_TYPES = (
    llm.ChatMessage,
    llm.FunctionCall,
    llm.FunctionCallOutput,
    llm.AgentHandoff,
    llm.AgentConfigUpdate,
)


def restored_chat_ctx(result: ResumeResult, *, current: llm.ChatContext) -> llm.ChatContext:
    """The earlier conversation, then this visit's, without system prompts.

    Prefers the stored memory steps (exact chat items); when they are missing or did not
    load, falls back to the window reconstructed from phase outputs and the conversation.
    """
    if result.memory:
        earlier: list[llm.ChatItem] = [
            item for item in result.memory if isinstance(item, CHAT_ITEM_TYPES)
        ]
    else:
        earlier = [
            llm.ChatMessage(
                role=message.role,
                content=[message.content],
                interrupted=message.interrupted,
            )
            for message in result.context.history
        ]
    items: list[llm.ChatItem] = []
    seen: set[str] = set()
    for item in [*earlier, *current.items]:
        if item.id in seen or (isinstance(item, llm.ChatMessage) and item.role == "system"):
            continue
        seen.add(item.id)
        items.append(item)
    return llm.ChatContext(items)
