"""A caller on the other end of an ``AgentSession``: a microphone and a loudspeaker in code.

:class:`CallerMic` is an ``io.AudioInput`` that plays pre-synthesised utterances at
real-time pace, in 10 ms frames, with a faint noise floor between them (as a real
microphone has); the caller may start talking at any moment, also while the agent speaks.
:class:`CallerSpeaker` is an ``io.AudioOutput`` that plays the agent's audio at real-time
pace (so an interruption cuts a reply where a listener in a room would be cut off) and
records every segment heard: when it started, how much played, whether it was cut.
:func:`attach` plugs both into a session, with the framework's transcript synchroniser in
between so an interrupted reply is stored as far as it was heard::

    mic, speaker = attach(session)
    ada = await Utterance.synthesise("my name is ada")
    await mic.say(ada)           # returns when the last sample has been "spoken"

Nothing here sleeps to synchronise: the pacing sleeps are the audio clock itself. Tests
wait on :class:`Events` (playback started/finished) and on the session's own events.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from livekit import rtc
from livekit.agents import AgentSession
from livekit.agents.voice import io
from livekit.agents.voice.transcription import TranscriptSynchronizer

from .speech_server import STT_SAMPLE_RATE, SpeechServer, synthesize

__all__ = ["CallerMic", "CallerSpeaker", "Events", "Heard", "Utterance", "attach"]

FRAME_S = 0.01
_NOISE = 30  # amplitude of the microphone's noise floor (16-bit)
_PIECE_S = 0.02
_PROGRESS_S = 0.25
_MAX_LAG_S = 0.5  # a starved loop catches up this much in a burst, then drops the rest


class Events:
    """An append-only log of things that happened, that a test can wait on.

    ``wait_for`` returns the first entry (from ``start``) matching a predicate, waiting
    for it when it has not happened yet; ``guard`` (seconds) is a hang guard, not a budget.
    """

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._changed = asyncio.Event()

    def add(self, item: Any) -> None:
        self.items.append(item)
        self._changed.set()

    async def wait_for(
        self, predicate: Callable[[Any], bool], *, start: int = 0, guard: float = 60.0
    ) -> Any:
        async def scan() -> Any:
            index = start
            while True:
                while index < len(self.items):
                    if predicate(self.items[index]):
                        return self.items[index]
                    index += 1
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(scan(), guard)


@dataclass(frozen=True)
class Utterance:
    """Something the caller says: its text and its audio (16 kHz mono 16-bit PCM)."""

    text: str
    pcm: bytes
    sample_rate: int = STT_SAMPLE_RATE

    @property
    def duration(self) -> float:
        return len(self.pcm) / 2 / self.sample_rate

    @classmethod
    async def synthesise(cls, text: str) -> Utterance:
        """``text`` spoken by espeak-ng."""
        return cls(text, await synthesize(text, sample_rate=STT_SAMPLE_RATE))

    def register(self, server: SpeechServer, transcript: str | None = None) -> Utterance:
        """Have ``server`` answer ``transcript`` (default: the text) for this audio."""
        server.register(self.pcm, self.sample_rate, transcript or self.text)
        return self


@dataclass
class Spoken:
    """One utterance as the microphone played it (``time.time()`` stamps)."""

    utterance: Utterance
    started_at: float = 0.0
    ended_at: float = 0.0


class CallerMic(io.AudioInput):
    """The caller's microphone: utterances at real-time pace, a noise floor in between."""

    def __init__(self, *, sample_rate: int = STT_SAMPLE_RATE) -> None:
        super().__init__(label="caller-mic")
        self.sample_rate = sample_rate
        self.spoken: list[Spoken] = []
        self._samples = int(sample_rate * FRAME_S)
        self._queue: deque[tuple[Spoken, bytes, asyncio.Future[Spoken]]] = deque()
        self._offset = 0
        self._next_at: float | None = None
        self._closed = False
        self._rng = np.random.default_rng(7)

    async def say(self, utterance: Utterance) -> Spoken:
        """Start saying ``utterance`` (after anything still being said); return once said."""
        if utterance.sample_rate != self.sample_rate:
            raise ValueError("utterance and microphone sample rates differ")
        spoken = Spoken(utterance)
        done: asyncio.Future[Spoken] = asyncio.get_running_loop().create_future()
        self._queue.append((spoken, utterance.pcm, done))
        return await done

    def close(self) -> None:
        """End the audio stream (the caller hung up)."""
        self._closed = True

    async def __anext__(self) -> rtc.AudioFrame:
        if self._closed:
            raise StopAsyncIteration
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._next_at is None or now - self._next_at > _MAX_LAG_S:
            self._next_at = now
        delay = self._next_at - now
        if delay > 0:
            await asyncio.sleep(delay)  # the audio clock: one frame every 10 ms
        self._next_at += FRAME_S
        return self._frame()

    def _frame(self) -> rtc.AudioFrame:
        noise = self._rng.normal(0, _NOISE, self._samples).astype(np.int32)
        size = self._samples * 2
        if self._queue:
            spoken, pcm, done = self._queue[0]
            if self._offset == 0:
                spoken.started_at = time.time()
            chunk = pcm[self._offset : self._offset + size]
            self._offset += size
            speech = np.frombuffer(chunk.ljust(size, b"\0"), dtype=np.int16).astype(np.int32)
            noise = noise + speech
            if self._offset >= len(pcm):
                spoken.ended_at = time.time()
                self._queue.popleft()
                self._offset = 0
                self.spoken.append(spoken)
                if not done.done():
                    done.set_result(spoken)
        data = np.clip(noise, -32768, 32767).astype(np.int16).tobytes()
        return rtc.AudioFrame(data, self.sample_rate, 1, self._samples)


