"""What the three agents share: prompt rendering, the greeting on entry, context limits,
text fit for the model (valid UTF-8) in every request, and words for a database that
does not answer (:func:`needs_notes`)."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any, ClassVar, ParamSpec, TypeVar

from livekit.agents import Agent, ModelSettings, ToolError, llm
from pydantic import JsonValue

from ..conversation.userdata import UserData
from ..errors import StaleWrite, StorageError
from ..prompts import AgentKind
from ..state.design import Change
from ..state.history import prune_chat_items
from ..state.shapes import DataZone
from ..state.view import navigate
from ..state.zones import Action, Zone
from ..store import clean_text, is_clean
from .offer import offered_tools
from .request import checked_tool_calls, one_system_message, with_tool_choice

logger = logging.getLogger("coach.agents")

_AGENTS: dict[AgentKind, type[CoachAgentBase]] = {}

NOTES_UNREACHABLE = (
    "I can't reach my notes right now (the database did not answer). Tell the user so in "
    "one short sentence and carry on with the conversation; try this again later."
)
"""What a tool tells the model when the database fails it: the turn goes on."""

P = ParamSpec("P")
R = TypeVar("R")


def needs_notes(tool: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Wrap a tool that reads or writes the store directly (put it under ``@function_tool``).

    A database that is down or stalled (:class:`~coach.errors.StorageError`, which a
    stalled server becomes after ``COACH_DB_TIMEOUT``) turns into
    :data:`NOTES_UNREACHABLE` for the model to say, instead of an internal error. A
    conflict (:class:`~coach.errors.StaleWrite`) is not an outage and passes through.
    """

    @functools.wraps(tool)
    async def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await tool(*args, **kwargs)
        except StaleWrite:
            raise
        except StorageError as exc:
            logger.warning(
                "%s could not reach the database (%s)", tool.__name__, type(exc).__name__
            )
            raise ToolError(NOTES_UNREACHABLE) from None

    return guarded


def agent_for(kind: AgentKind) -> type[CoachAgentBase]:
    """The agent class that owns phases of ``kind``."""
    return _AGENTS[kind]


def model_safe(item: llm.ChatItem) -> llm.ChatItem:
    """``item``, or a copy of it whose text fields are valid UTF-8 (:func:`clean_text`).

    Whatever got into the context — a lone surrogate a model passed to a tool and a tool
    echoed, text from an earlier session's stored memory — a request to the model must
    still encode; one bad character must not fail every turn after it.
    """
    changed: dict[str, Any] = {}
    for name, value in vars(item).items():  # the fields' values (no deprecated getters)
        if isinstance(value, str) and not is_clean(value):
            changed[name] = clean_text(value)
        elif isinstance(value, list) and any(
            isinstance(part, str) and not is_clean(part) for part in value
        ):
            changed[name] = [clean_text(p) if isinstance(p, str) else p for p in value]
    return item.model_copy(update=changed) if changed else item


def recap(userdata: UserData) -> str:
    """One sentence on where a session stands, for greetings after a resume."""
    manifest = userdata.prompts.manifest
    done = [manifest.get(p).name for p in userdata.completed_phases]
    upcoming = userdata.next_phase()
    parts = [f'you are working on "{userdata.design_challenge or "a new challenge"}"']
    if done:
        parts.append(f"{len(done)} of {len(manifest.phases)} phases are done (last: {done[-1]})")
    if upcoming is not None:
        parts.append(f"next is {upcoming.name}")
    return ", ".join(parts) + "."


