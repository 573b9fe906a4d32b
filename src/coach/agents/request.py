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


LATER = "Now, for your next reply (the conversation so far is below; do not answer it again):"
"""How an instruction given after the conversation began (a greeting after a handoff or
a resume) is introduced inside the one system message."""


def one_system_message(chat_ctx: llm.ChatContext) -> None:
    """Fold every system (or developer) message of ``chat_ctx`` into one, at the start.

    The framework sends a greeting's instructions (``generate_reply(instructions=...)``)
    as a second system message: right after the agent's at the start of a conversation,
    after the earlier conversation at a handoff or a resume. Some chat templates reject a
    second system message (or one anywhere but first), and some repeat the whole tool
    list for each one (a local model then read 1,430 prompt tokens instead of 522). The
    texts keep their order, separated by a blank line; one given after the conversation
    began comes last, under :data:`LATER`, so it still reads as what to do now. The
    first message keeps its id (the framework finds its instructions by it).
    """
    systems: list[llm.ChatMessage] = []
    opening: list[str] = []
    later: list[str] = []
    talking = False  # has the conversation begun (a message or a tool call)?
    for item in chat_ctx.items:
        if isinstance(item, llm.ChatMessage) and item.role in SYSTEM_ROLES:
            systems.append(item)
            if text := (item.text_content or "").strip():
                (later if talking else opening).append(text)
        elif isinstance(item, llm.ChatMessage | llm.FunctionCall | llm.FunctionCallOutput):
            talking = True
    if len(systems) < 2:
        return
    text = "\n\n".join(opening)
    if later:
        text = "\n\n".join([text, LATER, *later]) if text else "\n\n".join(later)
    merged = systems[0].model_copy(update={"role": "system", "content": [text]})
    folded = {id(message) for message in systems}
    chat_ctx.items = [merged, *(i for i in chat_ctx.items if id(i) not in folded)]


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
