"""What the room sees: state changes on topic ``coach.state`` and agent/phase attributes.
(The RPC methods a frontend calls are in :mod:`.rpc`.)

Messages are delivered in the order of their steps by one sender task per session;
publishing never waits for the network or the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Protocol

logger = logging.getLogger("coach.room")

STATE_TOPIC = "coach.state"


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
