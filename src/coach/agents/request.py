"""The shape of each request to the model, as local OpenAI-compatible servers need it.

Called from ``CoachAgentBase.llm_node`` on the framework's per-request copy of the
context: the agent's own history is never changed.
"""

from __future__ import annotations

import dataclasses

from livekit.agents import NOT_GIVEN, ModelSettings, llm

SYSTEM_ROLES = frozenset({"system", "developer"})


def one_system_message(chat_ctx: llm.ChatContext) -> None:
    """Fold the system (or developer) messages that open ``chat_ctx`` into one.

    The framework sends a greeting's instructions (``generate_reply(instructions=...)``)
    as a second system message right after the agent's. Some chat templates reject a
    second system message, and some repeat the whole tool list for each one (a local
    model then read 1,430 prompt tokens instead of 522). The texts keep their order,
    separated by a blank line; the first message keeps its id (the framework finds its
    instructions by it). A system message after the conversation has started (a greeting
    after a handoff or a resume) stays where it is: it must be read last, after the
    earlier conversation, or the model answers that conversation's last turn again.
    """
    opening: list[llm.ChatMessage] = []
    leading = 0  # items before the conversation: system messages and markers (a handoff)
    for item in chat_ctx.items:
        if isinstance(item, llm.ChatMessage):
            if item.role not in SYSTEM_ROLES:
                break
            opening.append(item)
        elif isinstance(item, llm.FunctionCall | llm.FunctionCallOutput):
            break
        leading += 1
    if len(opening) < 2:
        return
    texts = [text for message in opening if (text := (message.text_content or "").strip())]
    merged = opening[0].model_copy(update={"role": "system", "content": ["\n\n".join(texts)]})
    markers = [item for item in chat_ctx.items[:leading] if not isinstance(item, llm.ChatMessage)]
    chat_ctx.items = [merged, *markers, *chat_ctx.items[leading:]]


def with_tool_choice(model_settings: ModelSettings, tools: list[llm.Tool]) -> ModelSettings:
    """``model_settings`` with ``tool_choice="auto"`` whenever tools are offered and the
    framework chose nothing.

    The plugin sends ``tool_choice`` only once a tool has run; llama-cpp-python's server
    reads a missing ``tool_choice`` as "none", so its model never sees a tool. Without
    tools the plugin leaves ``tool_choice`` out of the request itself.
    """
    chosen = model_settings.tool_choice
    if tools and (chosen is NOT_GIVEN or chosen is None):
        return dataclasses.replace(model_settings, tool_choice="auto")
    return model_settings
