"""A model that is still generating while a test acts: the n-th request streams the n-th
list of steps — text pieces, tool calls, and awaitables the stream waits on in between.

What :class:`~coach.testing.ScriptedLLM` cannot do: hold a reply half-said (to interrupt
it, to stop the chat in the middle of it). Render requests (the brief's model) are
answered by a :class:`ScriptedLLM`'s render lane and never take a reply.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Literal

from livekit.agents import llm
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions

from .script import is_render_request
from .scripted_llm import ScriptedLLM

Step = str | llm.FunctionToolCall | Callable[[], Awaitable[Any]]
"""Text to stream, a tool call to make, or something to await before going on."""


def tool_call(name: str, arguments: str = "{}", call_id: str | None = None) -> llm.FunctionToolCall:
    """A tool call step (``arguments`` as the model sends them: JSON text)."""
    return llm.FunctionToolCall(name=name, arguments=arguments, call_id=call_id or f"call-{name}")


class PacedLLM(llm.LLM[Literal["metrics_collected", "error"]]):
    """Answers the n-th request with the n-th list of :data:`Step`."""

    def __init__(self, *replies: list[Step]) -> None:
        super().__init__()
        self._replies: Iterator[list[Step]] = iter(replies)
        self._renderer = ScriptedLLM()

    def chat(
        self,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool] | None = None,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        tool_choice: Any = None,
        **_: Any,
    ) -> llm.LLMStream:
        if is_render_request(tool_choice):
            return self._renderer.chat(
                chat_ctx=chat_ctx, tools=tools, conn_options=conn_options, tool_choice=tool_choice
            )
        steps = next(self._replies)
        return _PacedStream(
            self, steps, chat_ctx=chat_ctx, tools=tools or [], conn_options=conn_options
        )


class _PacedStream(llm.LLMStream):
    def __init__(self, model: PacedLLM, steps: list[Step], **kwargs: Any) -> None:
        self._steps = steps
        super().__init__(model, **kwargs)

    async def _run(self) -> None:
        for step in self._steps:
            if isinstance(step, str):
                delta = llm.ChoiceDelta(role="assistant", content=step)
            elif isinstance(step, llm.FunctionToolCall):
                delta = llm.ChoiceDelta(role="assistant", tool_calls=[step])
            else:
                await step()
                continue
            self._event_ch.send_nowait(llm.ChatChunk(id="paced", delta=delta))
