"""The shape of each request to the model, as local OpenAI-compatible servers need it.

Called from ``CoachAgentBase.llm_node`` on the framework's per-request copy of the
context: the agent's own history is never changed.
"""

from __future__ import annotations

import dataclasses
import json

from livekit.agents import NOT_GIVEN, ModelSettings, llm
from pydantic_core import from_json

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


def checked_tool_calls(chunk: llm.ChatChunk) -> llm.ChatChunk:
    """``chunk``, its tool calls' arguments each one JSON object, or refused.

    The framework repairs whatever a model sends as arguments, so text that is no JSON
    object at all (``{"text": "a" "b"}``, ``{text: words}``) would be stored as a guess.
    Here, arguments cut off mid-object (a model stopped by ``max_tokens``) are completed
    and the tool runs; anything else is replaced by a message the framework cannot read
    as arguments, so the tool does not run and the model is told, as a tool error, to
    call it again with a JSON object. Empty arguments are left to the framework.
    """
    delta = chunk.delta
    if delta is None or not delta.tool_calls:
        return chunk
    calls = [_checked(call) for call in delta.tool_calls]
    if all(new is old for new, old in zip(calls, delta.tool_calls, strict=True)):
        return chunk
    return chunk.model_copy(update={"delta": delta.model_copy(update={"tool_calls": calls})})


def _checked(call: llm.FunctionToolCall) -> llm.FunctionToolCall:
    raw = call.arguments
    if not raw.strip():
        return call
    try:
        if isinstance(json.loads(raw), dict):
            return call
        problem = "a JSON value that is not an object"
    except json.JSONDecodeError as exc:
        completed = _completed(raw, exc)
        if completed is not None:
            return call.model_copy(update={"arguments": json.dumps(completed)})
        problem = f"{exc.msg} at character {exc.pos}"
    # The framework unwraps a JSON string as doubly-encoded arguments, finds no JSON in
    # it and answers the call with a tool error quoting it: this text reaches the model.
    refusal = (
        f"the arguments are not a valid JSON object ({problem}). Call {call.name} again with "
        f"its arguments as one JSON object. What you sent: {raw[:200]}"
    )
    return call.model_copy(update={"arguments": json.dumps(refusal)})


def _completed(raw: str, error: json.JSONDecodeError) -> dict[str, object] | None:
    """The object ``raw`` begins, when ``raw`` is a valid JSON object cut off; else None."""
    text = raw.rstrip()
    if error.msg.startswith("Unterminated string"):
        probe = text[:-1] if _ends_in_escape(text) else text
        try:
            json.loads(probe + '"')
        except json.JSONDecodeError as again:
            if again.pos < len(probe) + 1:  # an error before the end: not a cut-off
                return None
    elif error.pos < len(text):
        return None
    try:
        value = from_json(raw, allow_partial="trailing-strings")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _ends_in_escape(text: str) -> bool:
    backslashes = len(text) - len(text.rstrip("\\"))
    return backslashes % 2 == 1
