"""Model plugins built from settings: any OpenAI-compatible server for LLM, STT and TTS.

A text chat needs the OpenAI plugin's LLM alone: the silero VAD plugin is imported when a
voice worker loads it (:func:`load_plugins`) or builds the VAD.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from livekit.agents import NOT_GIVEN, APIConnectOptions, APIError, APIStatusError, llm
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, NotGivenOr
from livekit.agents.vad import VAD
from livekit.plugins import openai
from livekit.plugins.openai import llm as openai_llm

from .settings import Settings


def load_plugins() -> None:
    """Import the VAD plugin on the main thread: LiveKit knows a plugin by its import
    (``download-files`` fetches its files, job processes preload it), and refuses one
    imported on another thread."""
    from livekit.plugins import silero  # noqa: F401


@dataclass(frozen=True)
class VoiceModels:
    """The model clients of a voice conversation: built once per worker process, in
    ``prewarm``, so a job never builds them on its event loop (each builds an HTTP
    client with its TLS context)."""

    llm: openai.LLM
    stt: openai.STT
    tts: openai.TTS

    @classmethod
    def build(cls, settings: Settings) -> VoiceModels:
        """Build the three clients (ConfigError when no LLM is configured)."""
        return cls(build_llm(settings), build_stt(settings), build_tts(settings))


OPENAI_URL = "https://api.openai.com/v1"
_ATTEMPTS = re.compile(r"after (\d+) attempts")


def llm_url(settings: Settings) -> str:
    """The base URL of the chat model's server."""
    return settings.llm_base_url or OPENAI_URL


def describe_model_error(error: APIError, url: str) -> str:
    """One line for a failed model turn: which server, what went wrong, how often tried.

    ``error`` is what the plugin raises once its retries are spent; its causes hold the
    server's own answer (a status error) or the network's reason (a connection error).
    """
    last: APIError = error
    root: BaseException = error
    while root.__cause__ is not None:
        root = root.__cause__
        if isinstance(root, APIError):
            last = root
    if isinstance(last, APIStatusError):
        detail = last.body.get("message") if isinstance(last.body, dict) else None
        reason = f"HTTP {last.status_code}: {detail or last.message}"
    elif root is not error:
        reason = f"{type(root).__name__}: {root}".rstrip(": ")
    else:
        reason = str(error) or type(error).__name__
    attempts = _ATTEMPTS.search(str(error))
    tried = f" after {attempts.group(1)} attempts" if attempts else ""
    reason = " ".join(reason.split())
    return f"the model at {url} did not answer{tried} ({reason[:300]})"


NO_REPLY = "no reply and no tool call in the answer"


class _ReplyOrError(openai_llm.LLMStream):
    """The plugin's stream, where an answer with neither text nor a tool call is an error.

    A proxy's error page sent with status 200 (or a model that stops at once) is no
    stream of chunks: the plugin would end the turn without a word. Raised as a status
    error, it is retried, reported and counted as a 503 is.
    """

    _answered = False

    def _parse_choice(self, *args: Any, **kwargs: Any) -> llm.ChatChunk | None:
        chunk: llm.ChatChunk | None = super()._parse_choice(*args, **kwargs)
        if chunk is not None and chunk.delta is not None:
            if chunk.delta.content or chunk.delta.tool_calls:
                self._answered = True
        return chunk

    async def _run(self) -> None:
        self._answered = False  # per attempt
        await super()._run()
        if not self._answered:
            response = getattr(self._oai_stream, "response", None)
            kind = response.headers.get("content-type") if response is not None else None
            raise APIStatusError(
                f"{NO_REPLY} (Content-Type: {kind or 'none'})", status_code=200, retryable=True
            )


class ChatModel(openai_llm.LLM):
    """The openai plugin's LLM, for any OpenAI-compatible server, whose every answer is
    either a reply, a tool call or an error (see :class:`_ReplyOrError`)."""

    def chat(
        self,
        *,
        chat_ctx: llm.ChatContext,
        tools: list[llm.Tool] | None = None,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        parallel_tool_calls: NotGivenOr[bool] = NOT_GIVEN,
        tool_choice: NotGivenOr[llm.ToolChoice] = NOT_GIVEN,
        response_format: NotGivenOr[Any] = NOT_GIVEN,
        extra_kwargs: NotGivenOr[dict[str, Any]] = NOT_GIVEN,
    ) -> openai_llm.LLMStream:
        stream = super().chat(
            chat_ctx=chat_ctx,
            tools=tools,
            conn_options=conn_options,
            parallel_tool_calls=parallel_tool_calls,
            tool_choice=tool_choice,
            response_format=response_format,
            extra_kwargs=extra_kwargs,
        )
        # The plugin builds its stream inside chat() and gives no way to choose its class;
        # the stream's task first runs on the loop's next turn, so every attempt of it
        # runs the subclass's checks.
        stream.__class__ = _ReplyOrError
        return stream


def _key(settings: Settings) -> str:
    # A local OpenAI-compatible server ignores the key, but the client requires one.
    if settings.openai_api_key is not None:
        return settings.openai_api_key.get_secret_value()
    return "not-needed"


def build_llm(settings: Settings) -> openai.LLM:
    """The chat model. Raises ConfigError when neither OpenAI nor a base URL is configured.

    The request timeout is set per session (``Runtime.new_session``): the plugin applies
    the session's connect options to every request.
    """
    settings.require_llm()
    return ChatModel(
        model=settings.llm_model,
        api_key=_key(settings),
        base_url=llm_url(settings),
        temperature=NOT_GIVEN if settings.llm_temperature is None else settings.llm_temperature,
        **_token_cap(settings),
    )


def _token_cap(settings: Settings) -> dict[str, Any]:
    # OpenAI's newer models refuse `max_tokens`; `max_tokens` is the name every
    # OpenAI-compatible server reads (llama.cpp's server reads no other).
    if settings.llm_base_url is None:
        return {"max_completion_tokens": settings.llm_max_tokens}
    return {"extra_body": {"max_tokens": settings.llm_max_tokens}}


def build_stt(settings: Settings) -> openai.STT:
    """Speech-to-text (OpenAI, or a compatible server via COACH_STT_BASE_URL)."""
    return openai.STT(
        model=settings.stt_model,
        api_key=_key(settings),
        base_url=settings.stt_base_url or settings.llm_base_url or OPENAI_URL,
    )


def build_tts(settings: Settings) -> openai.TTS:
    """Text-to-speech (OpenAI, or a compatible server via COACH_TTS_BASE_URL)."""
    return openai.TTS(
        model=settings.tts_model,
        voice=settings.tts_voice,
        api_key=_key(settings),
        base_url=settings.tts_base_url or settings.llm_base_url or OPENAI_URL,
    )


def load_vad() -> VAD:
    """The silero voice-activity detector (loaded once per worker process)."""
    from livekit.plugins import silero  # voice only: a text chat needs no VAD

    return silero.VAD.load()
