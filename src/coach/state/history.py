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


Size = tuple[int, int]
"""(estimated tokens, lines) of one item."""


def item_size(item: llm.ChatItem) -> Size:
    """The estimated tokens and the lines an item costs (an empty item costs nothing)."""
    text = item_text(item)
    return (estimate_tokens(text), text.count("\n") + 1 if text else 0)


def prune_chat_items(
    items: Sequence[llm.ChatItem],
    *,
    max_tokens: int,
    max_lines: int,
    sizes: dict[str, Size] | None = None,
) -> list[llm.ChatItem]:
    """Return the items to send: system prompt(s) plus the newest units within budget.

    ``sizes`` caches each item's size by item id across calls, so a long session is not
    measured again before every LLM request (items do not change once added).
    """
    cache: dict[str, Size] = {} if sizes is None else sizes

    def size(item: llm.ChatItem) -> Size:
        if _is_system(item):  # the system prompt changes with the phase: never cached
            return item_size(item)
        found = cache.get(item.id)
        if found is None:
            found = cache[item.id] = item_size(item)
        return found

    system = [item for item in items if _is_system(item)]
    rest = [item for item in items if not _is_system(item)]
    tokens = sum(size(i)[0] for i in system)
    lines = sum(size(i)[1] for i in system)
    kept: list[list[llm.ChatItem]] = []
    for unit in reversed(_units(rest)):
        unit_tokens = sum(size(i)[0] for i in unit)
        unit_lines = sum(size(i)[1] for i in unit)
        if kept and (tokens + unit_tokens > max_tokens or lines + unit_lines > max_lines):
            break
        kept.append(unit)
        tokens += unit_tokens
        lines += unit_lines
    return system + [item for unit in reversed(kept) for item in unit]
