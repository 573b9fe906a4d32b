"""A local OpenAI-compatible speech server: real synthesis and real recognition, offline.

It lets the real ``livekit.plugins.openai`` STT and TTS plugins (and so their HTTP
clients, audio decoding and the framework's VAD-wrapped recognition) run end to end::

    async with SpeechServer(phrases=["let's continue my sign up redesign"]) as server:
        stt = openai.STT(base_url=server.base_url, api_key="x")
        tts = openai.TTS(base_url=server.base_url, api_key="x")

Endpoints:

* ``POST /v1/audio/speech`` — synthesises ``input`` with Debian's ``espeak-ng``. The body is
  mono 16-bit PCM at 24 kHz (the rate the plugin decodes at): raw (``audio/pcm``) unless
  ``response_format`` is ``wav`` (``audio/wav``). Other formats (mp3, opus, …) are answered
  with raw PCM, declared as such in ``Content-Type``, which the plugin honours.
* ``POST /v1/audio/transcriptions`` — recognises the uploaded WAV. First, audio a test
  registered (:meth:`SpeechServer.register`) is recognised by its fingerprint and answered
  with the registered transcript (deterministic flows); otherwise PyPI's ``pocketsphinx``
  decodes it with its bundled English model — restricted to ``phrases`` (a JSGF grammar)
  when given, since its open-vocabulary model hears espeak-ng's voice poorly.

:attr:`SpeechServer.outage` makes an endpoint answer HTTP 503 (a speech service down
mid-call). Run it by hand for a fully local voice setup::

    python -m coach.testing.speech_server --port 8766 --phrase "let's continue my sign up redesign"
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import io
import re
import shutil
import sys
import threading
import wave
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from aiohttp import BodyPartReader, web
from livekit import rtc

from .local_server import LocalServer

__all__ = [
    "TTS_SAMPLE_RATE",
    "STT_SAMPLE_RATE",
    "Recognition",
    "SpeechServer",
    "fingerprint",
    "resample",
    "synthesize",
]

TTS_SAMPLE_RATE = 24_000
"""What ``/v1/audio/speech`` returns (the OpenAI TTS plugin decodes at this rate)."""
STT_SAMPLE_RATE = 16_000
"""What pocketsphinx's bundled model recognises."""

Endpoint = Literal["speech", "transcriptions"]

_ESPEAK = "espeak-ng"
_WINDOW_S = 0.01  # fingerprint envelope resolution
_MATCH = 0.9  # least correlation of envelopes that counts as the registered utterance
_SILENCE = 300  # |sample| under which synthesized audio counts as silence (trimmed)


# -- audio helpers ---------------------------------------------------------------------


def resample(pcm: bytes, from_rate: int, to_rate: int) -> bytes:
    """Mono 16-bit PCM at ``from_rate``, resampled to ``to_rate``."""
    if from_rate == to_rate or not pcm:
        return pcm
    resampler = rtc.AudioResampler(
        from_rate, to_rate, num_channels=1, quality=rtc.AudioResamplerQuality.HIGH
    )
    frame = rtc.AudioFrame(pcm, from_rate, 1, len(pcm) // 2)
    return b"".join(bytes(f.data) for f in [*resampler.push(frame), *resampler.flush()])


def _trim(pcm: bytes) -> bytes:
    """Drop the silence espeak-ng leaves before and after the speech."""
    samples = np.frombuffer(pcm, dtype=np.int16)
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > _SILENCE)
    if loud.size == 0:
        return pcm
    return samples[loud[0] : loud[-1] + 1].tobytes()


