"""Layer 3 as a model (seed 003's Agent2): the design brief, written by a model call.

After an agent turn whose tools changed the data zone, :class:`ModelRenderer` sends the
renderer model one request: its prompt (``prompts/renderer.yaml``) and, as JSON, the
current view, the person's request of that turn, the turn's data changes and the brief as
it was — not the conversation. The model answers by calling ``render_brief``; the text
becomes the template zone's ``markdown``. The board beside it is always built by the
deterministic :class:`~coach.state.board.BriefRenderer` from the data zone, so a bad
answer can never corrupt what the board shows.

:class:`~coach.live_state.LiveState` runs it off the voice path (one render at a time
per session; a stale result is dropped; a failure falls back to the deterministic brief).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Final

from livekit.agents import llm
from pydantic_core import from_json

from ..state.board import RenderInput
from ..store import clean_text

logger = logging.getLogger("coach.renderer")

TOOL: Final = "render_brief"
MAX_BRIEF: Final = 8_000
"""Characters a rendered brief may have; a longer answer is a failed render."""
DEFAULT_TIMEOUT: Final = 60.0
"""Seconds a render may take before the deterministic brief is used instead."""


class RenderFailed(Exception):
    """Raised when the renderer model gives no usable brief (the message says why)."""


async def _render_brief(markdown: str) -> str:
    """Show the person the whole new design brief.

    Args:
        markdown: The complete brief, in Markdown.
    """
    return markdown


RENDER_TOOL: Final = llm.function_tool(_render_brief, name=TOOL)


@dataclass(frozen=True)
class Usage:
    """Estimated tokens of one render (about four characters a token)."""

    prompt_tokens: int
    completion_tokens: int


def render_request(given: RenderInput, previous: str | None) -> str:
    """The user message of a render request: view, request, changes and the old brief."""
    changes = [
        {
            "path": d.path,
            "type": d.delta_type,
            "tool": d.action.tool,
            "values": d.action.params,
            "count": d.result.count,
        }
        for d in given.deltas
    ]
    return json.dumps(
        {
            "view": given.view,
            "request": given.request,
            "changes": changes,
            "previous_brief": previous,
        },
        ensure_ascii=False,
    )


class ModelRenderer:
    """Writes the brief's Markdown with a model call (see the module's doc).

    Args:
        model: The LLM to ask (the conversation's own model, or a smaller one).
        instructions: The renderer's system prompt.
        timeout: Seconds a render may take.
    """

    def __init__(
        self, model: llm.LLM[Any], instructions: str, *, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        self.model = model
        self.instructions = instructions
        self.timeout = timeout
        self.last_usage: Usage | None = None

    async def brief(self, given: RenderInput, previous: str | None) -> str:
        """The new brief for ``given``; :class:`RenderFailed` when the model gives none."""
        request = render_request(given, previous)
        chat_ctx = llm.ChatContext.empty()
        chat_ctx.add_message(role="system", content=self.instructions)
        chat_ctx.add_message(role="user", content=request)
        arguments: list[str] = []
        # Forced, and said so explicitly: a local server reads a missing tool_choice as none.
        choice: llm.ToolChoice = {"type": "function", "function": {"name": TOOL}}
        async with self.model.chat(
            chat_ctx=chat_ctx, tools=[RENDER_TOOL], tool_choice=choice
        ) as stream:
            async for chunk in stream:
                for call in (chunk.delta.tool_calls if chunk.delta else None) or []:
                    if call.name == TOOL:
                        arguments.append(call.arguments)
        if not arguments:
            raise RenderFailed("the model did not call render_brief")
        markdown = _markdown(arguments[-1])
        self.last_usage = Usage(
            prompt_tokens=(len(self.instructions) + len(request)) // 4,
            completion_tokens=len(arguments[-1]) // 4,
        )
        return markdown


def _markdown(arguments: str) -> str:
    try:
        parsed: Any = from_json(arguments)
    except ValueError:
        raise RenderFailed("render_brief's arguments are not JSON") from None
    markdown = parsed.get("markdown") if isinstance(parsed, dict) else None
    if not isinstance(markdown, str) or not markdown.strip():
        raise RenderFailed("render_brief gave no markdown")
    if len(markdown) > MAX_BRIEF:
        raise RenderFailed(f"the brief is over {MAX_BRIEF} characters")
    return clean_text(markdown).strip() + "\n"
