"""Context limits: what part of a chat history is sent to the LLM (pure logic).

The budget is counted in estimated tokens (about four characters each; no tokenizer
download needed) and in lines. The system prompt is always kept; then the most recent
items that fit. A run of function calls and their outputs is one unit: it is kept or
dropped whole, so the model never sees a call without its result (or the reverse). The
latest unit is always kept, even over budget — dropping the current tool result would
make the model call the tool again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from livekit.agents import llm

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate of the tokens in ``text``."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def item_text(item: llm.ChatItem) -> str:
    """The text an item contributes to an LLM request."""
    if isinstance(item, llm.ChatMessage):
        return item.text_content or ""
    if isinstance(item, llm.FunctionCall):
        return f"{item.name}({item.arguments})"
    if isinstance(item, llm.FunctionCallOutput):
        return item.output
    return ""


def _is_system(item: llm.ChatItem) -> bool:
    return isinstance(item, llm.ChatMessage) and item.role in ("system", "developer")


def _units(items: Sequence[llm.ChatItem]) -> list[list[llm.ChatItem]]:
    """Split items into units: single messages, or runs of calls and outputs."""
    units: list[list[llm.ChatItem]] = []
    for item in items:
        is_tool = isinstance(item, llm.FunctionCall | llm.FunctionCallOutput)
        if (
            is_tool
            and units
            and isinstance(units[-1][-1], llm.FunctionCall | llm.FunctionCallOutput)
        ):
            units[-1].append(item)
        else:
            units.append([item])
    return units


def prune_chat_items(
    items: Sequence[llm.ChatItem], *, max_tokens: int, max_lines: int
) -> list[llm.ChatItem]:
    """Return the items to send: system prompt(s) plus the newest units within budget."""
    system = [item for item in items if _is_system(item)]
    rest = [item for item in items if not _is_system(item)]
    tokens = sum(estimate_tokens(item_text(i)) for i in system)
    lines = sum(item_text(i).count("\n") + 1 for i in system)
    kept: list[list[llm.ChatItem]] = []
    for unit in reversed(_units(rest)):
        text = [item_text(i) for i in unit]
        unit_tokens = sum(estimate_tokens(t) for t in text)
        unit_lines = sum(t.count("\n") + 1 for t in text if t)
        if kept and (tokens + unit_tokens > max_tokens or lines + unit_lines > max_lines):
            break
        kept.append(unit)
        tokens += unit_tokens
        lines += unit_lines
    return system + [item for unit in reversed(kept) for item in unit]