class CoachAgentBase(Agent):
    """An agent whose instructions and greeting come from its prompt file.

    Each concrete agent names its ``kind`` and is then found by :func:`agent_for`, so a
    handoff decided by state needs no import of the agent it hands to.
    """

    kind: ClassVar[AgentKind]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            _AGENTS[cls.kind] = cls

    def __init__(
        self,
        userdata: UserData,
        *,
        chat_ctx: llm.ChatContext | None = None,
        resumed: bool = False,
    ) -> None:
        self.resumed = resumed
        super().__init__(instructions=self.render_instructions(userdata), chat_ctx=chat_ctx)

    def render_instructions(self, userdata: UserData) -> str:
        """The system prompt for the current state of ``userdata``."""
        return userdata.prompts.render(self.kind, "instructions", **self.prompt_variables(userdata))

    def prompt_variables(self, userdata: UserData) -> dict[str, Any]:
        """The variables this agent's templates may use."""
        return {
            "user_name": userdata.user_name or "(not known yet)",
            "phase_list": userdata.prompts.phase_list(),
            "session_brief": userdata.brief(),
        }

    async def refresh_instructions(self) -> str:
        """Render the instructions for the state as it is now and use them from the next
        request on (the brief after a change of phase, person or session). Returns them."""
        instructions = self.render_instructions(self.userdata)
        if instructions != self.sent_instructions:
            await self.update_instructions(instructions)
        return instructions

    @property
    def sent_instructions(self) -> str:
        """The instructions the model gets with this agent's requests now."""
        current = self.instructions
        return current if isinstance(current, str) else current.render()

    def greeting(self, userdata: UserData) -> str:
        """Instructions for the first reply after this agent takes over."""
        key = "resume_greeting" if self.resumed else "greeting"
        if getattr(userdata.prompts.agents[self.kind], key) is None:
            key = "greeting"
        return userdata.prompts.render(self.kind, key, **self.greeting_variables(userdata))

    def greeting_variables(self, userdata: UserData) -> dict[str, Any]:
        """The variables a greeting may use."""
        return {"user_name": userdata.user_name or "there", "recap": recap(userdata)}

    @property
    def userdata(self) -> UserData:
        """The session's shared state."""
        data: UserData = self.session.userdata
        return data

    async def on_enter(self) -> None:
        userdata = self.userdata
        userdata.current_agent = self.kind
        await self.on_takeover(userdata)
        self.show_in_view(userdata)
        self.session.generate_reply(instructions=self.greeting(userdata))

    def change_data(
        self, userdata: UserData, data: DataZone, change: Change, tool: str, **params: JsonValue
    ) -> None:
        """Write the data zone with a delta naming the tool and its parameters (layer 1)."""
        if userdata.session_id is not None and userdata.recorder.is_fenced(userdata.session_id):
            raise ToolError(
                "This session was changed from another device, so this change cannot be "
                "saved. Tell the user and suggest reloading the session."
            )
        userdata.state.write(
            Zone.DATA, data, change, Action(type="tool", tool=tool, params=dict(params))
        )

    def show_in_view(self, userdata: UserData) -> None:
        """Point the view zone at this agent and the current phase (a handoff or phase change)."""
        moved = navigate(userdata.state.view, self.kind, userdata.current_phase_id)
        if moved is not None:
            view, change = moved
            userdata.state.write(Zone.VIEW, view, change, Action(type="navigate"))

    async def on_takeover(self, userdata: UserData) -> None:
        """Hook run when the agent becomes active, before it greets."""

    async def llm_node(
        self,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool],
        model_settings: ModelSettings,
    ) -> AsyncIterable[llm.ChatChunk | str]:
        userdata = self.userdata
        # Back-pressure: if the recorder cannot keep up, the agent waits here rather
        # than the recorder dropping writes.
        await userdata.recorder.wait_for_capacity()
        last_user = next(
            (
                i
                for i in reversed(chat_ctx.items)
                if isinstance(i, llm.ChatMessage) and i.role == "user"
            ),
            None,
        )
        userdata.state.begin_turn(
            last_user.id if last_user else None,
            last_user.text_content if last_user else None,
            actor_id=self.kind,
        )
        # The framework hands us a per-request copy: pruning it never touches stored history.
        kept = prune_chat_items(
            chat_ctx.items,
            max_tokens=userdata.max_history_tokens,
            max_lines=userdata.max_history_lines,
            sizes=userdata.item_sizes,
        )
        if len(kept) != len(chat_ctx.items):
            logger.debug(
                "pruned LLM context", extra={"kept": len(kept), "total": len(chat_ctx.items)}
            )
            chat_ctx.items = kept
        # Copies replace unfit items: the agent's own history is left as it was.
        chat_ctx.items = [model_safe(item) for item in chat_ctx.items]
        one_system_message(chat_ctx)
        offered = offered_tools(tools, userdata)
        model_settings = with_tool_choice(model_settings, offered)
        called_tools = False
        try:
            async for chunk in Agent.default.llm_node(self, chat_ctx, offered, model_settings):
                if isinstance(chunk, llm.ChatChunk) and chunk.delta and chunk.delta.tool_calls:
                    called_tools = True
                    chunk = checked_tool_calls(chunk)
                if isinstance(chunk, llm.ChatChunk | str):
                    yield chunk
        finally:
            if not called_tools:
                # A reply without tool calls ends the agent's turn — also when the user
                # interrupts it: layer 3 renders what this turn changed.
                userdata.state.end_agent_turn()