def _wav_data(raw: bytes) -> tuple[bytes, int]:
    """The PCM and rate of a 16-bit mono RIFF WAV whose sizes may be unset (streamed)."""
    if raw[:4] != b"RIFF" or raw[8:12] != b"WAVE":
        raise ValueError("not a RIFF/WAVE file")
    rate, pos = 0, 12
    while pos + 8 <= len(raw):
        chunk, size = raw[pos : pos + 4], int.from_bytes(raw[pos + 4 : pos + 8], "little")
        body = pos + 8
        if chunk == b"fmt ":
            channels = int.from_bytes(raw[body + 2 : body + 4], "little")
            rate = int.from_bytes(raw[body + 4 : body + 8], "little")
            bits = int.from_bytes(raw[body + 14 : body + 16], "little")
            if channels != 1 or bits != 16:
                raise ValueError(f"expected mono 16-bit audio, got {channels} ch {bits} bit")
        elif chunk == b"data":
            pcm = raw[body:] if size in (0, 0xFFFFFFFF, 0x7FFFFFFF) else raw[body : body + size]
            return pcm[: len(pcm) // 2 * 2], rate
        pos = body + size + (size & 1)
    raise ValueError("WAV file has no data chunk")


def _to_wav(pcm: bytes, rate: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return out.getvalue()


async def synthesize(text: str, *, sample_rate: int = TTS_SAMPLE_RATE) -> bytes:
    """``text`` spoken by espeak-ng: mono 16-bit PCM at ``sample_rate``, silence trimmed.

    Raises:
        RuntimeError: espeak-ng is not installed, or failed.
    """
    if shutil.which(_ESPEAK) is None:
        raise RuntimeError("espeak-ng is not installed (Debian: apt-get install espeak-ng)")
    # A subprocess, not a blocking call: the server shares its loop with the agent in tests.
    proc = await asyncio.create_subprocess_exec(
        _ESPEAK,
        "--stdout",
        "--",
        text,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"espeak-ng failed: {err.decode(errors='replace').strip()}")
    pcm, rate = _wav_data(out)
    return resample(_trim(pcm), rate, sample_rate)


def fingerprint(pcm: bytes, sample_rate: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    """The utterance's loudness envelope (RMS per 10 ms): survives resampling and framing."""
    samples = np.frombuffer(resample(pcm, sample_rate, STT_SAMPLE_RATE), dtype=np.int16)
    window = int(STT_SAMPLE_RATE * _WINDOW_S)
    count = len(samples) // window
    blocks = samples[: count * window].astype(np.float64).reshape(count, window)
    envelope: np.ndarray[Any, np.dtype[np.float64]] = np.sqrt((blocks**2).mean(axis=1))
    return envelope


def _best_correlation(
    short: np.ndarray[Any, np.dtype[np.float64]], long: np.ndarray[Any, np.dtype[np.float64]]
) -> float:
    """The highest Pearson correlation of ``short`` against every window of ``long``."""
    n = len(short)
    if n < 5 or len(long) < n:
        return 0.0
    s = (short - short.mean()) / (short.std() or 1.0)
    windows = np.lib.stride_tricks.sliding_window_view(long, n)
    means = windows.mean(axis=1, keepdims=True)
    stds = windows.std(axis=1, keepdims=True)
    stds[stds == 0] = 1.0
    return float((((windows - means) / stds) @ s).max() / n)


# -- the server ------------------------------------------------------------------------


@dataclass(frozen=True)
class Recognition:
    """One transcription request, as answered.

    Attributes:
        text: The transcript sent back.
        source: ``"fingerprint"`` (registered audio) or ``"pocketsphinx"``.
        duration: Seconds of audio received.
    """

    text: str
    source: Literal["fingerprint", "pocketsphinx"]
    duration: float


@dataclass
class _Registered:
    digest: str
    envelope: np.ndarray[Any, np.dtype[np.float64]]
    transcript: str


class SpeechServer(LocalServer):
    """A local OpenAI-compatible ``/v1/audio/speech`` and ``/v1/audio/transcriptions``.

    Args:
        phrases: What callers are expected to say. When given, pocketsphinx recognises
            against exactly these phrases (a JSGF grammar, lower-case words from its
            dictionary) instead of its open-vocabulary model.
        host: Interface to bind.
        port: Port to bind; ``0`` picks a free one (read it back from :attr:`base_url`).

    Attributes:
        outage: Endpoints that answer HTTP 503 until removed (a speech service down).
        spoken: Every text synthesised, in order.
        recognised: Every transcription answered, in order.
    """

    def __init__(
        self,
        phrases: Iterable[str] = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.phrases = [_normalise(p) for p in phrases]
        self.outage: set[Endpoint] = set()
        self.spoken: list[str] = []
        self.recognised: list[Recognition] = []
        self._registered: list[_Registered] = []
        super().__init__(host=host, port=port)

    def register(self, pcm: bytes, sample_rate: int, transcript: str) -> str:
        """Answer ``transcript`` for audio that holds ``pcm`` (its fingerprint).

        Returns:
            The utterance's id: the SHA-256 of its PCM.
        """
        digest = hashlib.sha256(pcm).hexdigest()
        self._registered.append(_Registered(digest, fingerprint(pcm, sample_rate), transcript))
        return digest

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/audio/speech", self._speech)
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        return app

    # -- handlers ------------------------------------------------------------------------

    async def _speech(self, request: web.Request) -> web.StreamResponse:
        if "speech" in self.outage:
            return _error(503, "speech synthesis is unavailable", "service_unavailable")
        try:
            body = await request.json()
            text = str(body["input"])
        except (ValueError, KeyError, TypeError):
            return _error(400, "expected a JSON body with `input`", "invalid_request_error")
        self.spoken.append(text)
        pcm = await synthesize(text) if text.strip() else b""
        if body.get("response_format") == "wav":
            return web.Response(body=_to_wav(pcm, TTS_SAMPLE_RATE), content_type="audio/wav")
        return web.Response(body=pcm, content_type="audio/pcm")

    async def _transcriptions(self, request: web.Request) -> web.StreamResponse:
        if "transcriptions" in self.outage:
            return _error(503, "speech recognition is unavailable", "service_unavailable")
        upload: bytes | None = None
        fields: dict[str, str] = {}
        try:
            reader = await request.multipart()
            async for part in reader:
                if not isinstance(part, BodyPartReader):
                    continue
                if part.name == "file":
                    upload = bytes(await part.read())
                elif part.name:
                    fields[part.name] = await part.text()
            if upload is None:
                raise ValueError("no `file` part")
            pcm, rate = _wav_data(upload)
        except (ValueError, AssertionError) as exc:
            return _error(400, f"bad transcription request: {exc}", "invalid_request_error")
        recognition = await self.recognise(pcm, rate)
        self.recognised.append(recognition)
        if fields.get("response_format") == "text":
            return web.Response(text=recognition.text)
        return web.json_response({"text": recognition.text})

    async def recognise(self, pcm: bytes, sample_rate: int) -> Recognition:
        """What this server hears in ``pcm``: a registered transcript, or pocketsphinx's."""
        duration = len(pcm) / 2 / sample_rate
        heard = fingerprint(pcm, sample_rate)
        best: tuple[float, str] | None = None
        for known in self._registered:
            short, long = (known.envelope, heard)
            if len(heard) < len(known.envelope):
                # the recogniser got less than the whole utterance: match what it got
                if len(heard) < 0.6 * len(known.envelope):
                    continue
                short, long = heard, known.envelope
            score = _best_correlation(short, long)
            if score >= _MATCH and (best is None or score > best[0]):
                best = (score, known.transcript)
        if best is not None:
            return Recognition(best[1], "fingerprint", duration)
        audio = resample(pcm, sample_rate, STT_SAMPLE_RATE)
        # pocketsphinx is CPU-bound for a few hundred ms: off the loop the agent runs on
        text = await asyncio.to_thread(_decode, audio, tuple(self.phrases))
        return Recognition(text, "pocketsphinx", duration)


def _normalise(phrase: str) -> str:
    return " ".join(re.sub(r"[^a-z' ]", " ", phrase.lower()).split())


@functools.lru_cache(maxsize=8)
def _decoder(phrases: tuple[str, ...]) -> Any:
    from pocketsphinx import Decoder  # imported late: loading its model takes a moment

    decoder = Decoder(samprate=STT_SAMPLE_RATE, loglevel="FATAL")
    if phrases:
        rule = " | ".join(f"( {p} )" for p in phrases)
        decoder.add_jsgf_string("phrases", f"#JSGF V1.0;\ngrammar phrases;\npublic <s> = {rule};\n")
        decoder.activate_search("phrases")
    return decoder


_decode_lock = threading.Lock()


def _decode(pcm: bytes, phrases: tuple[str, ...]) -> str:
    # A faint noise floor, as any microphone has, plus half a second of it on each side:
    # pocketsphinx's feature normalisation misjudges speech framed by digital silence.
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.int32)
    pad = np.zeros(STT_SAMPLE_RATE // 2, dtype=np.int32)
    samples = np.concatenate([pad, samples, pad])
    noise = np.random.default_rng(0).normal(0, 30, samples.size).astype(np.int32)
    pcm = np.clip(samples + noise, -32768, 32767).astype(np.int16).tobytes()
    with _decode_lock:  # one decoder per grammar, used by one thread at a time
        decoder = _decoder(phrases)
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
    return str(hyp.hypstr) if hyp is not None else ""


def _error(status: int, message: str, kind: str) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": None, "code": kind}}
    return web.json_response(body, status=status)


async def _serve_forever(server: SpeechServer) -> None:
    async with server:
        print(f"SpeechServer: espeak-ng and pocketsphinx at {server.base_url}", flush=True)
        await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    """Serve speech synthesis and recognition until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m coach.testing.speech_server",
        description="A local OpenAI-compatible speech server (espeak-ng, pocketsphinx).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766, help="0 picks a free port")
    parser.add_argument(
        "--phrase",
        action="append",
        default=[],
        help="a phrase callers will say (repeat); recognition is then limited to these",
    )
    args = parser.parse_args(argv)
    if shutil.which(_ESPEAK) is None:
        print("SpeechServer: espeak-ng is not installed", file=sys.stderr)
        raise SystemExit(1)
    try:
        asyncio.run(_serve_forever(SpeechServer(args.phrase, host=args.host, port=args.port)))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
