"""Into a stored session: :func:`resume_into` loads it (or a branch of it) and gives the
agent that continues it, its chat context rebuilt from what was stored."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import NamedTuple

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


@dataclass(frozen=True)
class BranchPoint:
    """Where a branch starts: after a completed phase, or after the turn of a
    conversation row (exactly one of the two)."""

    phase_id: str | None = None
    after_message: int | None = None


class Resumed(NamedTuple):
    """A session loaded into the conversation, and the agent that continues it."""

    agent: CoachAgentBase
    result: ResumeResult


async def resume_into(
    userdata: UserData,
    session_id: str,
    *,
    current: llm.ChatContext,
    branch: BranchPoint | None = None,
) -> Resumed:
    """Load the user's session ``session_id`` into ``userdata`` — or, with ``branch``, a
    new branch of it from that point — and give the agent of its next phase, whose chat
    context is the stored conversation followed by ``current`` (what of this visit
    carries over is the caller's to say).

    Every way into a stored session comes through here: the load and branch tools, the
    room's resume and branch methods, and a reconnect. The session is read with the
    user's id, so another user's session is as unknown as a missing one.

    Raises:
        ResumeError: unknown or not this user's (``SessionNotFound``), finished, or
            nothing to resume; the message is meant for the user.
        BranchRefused: that point cannot be branched from (words for the user).
        SavingBehind: what this process queued was not stored in time; nothing changed.
        NotIdentified: no user is identified (every caller identifies one first).
    """
    if branch is None:
        result = await userdata.load_state(session_id)
    else:
        result = await userdata.branch(
            session_id, branch.phase_id, after_message=branch.after_message
        )
    where = {"session_id": result.session.id, "next_phase": result.next_phase_id}
    if branch is not None:
        where["branch_of"] = session_id
    logger.info("session resumed", extra=where)
    chat_ctx = restored_chat_ctx(result, current=current)
    agent = agent_for(userdata.next_agent_kind())(userdata, chat_ctx=chat_ctx, resumed=True)
    return Resumed(agent, result)
