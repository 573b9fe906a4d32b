"""Answers that are not replies: a proxy's HTML page with status 200, a completion with
neither text nor a tool call. Each is a failed model turn, as a 503 is: one line, the
turn counted as failed, the error counted in the metrics. The real openai plugin, over
HTTP, driven through the chat."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from livekit.agents import APIConnectOptions, APIError, llm
from prometheus_client import REGISTRY

from coach.models import build_llm
from coach.settings import Settings
from coach.surfaces.chat import EXIT_MODEL_FAILED, run_chat
from coach.testing import FakeOpenAIServer, say
from tests.support import keys_url

from .test_chat_cli import SECRET

PAGE = "<html><body><h1>502 Bad Gateway</h1><p>nginx</p></body></html>"


@pytest.fixture
async def html_server() -> AsyncIterator[str]:
    """A model server behind a proxy that answers every request with its error page."""

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}/v1"
    finally:
        await runner.cleanup()


def model_errors() -> float:
    labels = {"type": "llm_error", "recoverable": "false"}
    return REGISTRY.get_sample_value("coach_model_errors_total", labels) or 0.0


async def chat(url: str, database_url: str, lines: str) -> tuple[int, str, str]:
    settings = Settings(
        database_url=database_url,
        keys_url=keys_url(database_url),
        secret_key=SECRET,
        llm_base_url=url,
        llm_model="fake",
    )
    out, err = io.StringIO(), io.StringIO()
    code = await run_chat(settings, user="ada", stdin=io.StringIO(lines), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


async def test_an_html_page_with_status_200_is_a_failed_turn(
    html_server: str, sqlite_url: str
) -> None:
    before = model_errors()
    code, out, err = await chat(html_server, sqlite_url, "hello\n")
    assert code == EXIT_MODEL_FAILED
    assert out == ""
    # The greeting and the one line of input: one line each, naming server and reason.
    lines = err.splitlines()
    assert len(lines) == 2, err
    for line in lines:
        # A local server is retried once (COACH_LLM_RETRIES).
        assert line.startswith(f"coach: the model at {html_server} did not answer after 2 "), line
        assert "no reply and no tool call" in line and "text/html" in line, line
        assert line.endswith("say it again to retry, or type exit."), line
    assert model_errors() == before + 2


async def test_a_completion_without_text_or_tool_call_is_a_failed_turn(
    sqlite_url: str,
) -> None:
    # An empty greeting (each of the two attempts), then a real reply to the next line.
    async with FakeOpenAIServer([say(""), say(""), say("Hello!")]) as server:
        url, before = server.base_url, model_errors()
        code, out, err = await chat(url, sqlite_url, "hello\n")
    assert code == EXIT_MODEL_FAILED
    assert out == "coach> Hello!\n"
    (line,) = err.splitlines()
    assert line.startswith(f"coach: the model at {url} did not answer after 2 attempts"), line
    assert "no reply and no tool call" in line, line
    assert model_errors() == before + 1


async def test_an_abandoned_request_is_closed_not_left_to_a_one_at_a_time_server() -> None:
    # A local server that takes one request at a time and never answers: each attempt
    # the read timeout abandons must close its connection, or the server keeps
    # generating for nobody while the retry waits behind it.
    attempts: list[asyncio.Event] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        closed = asyncio.Event()
        attempts.append(closed)
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        await writer.drain()
        while await reader.read(4096):  # b"" once the client has closed its side
            pass
        closed.set()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    settings = Settings(llm_base_url=f"http://127.0.0.1:{port}/v1", llm_retries=1)
    model = build_llm(settings)
    try:
        options = APIConnectOptions(timeout=0.5, max_retry=settings.llm_max_retry)
        stream = model.chat(chat_ctx=llm.ChatContext.empty(), conn_options=options)
        with pytest.raises(APIError):
            async with stream:
                async for _ in stream:
                    pass
        assert len(attempts) == 2  # a local server is retried once
        await asyncio.wait_for(asyncio.gather(*(a.wait() for a in attempts)), 30)  # guard
    finally:
        await model.aclose()
        server.close()
        await server.wait_closed()
