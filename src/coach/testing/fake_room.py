"""A LiveKit room without a server, for running the worker's entrypoint in-process.

:class:`FakeRoom` implements the part of ``rtc.Room`` that coach's entrypoint
(``ctx.connect``, ``ctx.wait_for_participant``, the ``coach.state`` sink, ``register_all``)
and LiveKit 1.8's text-only room I/O use (``RoomIO`` with ``audio_input`` and
``audio_output`` off, the session host's transport on ``lk.agent.session``), and records
what the agent did, so a test can play the user and read what reached the room:

* the user joins (:meth:`FakeRoom.join`) and types on ``lk.chat`` (:meth:`FakeRoom.type`),
  as a LiveKit client's chat input does;
* what the agent sends — text streams (``lk.transcription``, ``coach.state``), byte
  streams, attribute changes — is kept on :class:`FakeLocalParticipant`, and
  :meth:`FakeLocalParticipant.next_text` waits for the next whole stream of a topic;
* a registered RPC method is called through its handler with :meth:`FakeLocalParticipant.call`,
  as the SDK calls it for a remote ``performRpc``.

Not covered (a real room, and so a LiveKit server, is needed for them): audio and video
tracks (``publish_track``, subscriptions, ``AudioSource`` playout, so no STT, TTS or VAD),
the network itself (delivery, ordering across participants, payload limits, reconnects),
``perform_rpc`` from the agent side, data packets and E2EE. A method the fakes do not have
raises ``AttributeError``: the test then names what the code under test started using.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from livekit import rtc

__all__ = [
    "FakeLocalParticipant",
    "FakeRemoteParticipant",
    "FakeRoom",
    "SentStream",
]

WAIT = 10.0
"""Seconds :meth:`FakeLocalParticipant.next_text` and ``wait_until`` wait at most."""

_ids = itertools.count(1)


def _sid(prefix: str) -> str:
    return f"{prefix}_fake{next(_ids)}"


@dataclass
class SentStream:
    """One text stream the agent sent, complete once the sender closed it."""

    topic: str
    destination_identities: list[str] | None
    attributes: dict[str, str]
    chunks: list[str] = field(default_factory=list)
    closed: bool = False

    @property
    def text(self) -> str:
        return "".join(self.chunks)


class FakeTextWriter:
    """What ``LocalParticipant.stream_text`` returns: chunks, then a close."""

    def __init__(self, participant: FakeLocalParticipant, stream: SentStream) -> None:
        self._participant = participant
        self._stream = stream
        self.info = rtc.TextStreamInfo(
            stream_id=_sid("TS"),
            mime_type="text/plain",
            topic=stream.topic,
            timestamp=int(time.time() * 1000),
            size=None,
            attributes=dict(stream.attributes),
            attachments=[],
        )

    async def write(self, text: str) -> None:
        if self._stream.closed:
            raise RuntimeError("Cannot write after stream is closed")
        self._participant._check_connected()
        self._stream.chunks.append(text)

    async def aclose(self, *, reason: str = "", attributes: dict[str, str] | None = None) -> None:
        if self._stream.closed:
            return
        self._stream.attributes.update(attributes or {})
        self._stream.closed = True
        await self._participant._notify()


class FakeTextReader:
    """What a text stream handler receives: the whole text, read at once or by chunks."""

    def __init__(self, text: str, topic: str, attributes: dict[str, str] | None = None) -> None:
        self._text = text
        self.info = rtc.TextStreamInfo(
            stream_id=_sid("TS"),
            mime_type="text/plain",
            topic=topic,
            timestamp=int(time.time() * 1000),
            size=len(text.encode()),
            attributes=dict(attributes or {}),
            attachments=[],
        )

    async def read_all(self) -> str:
        return self._text

    def __aiter__(self) -> FakeTextReader:
        self._done = False
        return self

    async def __anext__(self) -> str:
        if self._done:
            raise StopAsyncIteration
        self._done = True
        return self._text

    def close(self) -> None:
        pass


@dataclass
class FakeRemoteParticipant:
    """A user in the room: the attributes RoomIO and ``wait_for_participant`` read."""

    identity: str
    name: str = ""
    kind: int = rtc.ParticipantKind.PARTICIPANT_KIND_STANDARD
    state: int = rtc.ParticipantState.PARTICIPANT_STATE_ACTIVE
    sid: str = field(default_factory=lambda: _sid("PA"))
    metadata: str = ""
    attributes: dict[str, str] = field(default_factory=dict)
    track_publications: dict[str, Any] = field(default_factory=dict)
    disconnect_reason: int | None = None


class FakeLocalParticipant:
    """The agent's participant: records everything it sends; RPC handlers by method."""

    def __init__(self, room: FakeRoom, identity: str) -> None:
        self._room = room
        self.identity = identity
        self.name = ""
        self.sid = _sid("PA")
        self.kind = rtc.ParticipantKind.PARTICIPANT_KIND_AGENT
        self.metadata = ""
        self.attributes: dict[str, str] = {}
        self.track_publications: dict[str, Any] = {}
        self.streams: list[SentStream] = []
        """Every text stream sent (``send_text`` and ``stream_text``), in the order they
        were opened."""
        self.attribute_updates: list[dict[str, str]] = []
        """Each ``set_attributes`` call's argument, in order."""
        self.byte_streams: list[tuple[str, list[str] | None, bytes]] = []
        self.transcriptions: list[rtc.Transcription] = []
        self.rpc_handlers: dict[str, Callable[[rtc.RpcInvocationData], Any]] = {}
        self._changed = asyncio.Condition()
        self._read: dict[str, int] = defaultdict(int)

    # --- what the agent calls -----------------------------------------------------------

    async def send_text(
        self,
        text: str,
        *,
        destination_identities: list[str] | None = None,
        topic: str = "",
        attributes: dict[str, str] | None = None,
        reply_to_id: str | None = None,
        compress: bool = True,
    ) -> rtc.TextStreamInfo:
        writer = await self.stream_text(
            destination_identities=destination_identities, topic=topic, attributes=attributes
        )
        await writer.write(text)
        await writer.aclose()
        return writer.info

    async def stream_text(
        self,
        *,
        destination_identities: list[str] | None = None,
        topic: str = "",
        attributes: dict[str, str] | None = None,
        stream_id: str | None = None,
        reply_to_id: str | None = None,
        total_size: int | None = None,
        sender_identity: str | None = None,
    ) -> FakeTextWriter:
        self._check_connected()
        await asyncio.sleep(0)  # a network write yields to the loop
        stream = SentStream(topic, destination_identities, dict(attributes or {}))
        self.streams.append(stream)
        return FakeTextWriter(self, stream)

    async def send_bytes(
        self,
        data: bytes,
        *,
        topic: str = "",
        name: str | None = None,
        mime_type: str | None = None,
        destination_identities: list[str] | None = None,
        attributes: dict[str, str] | None = None,
        stream_id: str | None = None,
        compress: bool = True,
    ) -> rtc.ByteStreamInfo:
        self._check_connected()
        await asyncio.sleep(0)
        self.byte_streams.append((topic, destination_identities, data))
        return rtc.ByteStreamInfo(
            stream_id=stream_id or _sid("BS"),
            mime_type=mime_type or "application/octet-stream",
            topic=topic,
            timestamp=int(time.time() * 1000),
            size=len(data),
            attributes=dict(attributes or {}),
            name=name or "unknown",
        )

    async def set_attributes(self, attributes: dict[str, str]) -> None:
        self._check_connected()
        await asyncio.sleep(0)
        self.attributes.update(attributes)  # LiveKit merges: other keys are kept
        self.attribute_updates.append(dict(attributes))
        await self._notify()

    async def publish_transcription(self, transcription: rtc.Transcription) -> None:
        self._check_connected()
        self.transcriptions.append(transcription)

    def register_rpc_method(
        self, method_name: str, handler: Callable[[rtc.RpcInvocationData], Any] | None = None
    ) -> Any:
        def register(function: Callable[[rtc.RpcInvocationData], Any]) -> Any:
            self.rpc_handlers[method_name] = function
            return function

        return register(handler) if handler is not None else register

    def unregister_rpc_method(self, method: str) -> None:
        self.rpc_handlers.pop(method, None)

    # --- what the test calls ------------------------------------------------------------

    async def call(self, method: str, payload: str, *, caller: str) -> str:
        """Call a registered RPC method as a remote ``performRpc`` from ``caller`` does
        (raises ``rtc.RpcError`` as the caller would receive it)."""
        handler = self.rpc_handlers.get(method)
        if handler is None:
            raise rtc.RpcError(rtc.RpcError.ErrorCode.UNSUPPORTED_METHOD, "Method not supported")
        data = rtc.RpcInvocationData(_sid("RQ"), caller, payload, 10.0, method)
        answer: str = await handler(data)
        return answer

    def sent(self, topic: str) -> list[SentStream]:
        """The whole (closed) streams sent on ``topic``, in the order they were opened."""
        return [s for s in self.streams if s.topic == topic and s.closed]

    async def next_text(self, topic: str) -> SentStream:
        """The next whole stream on ``topic`` after the ones this returned before."""
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(self.sent(topic)) > self._read[topic]),
                WAIT,
            )
            stream = self.sent(topic)[self._read[topic]]
            self._read[topic] += 1
            return stream

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition()`` holds, checked whenever the agent sent something."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(condition), WAIT)

    # --- internals ----------------------------------------------------------------------

    def _check_connected(self) -> None:
        if not self._room.isconnected():
            raise ConnectionError("the room is disconnected")

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()


