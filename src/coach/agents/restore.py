"""Rebuilding an agent's chat context from a resumed session."""

from __future__ import annotations

import logging

from livekit.agents import llm

from ..conversation.userdata import UserData
from ..store import ResumeResult
from .base import CoachAgentBase, agent_for

logger = logging.getLogger("coach.agents")

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
        logger.info("context restored from memory steps", extra={"items": len(result.memory)})
        earlier: list[llm.ChatItem] = [
            item for item in result.memory if isinstance(item, CHAT_ITEM_TYPES)
        ]
        # The newest steps may start mid-turn: begin at a user message, so no tool output
        # arrives without its call.
        first_user = next(
            (
                n
                for n, i in enumerate(earlier)
                if isinstance(i, llm.ChatMessage) and i.role == "user"
            ),
            len(earlier),
        )
        if any(isinstance(i, llm.FunctionCallOutput) for i in earlier[:first_user]):
            earlier = earlier[first_user:]
    else:
        logger.warning(
            "memory steps unavailable; context reconstructed from phase outputs and conversation",
            extra={"session_id": result.session.id, "messages": len(result.context.history)},
        )
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


def resumed_agent(
    userdata: UserData, result: ResumeResult, *, current: llm.ChatContext
) -> CoachAgentBase:
    """The agent that continues a session ``userdata`` just loaded, its context restored."""
    chat_ctx = restored_chat_ctx(result, current=current)
    return agent_for(userdata.next_agent_kind())(userdata, chat_ctx=chat_ctx, resumed=True)
