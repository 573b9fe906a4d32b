"""Attach recording to one ``AgentSession``: every item, as it happens, into the queue,
and where each completed phase ends (its branch point) once its turn is over."""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Callable
from typing import Any

from livekit.agents import AgentSession, llm
from livekit.agents.voice.events import (
    CloseEvent,
    ConversationItemAddedEvent,
    FunctionToolsExecutedEvent,
)

from ..store import AddMessage, AppendSteps, ClosePhase
from .userdata import UserData

logger = logging.getLogger("coach.recorder")


class SessionRecorder:
    """Turns one conversation's events into queued writes.

    Items that happen before the conversation has a stored session (the greeting, the
    user's name) are held and written as soon as the session exists — a new one or a
    resumed one — so the stored memory and messages cover the whole visit.
    """

    def __init__(self, userdata: UserData) -> None:
        self._userdata = userdata
        self._held: list[tuple[llm.ChatItem, str | None]] = []
        self._session_id: str | None = None
        self._next_step = 0
        self._closed: set[str] = set()
        """Completed phases whose end is recorded (or was, before a resume)."""

    def attach(self, session: AgentSession[Any]) -> SessionRecorder:
        """Subscribe to the session's events (handlers only enqueue)."""
        session.on("conversation_item_added", _handler(self._on_item_added))
        session.on("function_tools_executed", _handler(self._on_tools_executed))
        session.on("close", _handler(self._on_close))
        return self

    def _on_item_added(self, event: ConversationItemAddedEvent) -> None:
        item = event.item
        if isinstance(item, llm.ChatMessage) and item.role == "user":
            self._close_phases()  # the turn before the user's message is whole
        if isinstance(item, llm.ChatMessage | llm.AgentHandoff):
            self._record([item])

    def _on_tools_executed(self, event: FunctionToolsExecutedEvent) -> None:
        items: list[llm.ChatItem] = []
        for call, output in zip(event.function_calls, event.function_call_outputs, strict=False):
            items += [call, output]
        self._record(items)

    def _on_close(self, _: CloseEvent) -> None:
        self._userdata.state.close()  # a brief still being rendered: the deterministic one
        self._close_phases()

    def _close_phases(self) -> None:
        """Record where each phase completed since the last turn ends: here, between two
        turns, so a branch from it never cuts a tool call from its output."""
        session_id = self._sync_session()
        if session_id is None:
            return
        userdata, state = self._userdata, self._userdata.state
        for phase_id in userdata.completed_phases:
            if phase_id in self._closed:
                continue
            self._closed.add(phase_id)
            userdata.recorder.submit(
                ClosePhase(
                    session_id, phase_id, self._next_step, state.step, copy.deepcopy(state.zones())
                )
            )

    def _sync_session(self) -> str | None:
        """Follow the userdata's session (created or resumed) and release held items."""
        session_id = self._userdata.session_id
        if session_id is None or session_id == self._session_id:
            return session_id
        self._session_id = session_id
        resumed = self._userdata.resumed
        is_resumed = resumed is not None and resumed.session.id == session_id
        self._next_step = self._userdata.stored_steps if is_resumed else 0
        self._closed = set(self._userdata.completed_phases) if is_resumed else set()
        held, self._held = self._held, []
        for item, phase_id in held:
            self._write(session_id, item, phase_id)
        return session_id

    def _record(self, items: list[llm.ChatItem]) -> None:
        session_id = self._sync_session()
        phase_id = self._userdata.current_phase_id
        for item in items:
            if session_id is None:
                self._held.append((item, phase_id))
            else:
                self._write(session_id, item, phase_id)

    def _write(self, session_id: str, item: llm.ChatItem, phase_id: str | None) -> None:
        recorder = self._userdata.recorder
        if isinstance(item, llm.ChatMessage) and item.role in ("user", "assistant"):
            text = item.text_content
            if text:
                recorder.submit(AddMessage(session_id, item.role, text, phase_id, item.interrupted))
        recorder.submit(AppendSteps(session_id, self._next_step, (item,)))
        self._next_step += 1


def _handler(method: Callable[[Any], None]) -> Callable[[Any], None]:
    """``method`` as a plain function with its signature computed once.

    The session's emitter inspects a handler's signature on every event: ~20 µs each
    time for a bound method, ~5 µs with the signature precomputed.
    """

    def handler(event: Any) -> None:
        method(event)

    handler.__signature__ = inspect.signature(handler)  # type: ignore[attr-defined]
    return handler