@dataclass
class Heard:
    """One segment of the agent's audio as the caller heard it (``time.time()`` stamps).

    Attributes:
        captured: Seconds of audio the agent sent for this segment.
        played: Seconds the caller heard before it ended or was cut off.
        first_frame_at: When its first frame started playing.
        ended_at: When it finished playing or was cleared.
        interrupted: The agent cleared it before it had all played.
        transcript: What the transcript synchroniser says was heard (when it knows).
    """

    captured: float = 0.0
    played: float = 0.0
    first_frame_at: float | None = None
    ended_at: float | None = None
    interrupted: bool = False
    transcript: str | None = None
    flushed: bool = False
    frames: deque[rtc.AudioFrame] = field(default_factory=deque, repr=False)


class CallerSpeaker(io.AudioOutput):
    """The caller's loudspeaker: plays the agent's audio at real-time pace and records it.

    Attributes:
        segments: Every segment, in order (also those still playing).
        events: ``("started", Heard)`` and ``("finished", Heard)`` entries, in order.
    """

    def __init__(self) -> None:
        super().__init__(
            label="caller-speaker",
            capabilities=io.AudioOutputCapabilities(pause=False),
            sample_rate=None,
        )
        self.segments: list[Heard] = []
        self.events = Events()
        self._capturing: Heard | None = None
        self._discarding = False
        self._wake = asyncio.Event()
        self._player: asyncio.Task[None] | None = None
        self.synchronizer: TranscriptSynchronizer | None = None

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        await super().capture_frame(frame)
        if self._discarding:
            return  # the rest of a segment the agent already cleared
        if self._capturing is None:
            self._capturing = Heard()
            self.segments.append(self._capturing)
        self._capturing.captured += frame.duration
        # 20 ms pieces: how finely a cut-off reply knows how much of it was heard
        self._capturing.frames.extend(_pieces(frame, _PIECE_S))
        if self._player is None or self._player.done():
            self._player = asyncio.create_task(self._play(), name="caller-speaker")
        self._wake.set()

    def flush(self) -> None:
        super().flush()
        if self._capturing is not None:
            self._capturing.flushed = True
            self._wake.set()
        self._capturing = None
        self._discarding = False

    def clear_buffer(self) -> None:
        if self._capturing is not None:
            self._discarding = True
        self._capturing = None
        for heard in self.segments:
            if heard.ended_at is None:
                self._finish(heard, interrupted=True)
        self._wake.set()

    async def played(self, heard: Heard, seconds: float, *, guard: float = 60.0) -> None:
        """Wait until ``seconds`` of ``heard`` have played (or it ended sooner)."""
        await self.events.wait_for(
            lambda e: e[1] is heard and (heard.played >= seconds or heard.ended_at is not None),
            guard=guard,
        )

    async def aclose(self) -> None:
        """Stop the playback task (and the transcript synchroniser in front of it)."""
        if self.synchronizer is not None:
            await self.synchronizer.aclose()
        if self._player is not None:
            self._player.cancel()
            await asyncio.gather(self._player, return_exceptions=True)

    def _finish(self, heard: Heard, *, interrupted: bool) -> None:
        heard.ended_at = time.time()
        heard.interrupted = interrupted
        heard.frames.clear()
        self.on_playback_finished(playback_position=heard.played, interrupted=interrupted)
        self.events.add(("finished", heard))

    async def _play(self) -> None:
        loop = asyncio.get_running_loop()
        clock = loop.time()
        while True:
            heard = next((h for h in self.segments if h.ended_at is None), None)
            if heard is None or (not heard.frames and not heard.flushed):
                self._wake.clear()
                await self._wake.wait()
                continue
            if not heard.frames:  # flushed and all played
                self._finish(heard, interrupted=False)
                continue
            frame = heard.frames.popleft()
            if heard.first_frame_at is None:
                heard.first_frame_at = time.time()
                clock = loop.time()
                self.on_playback_started(created_at=heard.first_frame_at)
                self.events.add(("started", heard))
            clock = max(clock, loop.time() - _MAX_LAG_S) + frame.duration
            delay = clock - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)  # the audio clock: the frame is being heard
            if heard.ended_at is None:
                before = heard.played
                heard.played += frame.duration
                if int(heard.played / _PROGRESS_S) > int(before / _PROGRESS_S):
                    self.events.add(("progress", heard))


def _pieces(frame: rtc.AudioFrame, seconds: float) -> list[rtc.AudioFrame]:
    step = max(1, int(frame.sample_rate * seconds))
    data = bytes(frame.data)
    width = 2 * frame.num_channels
    return [
        rtc.AudioFrame(
            data[start * width : (start + step) * width],
            frame.sample_rate,
            frame.num_channels,
            min(step, frame.samples_per_channel - start),
        )
        for start in range(0, frame.samples_per_channel, step)
    ]


def attach(session: AgentSession[Any]) -> tuple[CallerMic, CallerSpeaker]:
    """Give ``session`` a caller's microphone and loudspeaker (call before ``start``).

    The loudspeaker sits behind the framework's transcript synchroniser, as in a room, so
    an interrupted reply is known (and stored) only as far as it was heard.
    """
    mic, speaker = CallerMic(), CallerSpeaker()
    sync = TranscriptSynchronizer(next_in_chain_audio=speaker, next_in_chain_text=None)
    speaker.synchronizer = sync  # closed with the speaker
    session.input.audio = mic
    session.output.audio = sync.audio_output
    session.output.transcription = sync.text_output
    return mic, speaker
