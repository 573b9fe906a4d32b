"""The local speech server through the real OpenAI STT and TTS plugins."""

from __future__ import annotations

import numpy as np
import pytest
from livekit import rtc
from livekit.agents import APIConnectOptions, APIStatusError
from livekit.plugins import openai

from coach.testing.speech_server import STT_SAMPLE_RATE, SpeechServer, synthesize

pytestmark = pytest.mark.voice

RESUME = "let's continue my sign up redesign"


def frame(pcm: bytes, *, pad: float = 0.5) -> rtc.AudioFrame:
    silence = b"\0" * int(STT_SAMPLE_RATE * pad) * 2
    data = silence + pcm + silence
    return rtc.AudioFrame(data, STT_SAMPLE_RATE, 1, len(data) // 2)


async def test_speech_is_real_audio_at_the_rate_the_plugin_decodes() -> None:
    async with SpeechServer() as server:
        tts = openai.TTS(base_url=server.base_url, api_key="x")
        short = [ev.frame async for ev in tts.synthesize("Hello.")]
        long = [ev.frame async for ev in tts.synthesize("Hello. What shall we design today?")]
        await tts.aclose()
    assert server.spoken == ["Hello.", "Hello. What shall we design today?"]
    assert {f.sample_rate for f in short + long} == {24_000}
    seconds = sum(f.duration for f in long)
    # espeak-ng speaks at about 175 words a minute: six words take seconds, not a blip
    assert 1.0 < seconds < 6.0
    assert seconds > 2 * sum(f.duration for f in short)
    loudest = max(int(np.abs(np.frombuffer(f.data, dtype=np.int16)).max()) for f in long)
    assert loudest > 5_000  # speech, not silence


async def test_recognition_with_a_phrase_grammar_hears_espeak_exactly() -> None:
    async with SpeechServer(phrases=[RESUME, "my name is ada", "stop"]) as server:
        stt = openai.STT(base_url=server.base_url, api_key="x")
        pcm = await synthesize(RESUME, sample_rate=STT_SAMPLE_RATE)
        event = await stt.recognize([frame(pcm)])
        await stt.aclose()
    assert event.alternatives[0].text == RESUME
    assert server.recognised[0].source == "pocketsphinx"


async def test_registered_audio_is_recognised_by_its_fingerprint_only() -> None:
    async with SpeechServer() as server:
        stt = openai.STT(base_url=server.base_url, api_key="x")
        ada = await synthesize("my name is ada", sample_rate=STT_SAMPLE_RATE)
        other = await synthesize("i would like a cup of tea", sample_rate=STT_SAMPLE_RATE)
        server.register(ada, STT_SAMPLE_RATE, "My name is Ada.")
        heard = await stt.recognize([frame(ada, pad=0.8)])
        unknown = await stt.recognize([frame(other)])
        await stt.aclose()
    assert heard.alternatives[0].text == "My name is Ada."
    assert [r.source for r in server.recognised] == ["fingerprint", "pocketsphinx"]
    assert unknown.alternatives[0].text != "My name is Ada."


async def test_an_outage_answers_503_until_it_ends() -> None:
    async with SpeechServer() as server:
        stt = openai.STT(base_url=server.base_url, api_key="x")
        server.outage.add("transcriptions")
        pcm = await synthesize("stop", sample_rate=STT_SAMPLE_RATE)
        with pytest.raises(APIStatusError) as failed:
            await stt.recognize([frame(pcm)], conn_options=APIConnectOptions(max_retry=0))
        assert failed.value.status_code == 503
        server.outage.clear()
        assert (await stt.recognize([frame(pcm)])).alternatives[0].text is not None
        await stt.aclose()