class FakeRoom(rtc.EventEmitter[str]):
    """A connected room named ``name`` with the agent as its local participant."""

    def __init__(self, name: str = "fake-room", *, agent_identity: str = "agent-coach") -> None:
        super().__init__()
        self.name = name
        self.metadata = ""
        self.connection_state = rtc.ConnectionState.CONN_CONNECTED
        self.remote_participants: dict[str, FakeRemoteParticipant] = {}
        self.local_participant = FakeLocalParticipant(self, agent_identity)
        self.text_stream_handlers: dict[str, Callable[..., None]] = {}
        self.byte_stream_handlers: dict[str, Callable[..., None]] = {}

    def isconnected(self) -> bool:
        return self.connection_state == rtc.ConnectionState.CONN_CONNECTED

    async def connect(self, url: str, token: str, options: Any = None) -> None:
        self.connection_state = rtc.ConnectionState.CONN_CONNECTED
        self.emit("connection_state_changed", self.connection_state)

    async def disconnect(self) -> None:
        if not self.isconnected():
            return
        self.connection_state = rtc.ConnectionState.CONN_DISCONNECTED
        self.emit("connection_state_changed", self.connection_state)
        self.emit("disconnected", rtc.DisconnectReason.CLIENT_INITIATED)

    def register_text_stream_handler(self, topic: str, handler: Callable[..., None]) -> None:
        if topic in self.text_stream_handlers:
            raise ValueError(f"A text stream handler for topic '{topic}' is already set.")
        self.text_stream_handlers[topic] = handler

    def unregister_text_stream_handler(self, topic: str) -> None:
        self.text_stream_handlers.pop(topic, None)

    def register_byte_stream_handler(self, topic: str, handler: Callable[..., None]) -> None:
        if topic in self.byte_stream_handlers:
            raise ValueError(f"A byte stream handler for topic '{topic}' is already set.")
        self.byte_stream_handlers[topic] = handler

    def unregister_byte_stream_handler(self, topic: str) -> None:
        self.byte_stream_handlers.pop(topic, None)

    # --- the user's side ----------------------------------------------------------------

    def join(self, identity: str, name: str = "") -> FakeRemoteParticipant:
        """A participant joins (and is active at once, as after its first connection)."""
        participant = FakeRemoteParticipant(identity=identity, name=name)
        self.remote_participants[identity] = participant
        self.emit("participant_connected", participant)
        self.emit("participant_active", participant)
        return participant

    def type(self, identity: str, text: str, topic: str = "lk.chat") -> None:
        """``identity`` sends ``text`` as a text stream on ``topic`` (a chat message)."""
        if identity not in self.remote_participants:
            raise ValueError(f"{identity} is not in the room")
        handler = self.text_stream_handlers.get(topic)
        if handler is None:
            raise AssertionError(f"nobody in the room handles text streams on {topic!r}")
        handler(FakeTextReader(text, topic), identity)
