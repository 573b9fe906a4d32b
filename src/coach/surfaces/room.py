"""What the room sees: state changes on topic ``coach.state``, agent/phase attributes, and
the ``coach.focus`` RPC (a user action on the view zone).

Messages are delivered in the order of their steps by one sender task per session;
publishing never waits for the network or the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Protocol

from livekit import rtc

from ..live_state import action_id
from ..state.design import DesignError
from ..state.view import focus
from ..state.zones import Action, Zone
from ..store import clean_text
from ..userdata import UserData

logger = logging.getLogger("coach.room")

STATE_TOPIC = "coach.state"
FOCUS_METHOD = "coach.focus"
MAX_RPC_PAYLOAD = 4_096
"""Bytes (UTF-8) an RPC payload may have; a larger one is refused with 413."""


class RoomOutput(Protocol):
    """The part of ``rtc.LocalParticipant`` the room surface uses (a fake in tests)."""

    async def send_text(
        self, text: str, *, destination_identities: list[str] | None = ..., topic: str = ...
    ) -> Any:
        """Send a text stream."""
        ...

    async def set_attributes(self, attributes: dict[str, str]) -> None:
        """Update the participant's attributes."""
        ...


class RoomStateSink:
    """Sends every state message to the session's user, in order, without blocking."""

    def __init__(self, output: RoomOutput, user_identity: str) -> None:
        self._output = output
        self._user = user_identity
        self._queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._task = asyncio.create_task(self._send_all(), name="coach.room.state")
        self._attributes: dict[str, str] = {}

    def publish(self, message: dict[str, Any]) -> None:
        """Queue one ``coach.state`` message (called from the agent's turn; never blocks)."""
        self._queue.put_nowait(message)

    async def aclose(self) -> None:
        """Send what is queued, then stop."""
        self._queue.put_nowait(None)
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _send_all(self) -> None:
        while (message := await self._queue.get()) is not None:
            try:
                await self._output.send_text(
                    json.dumps(message, separators=(",", ":")),
                    destination_identities=[self._user],
                    topic=STATE_TOPIC,
                )
                if message.get("zone") == "view" and message.get("value"):
                    await self._update_attributes(message["value"])
            except Exception:  # a lost message must not stop the ones after it
                logger.exception("could not send a state message to the room")

    async def _update_attributes(self, view: dict[str, Any]) -> None:
        attributes = {
            "coach.agent": str(view.get("agent") or ""),
            "coach.phase": str(view.get("phase_id") or ""),
        }
        if attributes != self._attributes:
            self._attributes = attributes
            await self._output.set_attributes(attributes)


def handle_focus(userdata: UserData, data: rtc.RpcInvocationData) -> str:
    """``coach.focus {"item": "<insight or idea id>"}``: focus an item (view delta only).

    Only the session's owner may call it; the payload is validated and limited to
    :data:`MAX_RPC_PAYLOAD` bytes. Every refusal is an ``RpcError`` with the code the
    README documents (403, 413, 400, 409, 404) and nothing changes.
    """
    if userdata.identity is None or data.caller_identity != userdata.identity:
        raise rtc.RpcError(403, "Only the session's owner can do this.")
    # Bytes on the wire, not characters ("surrogatepass": counting must not fail).
    if len(data.payload.encode("utf-8", "surrogatepass")) > MAX_RPC_PAYLOAD:
        raise rtc.RpcError(413, f"Payload too large (more than {MAX_RPC_PAYLOAD} bytes).")
    try:
        payload = json.loads(data.payload)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to read
        raise rtc.RpcError(400, "Payload must be JSON.") from None
    item = payload.get("item") if isinstance(payload, dict) else None
    if not isinstance(item, str) or not item:
        raise rtc.RpcError(400, 'Expected {"item": "<insight or idea id>"}.')
    item = clean_text(item)  # echoed in errors and stored: valid UTF-8 only
    state = userdata.state
    if state.session_id is None:
        raise rtc.RpcError(409, "No design session is active yet.")
    try:
        view, change = focus(state.view, state.data, item)
    except DesignError as exc:
        raise rtc.RpcError(404, str(exc)) from None
    delta = state.write(
        Zone.VIEW,
        view,
        change,
        Action(type="focus", params={"item": item}),
        trigger="user_action",
        source="user",
        actor_id=data.caller_identity,
        turn_id=action_id(),
    )
    return json.dumps({"ok": True, "step": delta.step if delta else None})
