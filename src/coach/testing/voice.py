"""A spoken conversation with an ``AgentSession``, driven turn by turn.

:class:`VoiceCall` wires a session to a caller (:mod:`coach.testing.caller`), the local
speech server and the fake OpenAI server, and logs the session's own events (user and
agent states, transcripts, conversation items, metrics, errors, close) so a test waits on
what happened instead of sleeping::

    call = await VoiceCall.open(session, speech, llm_server, agent)
    turn = await call.say("my name is ada", [call("identify_user", name="Ada"), say("Hi!")])
    turn.latency  # end of the caller's speech -> first frame of the agent's reply
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from livekit.agents import Agent, AgentSession, metrics
from livekit.plugins import openai

from .caller import CallerMic, CallerSpeaker, Events, Heard, Spoken, Utterance, attach
from .openai_server import FakeOpenAIServer
from .script import Reply
from .speech_server import SpeechServer

__all__ = ["PHRASES", "Turn", "VoiceCall", "speech_models"]

PHRASES = [
    "let's continue my sign up redesign",
    "my name is ada",
    "continue",
    "stop",
    "wait stop",
]
"""What callers say to a server's real recogniser (its grammar)."""

HANG = 90.0
"""Hang guard for one spoken turn on a starved machine; not a time budget."""


def speech_models(speech: SpeechServer) -> tuple[openai.STT, openai.TTS]:
    """The real OpenAI STT and TTS plugins, against the local speech server."""
    stt = openai.STT(base_url=speech.base_url, api_key="x")
    tts = openai.TTS(base_url=speech.base_url, api_key="x")
    return stt, tts


@dataclass
class Turn:
    """One caller turn and what the caller heard back."""

    said: Spoken
    transcript: str
    heard: list[Heard] = field(default_factory=list)

    @property
    def latency(self) -> float | None:
        """End of the caller's speech -> the first frame of the agent's answer."""
        first = next((h.first_frame_at for h in self.heard if h.first_frame_at), None)
        return None if first is None else first - self.said.ended_at


class VoiceCall:
    """A session with a caller attached, and everything that happened in it."""

    def __init__(
        self,
        session: AgentSession[Any],
        speech: SpeechServer,
        llm_server: FakeOpenAIServer | None,
        *,
        collect_metrics: bool = False,
    ) -> None:
        self.session = session
        self.speech = speech
        self.llm_server = llm_server
        self.mic: CallerMic
        self.speaker: CallerSpeaker
        self.mic, self.speaker = attach(session)
        self.log = Events()
        self.metrics: list[metrics.AgentMetrics] = []
        for name in (
            "agent_state_changed",
            "user_state_changed",
            "user_input_transcribed",
            "conversation_item_added",
            "error",
            "close",
        ):
            session.on(name, self._logger(name))
        if collect_metrics:
            session.on("metrics_collected", lambda ev: self.metrics.append(ev.metrics))

    def _logger(self, name: str) -> Any:
        return lambda ev: self.log.add((name, ev, time.time()))

    @classmethod
    async def open(
        cls,
        session: AgentSession[Any],
        speech: SpeechServer,
        llm_server: FakeOpenAIServer | None,
        agent: Agent,
        *,
        greeting: Sequence[Reply] = (),
        collect_metrics: bool = False,
    ) -> VoiceCall:
        """Attach a caller, start the session, and wait until its greeting was heard."""
        call = cls(session, speech, llm_server, collect_metrics=collect_metrics)
        if llm_server is not None:
            llm_server.extend(greeting)
        await session.start(agent)
        await call.until_listening(0)
        return call

    async def until_listening(self, start: int) -> None:
        """Wait until the agent spoke (from log entry ``start`` on) and listens again."""
        spoke = await self.log.wait_for(
            lambda e: e[0] == "agent_state_changed" and e[1].new_state == "speaking",
            start=start,
            guard=HANG,
        )
        await self.log.wait_for(
            lambda e: e[0] == "agent_state_changed" and e[1].new_state == "listening",
            start=self.log.items.index(spoke),
            guard=HANG,
        )
        # the synchroniser has reported the last segment's end by now
        await asyncio.wait_for(self.speaker.wait_for_playout(), HANG)

    async def utterance(self, text: str, transcript: str | None = None) -> Utterance:
        """``text`` spoken; the server answers ``transcript`` for it unless it is None
        and ``text`` is one of :data:`PHRASES` (then it is recognised for real)."""
        utterance = await Utterance.synthesise(text)
        if transcript is not None or text not in PHRASES:
            utterance.register(self.speech, transcript or text)
        return utterance

    async def say(
        self,
        text: str,
        replies: Sequence[Reply] = (),
        *,
        transcript: str | None = None,
    ) -> Turn:
        """The caller says ``text``; the model answers ``replies``; wait until the answer
        has been heard and the agent listens again."""
        utterance = await self.utterance(text, transcript)
        if self.llm_server is not None:
            self.llm_server.extend(replies)
        start = len(self.log.items)
        segments = len(self.speaker.segments)
        said = await self.mic.say(utterance)
        final = await self.log.wait_for(
            lambda e: e[0] == "user_input_transcribed" and e[1].is_final,
            start=start,
            guard=HANG,
        )
        await self.until_listening(self.log.items.index(final))
        return Turn(said, final[1].transcript, self.speaker.segments[segments:])

    def items(self, kind: str) -> list[Any]:
        """The events of one kind logged so far."""
        return [e[1] for e in self.log.items if e[0] == kind]

    async def aclose(self) -> None:
        await self.session.aclose()
        self.mic.close()
        await self.speaker.aclose()
