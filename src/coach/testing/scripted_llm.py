"""An in-process LLM that answers from a :class:`~coach.testing.script.Script`.

``AgentSession(llm=ScriptedLLM([...]))`` runs agents, tools and handoffs exactly as with a
real model: text is streamed in several ``ChatChunk`` deltas and tool calls arrive as
``FunctionToolCall`` items with unique call ids and JSON arguments. Every ``chat()`` call
is recorded in :attr:`ScriptedLLM.requests` so tests can assert what the model was shown.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from livekit.agents import APIStatusError, llm
from livekit.agents.llm.tool_context import get_fnc_tool_names
from livekit.agents.types import (
    DEFAULT_API_CONNECT_OPTIONS,
    NOT_GIVEN,
    APIConnectOptions,
    NotGivenOr,
)

from .script import RenderLane, Reply, Script, as_script, is_render_request

__all__ = ["RecordedRequest", "ScriptedLLM"]

_INSTRUCTION_ROLES = ("system", "developer")

# Call ids are unique across every ScriptedLLM in the process (agents may own their own LLM).
_call_ids = itertools.count(1)


@dataclass
class RecordedRequest:
    """What the agent sent to the model in one ``chat()`` call.

    Attributes:
        chat_ctx: A copy of the chat context, taken when the request was made.
        tools: Names of the function tools offered, in the order given.
        tool_choice: The ``tool_choice`` the agent asked for, if any.
    """

    chat_ctx: llm.ChatContext
    tools: list[str] = field(default_factory=list)
    tool_choice: Any = None

    def messages(self) -> list[tuple[str, str]]:
        """``(role, text)`` for every chat message, in order (tool items are skipped)."""
        return [(m.role, m.text_content or "") for m in self.chat_ctx.messages()]

    def tool_outputs(self) -> list[tuple[str, str]]:
        """``(tool name, output)`` for every tool result in the context, in order."""
        return [
            (item.name, item.output)
            for item in self.chat_ctx.items
            if isinstance(item, llm.FunctionCallOutput)
        ]

    @property
    def system_prompt(self) -> str:
        """The text of all system/developer messages, joined by blank lines."""
        return "\n\n".join(text for role, text in self.messages() if role in _INSTRUCTION_ROLES)

    @property
    def last_user_message(self) -> str | None:
        """The text of the last user message, or ``None`` when there is none."""
        users = [text for role, text in self.messages() if role == "user"]
        return users[-1] if users else None


class ScriptedLLM(llm.LLM[Literal["metrics_collected", "error"]]):
    """A ``livekit.agents.llm.LLM`` that plays back scripted replies.

    Args:
        replies: The replies, or a :class:`Script` shared with something else.
        chunk_size: How many characters of text each streamed delta carries.
    """

    def __init__(self, replies: Iterable[Reply] | Script = (), *, chunk_size: int = 8) -> None:
        super().__init__()
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        self.script = as_script(replies)
        self.chunk_size = chunk_size
        self.requests: list[RecordedRequest] = []
        self.render = RenderLane()
        """Render requests (the brief's model call) and their answers, apart from the
        script: they never take a reply of the conversation's."""
        self._ids = itertools.count(1)

    @property
    def model(self) -> str:
        return "scripted"

    @property
    def provider(self) -> str:
        return "scripted"

    def extend(self, replies: Iterable[Reply]) -> None:
        """Append more replies to the script."""
        self.script.extend(replies)

    def chat(
        self,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool] | None = None,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        parallel_tool_calls: NotGivenOr[bool] = NOT_GIVEN,
        tool_choice: NotGivenOr[llm.ToolChoice] = NOT_GIVEN,
        extra_kwargs: NotGivenOr[dict[str, Any]] = NOT_GIVEN,
    ) -> ScriptedLLMStream:
        tools = tools or []
        if is_render_request(tool_choice):
            user = next((m.text_content or "" for m in chat_ctx.messages() if m.role == "user"), "")
            return ScriptedLLMStream(
                self,
                request=RecordedRequest(chat_ctx=chat_ctx.copy(), tools=get_fnc_tool_names(tools)),
                request_no=next(self._ids),
                chat_ctx=chat_ctx,
                tools=tools,
                conn_options=conn_options,
                reply=self.render.answer(user),
                gate=self.render.gate,
            )
        request = RecordedRequest(
            chat_ctx=chat_ctx.copy(),
            tools=get_fnc_tool_names(tools),
            tool_choice=tool_choice if tool_choice is not NOT_GIVEN else None,
        )
        self.requests.append(request)
        return ScriptedLLMStream(
            self,
            request=request,
            request_no=next(self._ids),
            chat_ctx=chat_ctx,
            tools=tools,
            conn_options=conn_options,
        )


class ScriptedLLMStream(llm.LLMStream):
    """Streams one scripted reply as ``ChatChunk`` deltas."""

    def __init__(
        self,
        scripted: ScriptedLLM,
        *,
        request: RecordedRequest,
        request_no: int,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool],
        conn_options: APIConnectOptions,
        reply: Reply | int | None = None,
        gate: asyncio.Event | None = None,
    ) -> None:
        super().__init__(scripted, chat_ctx=chat_ctx, tools=tools, conn_options=conn_options)
        self._scripted = scripted
        self._request = request
        self._request_no = request_no
        self._gate = gate
        self._failure = reply if isinstance(reply, int) else None
        self._reply: Reply | None = reply if not isinstance(reply, int) else None

    async def _run(self) -> None:
        # The reply is taken once, so a retry of this stream replays it instead of
        # consuming the next scripted reply.
        if self._gate is not None:
            await self._gate.wait()
        if self._failure is not None:
            raise APIStatusError(
                f"scripted failure {self._failure}", status_code=self._failure, retryable=False
            )
        if self._reply is None:
            last_user = self._request.last_user_message
            detail = f"last user message: {last_user!r}" if last_user is not None else ""
            self._reply = self._scripted.script.next_reply(detail)
        reply = self._reply
        chunk_id = f"scripted-{self._request_no}"
        size = self._scripted.chunk_size

        for start in range(0, len(reply.text), size):
            piece = reply.text[start : start + size]
            self._event_ch.send_nowait(
                llm.ChatChunk(id=chunk_id, delta=llm.ChoiceDelta(role="assistant", content=piece))
            )

        if reply.tool_calls:
            self._event_ch.send_nowait(
                llm.ChatChunk(
                    id=chunk_id,
                    delta=llm.ChoiceDelta(
                        role="assistant",
                        tool_calls=[
                            llm.FunctionToolCall(
                                name=tool_call.name,
                                arguments=tool_call.encoded(),
                                call_id=f"call_scripted_{next(_call_ids)}",
                            )
                            for tool_call in reply.tool_calls
                        ],
                    ),
                )
            )

        prompt_tokens = sum(len(text) for _, text in self._request.messages()) // 4
        completion_tokens = len(reply.text) // 4 + len(reply.tool_calls)
        self._event_ch.send_nowait(
            llm.ChatChunk(
                id=chunk_id,
                usage=llm.CompletionUsage(
                    completion_tokens=completion_tokens,
                    prompt_tokens=prompt_tokens,
                    total_tokens=prompt_tokens + completion_tokens,
                ),
            )
        )
