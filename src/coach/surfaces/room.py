"""What the room sees: state changes on topic ``coach.state``, the agents' steps (tool
calls and handoffs) on ``coach.steps``, and agent/phase attributes. (The RPC methods a
frontend calls are in :mod:`.rpc`.)

Messages are delivered in the order of their steps by one sender task per session;
publishing never waits for the network or the database. Two kinds travel on the topic
(:data:`StateMessage`, the contract the TypeScript types are generated from): a
:class:`StateDelta` per change, and a :class:`StateSnapshot` — all three zones at a
step — whenever the conversation follows another session and when a client asks for a
fresh read (``coach.get_state``). Because both go through the same queue, a client
that applies deltas after the snapshot's step never sees a mix.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ..state.shapes import DataZone, TemplateZone, ViewZone
from ..state.zones import Delta

logger = logging.getLogger("coach.room")

STATE_TOPIC = "coach.state"
STEPS_TOPIC = "coach.steps"
TRANSCRIPTION_TOPIC = "lk.transcription"
"""LiveKit's transcript topic (what every LiveKit client shows as the agent's words)."""


# --- the contract: what a message on the topic holds ------------------------------------
# The zones' shapes are declared once, in coach.state.shapes; these messages carry them.


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, json_schema_serialization_defaults_required=True)


class StateDelta(_Wire):
    """One change: its delta and the whole new value of the zone it changed (``zone``
    null: a delta that changed no zone, such as a search that found nothing)."""

    type: Literal["delta"]
    session_id: str
    step: int = Field(ge=1)
    zone: Literal["data", "template", "view"] | None
    delta: Delta
    value: DataZone | TemplateZone | ViewZone | None


class StateSnapshot(_Wire):
    """The three zones at ``step``: apply deltas after that step only."""

    type: Literal["snapshot"]
    session_id: str | None = Field(description="null: no design session yet.")
    step: int = Field(ge=0)
    data: DataZone
    template: TemplateZone | None = Field(description="null: nothing rendered yet.")
    view: ViewZone | None = Field(description="null: no agent has taken the session yet.")


StateMessage = Annotated[StateDelta | StateSnapshot, Field(discriminator="type")]
"""A message on topic ``coach.state``."""


class ToolStep(_Wire):
    """An agent called a tool (as it happened; what a "show steps" view lists)."""

    type: Literal["tool"]
    tool: str
    arguments: str = Field(description="The arguments as the model sent them (JSON text).")
    ok: bool = Field(description="False: the tool refused or failed.")


class HandoffStep(_Wire):
    """The conversation passed from one agent to another."""

    type: Literal["handoff"]
    from_agent: str
    to_agent: str


StepMessage = Annotated[ToolStep | HandoffStep, Field(discriminator="type")]
"""A message on topic ``coach.steps``."""


class RoomOutput(Protocol):
    """The part of ``rtc.LocalParticipant`` the room surface uses (a fake in tests)."""

    async def send_text(
        self,
        text: str,
        *,
        destination_identities: list[str] | None = ...,
        topic: str = ...,
        attributes: dict[str, str] | None = ...,
    ) -> Any:
        """Send a text stream."""
        ...

    async def set_attributes(self, attributes: dict[str, str]) -> None:
        """Update the participant's attributes."""
        ...


class RoomStateSink:
    """Sends every state and step message to the session's user, in order, without
    blocking."""

    def __init__(self, output: RoomOutput, user_identity: str) -> None:
        self._output = output
        self._user = user_identity
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue()
        self._task = asyncio.create_task(self._send_all(), name="coach.room.state")
        self._attributes: dict[str, str] = {}

    def publish(self, message: dict[str, Any]) -> None:
        """Queue one ``coach.state`` message (called from the agent's turn; never blocks)."""
        self._queue.put_nowait((STATE_TOPIC, message))

    def publish_step(self, step: ToolStep | HandoffStep) -> None:
        """Queue one ``coach.steps`` message (never blocks)."""
        self._queue.put_nowait((STEPS_TOPIC, step.model_dump(mode="json")))

    async def tell(self, text: str) -> None:
        """Say ``text`` to the user in the room's transcript now (a final agent segment
        on ``lk.transcription``, as every LiveKit client shows the agent's words) — for
        when the agent cannot speak it, or the room is about to close."""
        await self._output.send_text(
            text,
            destination_identities=[self._user],
            topic=TRANSCRIPTION_TOPIC,
            attributes={
                "lk.segment_id": f"SG_coach_{uuid.uuid4().hex[:12]}",
                "lk.transcription_final": "true",
            },
        )

    async def aclose(self) -> None:
        """Send what is queued, then stop."""
        self._queue.put_nowait(None)
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _send_all(self) -> None:
        while (queued := await self._queue.get()) is not None:
            topic, message = queued
            try:
                await self._output.send_text(
                    json.dumps(message, separators=(",", ":")),
                    destination_identities=[self._user],
                    topic=topic,
                )
                if topic == STATE_TOPIC and message.get("zone") == "view" and message.get("value"):
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
