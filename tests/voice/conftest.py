"""Spoken conversations: a caller's microphone and loudspeaker, the real silero VAD, the
real OpenAI STT/TTS/LLM plugins against the local speech server and the fake OpenAI
server, and coach's runtime with its real recorder.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from livekit.agents.vad import VAD

from coach.conversation.runtime import Runtime
from coach.models import load_vad
from coach.settings import Settings
from coach.testing import FakeOpenAIServer
from coach.testing.speech_server import SpeechServer
from coach.testing.voice import PHRASES
from tests.support import MEMORY_SECRET


@pytest.fixture(scope="session")
def vad() -> VAD:
    """The silero VAD, loaded once (as a worker process loads it in prewarm)."""
    return load_vad()


@pytest.fixture
async def speech() -> AsyncIterator[SpeechServer]:
    async with SpeechServer(phrases=PHRASES) as server:
        yield server


@pytest.fixture
async def llm_server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
async def sqlite_runtime(sqlite_url: str) -> AsyncIterator[Runtime]:
    """A runtime on SQLite only, for flows where the database does not matter."""
    opened = await Runtime.open(
        Settings(
            database_url=sqlite_url,
            secret_key=MEMORY_SECRET.decode(),
            llm_base_url="http://127.0.0.1:9/v1",
            recorder_shutdown_timeout=5,
        )
    )
    yield opened
    await opened.aclose()
